"""The administrator's import (Poolboy's test-ignore-01), as a rule: which resource lessor did not create a
handle may adopt (`ownership.imported`). Against the real API server: tests/app/test_ownership.py and
tests/compat/poolboy/test_ignore_01.py."""

from __future__ import annotations

from typing import Any

import pytest

from lessor.actors.provisioning.ownership import imported

REFERENCE = {"apiVersion": "v1", "kind": "ConfigMap", "namespace": "team", "name": "db-abcde"}
HANDMADE: dict[str, Any] = {"metadata": {"name": "db-abcde", "namespace": "team",
                                         "annotations": {"poolboy.gpte.redhat.com/resource-handle-name": "guid-abcde"}}}


def handle(status: Any) -> dict[str, Any]:
    return {"metadata": {"name": "guid-abcde", "namespace": "lessor-system"}, "spec": {}, "status": status}


def test_a_status_lessor_never_wrote_that_names_the_rendered_resource_adopts_it() -> None:
    assert imported(handle({"resources": [{"reference": dict(REFERENCE)}]}), 0, REFERENCE, HANDMADE)


@pytest.mark.parametrize(("status", "index", "found"), [
    (None, 0, HANDMADE),
    ({"resources": [{"name": "db"}]}, 0, HANDMADE),
    ({"resources": [{"reference": dict(REFERENCE)}]}, 1, HANDMADE),
    ({"resources": [{"reference": {**REFERENCE, "namespace": "other"}}]}, 0, HANDMADE),
    ({"resources": [{"reference": {**REFERENCE, "kind": "Secret"}}]}, 0, HANDMADE),
    ({"resources": [{"reference": {**REFERENCE, "name": "db-other"}}]}, 0, HANDMADE),
    ({"resources": [{"reference": dict(REFERENCE)}], "conditions": [{"type": "Rendered", "status": "False"}]}, 0,
     HANDMADE),
    ({"resources": [{"reference": dict(REFERENCE)}]}, 0, {"metadata": {"name": "db-abcde", "labels": {
        "lessor.dev/resource-handle-name": "guid-other", "lessor.dev/resource-handle-namespace": "lessor-system"}}}),
], ids=["no status", "no reference", "another entry's", "another namespace", "another kind", "another name",
        "lessor judged the handle already", "another handle's resource"])
def test_anything_else_is_never_adopted(status: Any, index: int, found: dict[str, Any]) -> None:
    assert not imported(handle(status), index, REFERENCE, found)
