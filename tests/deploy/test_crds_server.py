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


GO_DURATION = ("must be a Go duration such as 90s, 2h or 1h30m (days are not accepted: write 24h for a day), "
               "at most 876000h (100 years)")
LIFESPAN = ("must be a duration such as 30m, 12h, 1d or 1d12h (units ns, us, ms, s, m, h, and d for days; no sign), "
            "at most 36500d (100 years)")
TIME = "must be an RFC 3339 time such as 2030-01-01T09:00:00Z or 2030-01-01T11:00:00+02:00, in the years 1970 to 8999"
LEASE_SPEC = {"clientRef": {"name": "c"}, "selector": {"matchLabels": {"board": "x"}}}
POOL_SPEC = {"resources": [{"provider": {"name": "p"}}]}
CLAIM_SPEC = {"resources": [{"provider": {"name": "p"}}]}

# (resource, spec with a typo, the field, the sentence it is refused with, the spec with the typo fixed)
TYPOS: list[tuple[Resource, dict[str, Any], str, str, dict[str, Any]]] = [
    (LEASE, {**LEASE_SPEC, "duration": "abc"}, "spec.duration", GO_DURATION, {**LEASE_SPEC, "duration": "1h30m"}),
    (LEASE, {**LEASE_SPEC, "duration": "1d"}, "spec.duration", GO_DURATION, {**LEASE_SPEC, "duration": "24h"}),
    (LEASE, {**LEASE_SPEC, "beginTime": "tomorrow"}, "spec.beginTime", TIME,
     {**LEASE_SPEC, "beginTime": "2030-01-01T09:00:00Z"}),
    (LEASE, {**LEASE_SPEC, "endTime": "0001-01-01T00:00:00Z"}, "spec.endTime", TIME,
     {**LEASE_SPEC, "endTime": "2030-01-01T11:00:00.5+02:00"}),
    (POLICY, {"policies": [{"maximumDuration": "2d"}]}, "spec.policies[0].maximumDuration", GO_DURATION,
     {"policies": [{"maximumDuration": "48h"}]}),
    (PROVIDER, {"lifespan": {"maximum": "1w"}}, "spec.lifespan.maximum", LIFESPAN, {"lifespan": {"maximum": "7d"}}),
    (POOL, {**POOL_SPEC, "lifespan": {"unclaimed": "-1d"}}, "spec.lifespan.unclaimed", LIFESPAN,
     {**POOL_SPEC, "lifespan": {"unclaimed": "1d12h"}}),
    (HANDLE, {**CLAIM_SPEC, "lifespan": {"default": "2 days"}}, "spec.lifespan.default", LIFESPAN,
     {**CLAIM_SPEC, "lifespan": {"default": "2d"}}),
    (CLAIM, {**CLAIM_SPEC, "lifespan": {"end": "2030-02-01"}}, "spec.lifespan.end", TIME,
     {**CLAIM_SPEC, "lifespan": {"end": "2030-02-01T00:00:00Z"}}),
]


@pytest.mark.parametrize(("res", "typo", "field", "sentence", "fixed"), TYPOS,
                         ids=[f"{t[0].kind}-{t[2]}" for t in TYPOS])
async def test_a_typo_is_refused_with_a_sentence_not_a_regex(
    kube: Gateway, namespace: str, res: Resource, typo: dict[str, Any], field: str, sentence: str,
    fixed: dict[str, Any],
) -> None:
    """The API server's whole answer is one line naming the field, the value and what it must be."""
    obj = {"apiVersion": API, "kind": res.kind, "metadata": {"name": "typo"}}
    with pytest.raises(ApiError) as refused:
        await kube.create(res, namespace, {**obj, "spec": typo})
    assert refused.value.status == 422, refused.value
    (value,) = set(_leaves(typo)) - set(_leaves(fixed))
    assert f'{field}: Invalid value: "{value}": {sentence}' in refused.value.message, refused.value.message
    assert "should match" not in refused.value.message and "^" not in refused.value.message
    await kube.create(res, namespace, {**obj, "spec": fixed})


def _leaves(value: Any) -> list[str]:
    if isinstance(value, dict):
        return [leaf for v in value.values() for leaf in _leaves(v)]
    if isinstance(value, list):
        return [leaf for v in value for leaf in _leaves(v)]
    return [str(value)]


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
