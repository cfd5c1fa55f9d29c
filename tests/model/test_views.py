"""Views read any shape a user may write: a malformed field reads as missing, never raises."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lessor.model.views import Meta, View


def test_meta_types_what_it_can_and_leaves_out_what_it_cannot() -> None:
    meta = Meta.of({"metadata": {
        "name": "l1", "namespace": "lab", "generation": 3, "resourceVersion": "42",
        "labels": {"team": "qa", "bad": 7}, "annotations": ["not", "a", "map"],
        "creationTimestamp": "2026-11-26T10:00:00Z", "deletionTimestamp": "2026-11-26T11:00:00Z",
        "ownerReferences": [{"kind": "ResourceClaim", "name": "c"}, "junk"]}})
    assert (meta.name, meta.namespace, meta.generation, meta.resource_version) == ("l1", "lab", 3, "42")
    assert meta.labels == {"team": "qa"} and meta.annotations == {}
    assert meta.created == datetime(2026, 11, 26, 10, tzinfo=UTC) and meta.deleting
    assert meta.owners == ({"kind": "ResourceClaim", "name": "c"},)


@pytest.mark.parametrize("body", [{}, {"metadata": None, "spec": "x", "status": 3},
                                  {"metadata": {"name": 5, "generation": True, "labels": "a=b"}}])
def test_a_malformed_object_reads_as_empty(body: dict[str, Any]) -> None:
    view = View.of(body)
    assert (view.name, view.meta.generation, dict(view.meta.labels), dict(view.spec), dict(view.status)) == \
        ("", None, {}, {}, {})
    assert View.maybe(None) is None and not view.meta.ignored
