"""The CRDs on the real API server: malformed objects are refused naming the field; kubectl columns."""

from __future__ import annotations

from typing import Any

import pytest

from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER, Resource

API = "lessor.dev/v1alpha1"

# One malformed object per kind, and the field the API server must name in its refusal.
MALFORMED: list[tuple[Resource, dict[str, Any], str]] = [
    (EXPORTER, {"spec": {"enabled": "yes"}}, "spec.enabled"),
    (CLIENT, {"spec": {"username": 42}}, "spec.username"),
    (POLICY, {"spec": {"exporterSelector": {}, "policies": [{"priority": "high"}]}}, "spec.policies[0].priority"),
    (LEASE, {"spec": {"clientRef": {"name": "c"}, "duration": "forever"}}, "spec.duration"),
    (PROVIDER, {"spec": {"updateFilters": [{"pathMatch": "/x", "allowedOps": ["move"]}]}},
     "spec.updateFilters[0].allowedOps[0]"),
    (POOL, {"spec": {"minAvailable": -1, "resources": []}}, "spec.minAvailable"),
    (HANDLE, {"spec": {"resources": "none"}}, "spec.resources"),
    (CLAIM, {"spec": {"lifespan": {"end": "tomorrow"}}}, "spec.lifespan.end"),
]


@pytest.mark.parametrize(("res", "body", "field"), MALFORMED, ids=[m[0].kind for m in MALFORMED])
async def test_the_api_server_refuses_a_malformed_object_naming_the_field(
    kube: Gateway, namespace: str, res: Resource, body: dict[str, Any], field: str
) -> None:
    obj = {"apiVersion": API, "kind": res.kind, "metadata": {"name": "bad"}, **body}
    with pytest.raises(ApiError) as refused:
        await kube.create(res, namespace, obj)
    assert refused.value.status == 422, refused.value
    assert field in refused.value.message, refused.value.message


async def test_get_shows_useful_columns(kube: Gateway, namespace: str) -> None:
    """What `kubectl get` prints comes from the CRDs' printer columns (the Table API)."""
    await kube.create(LEASE, namespace, {"apiVersion": API, "kind": "Lease", "metadata": {"name": "l1"},
                                         "spec": {"clientRef": {"name": "alice"},
                                                  "selector": {"matchLabels": {"board": "x"}}}})
    table = await kube.request("list", "Lease", "GET", LEASE.path(namespace),
                               accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    columns = [c["name"] for c in table["columnDefinitions"]]
    assert {"Client", "Exporter", "Ready", "Ended", "Age"} <= set(columns), columns
    row = dict(zip(columns, table["rows"][0]["cells"], strict=True))
    assert row["Client"] == "alice"
