"""Poolboy's test/roles/poolboy_test_simple/tasks/test-pool-04.yaml, in lessor's terms.

A pool in provider mode whose handles fail the provider's `healthCheck`: the unhealthy handle is shown so
(`status.healthy`, and per resource) and never given to a claim, which gets a handle of its own. With
`deleteUnhealthyResourceHandles` and values that pass the check, the unhealthy handle is deleted and
replaced by a healthy one (not ready: the `readinessCheck` asks more).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.gateway.resources import CLAIM, HANDLE, POOL
from tests.polling import gone, until

from .lab import OPS, Scenario, bound_to, state


def health(handle: Mapping[str, Any]) -> tuple[Any, ...]:
    """(ready, healthy) of the handle, then of its resource, as its status says them."""
    status = handle.get("status") or {}
    resource = (status.get("resources") or [{}])[0]
    return status.get("ready"), status.get("healthy"), resource.get("ready"), resource.get("healthy")


async def test_an_unhealthy_pool_handle_is_never_bound_and_is_replaced_once_the_pool_may_delete_it(
        scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider = pool = scenario.name("test-pool-04")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "healthCheck": "spec.numbervalue > 0",
        "readinessCheck": "spec.numbervalue > 1",
        "override": scenario.override({"name": f"{provider}-{{{{ guid }}}}"}),
        "parameters": [{"name": "numbervar", "allowUpdate": True, "validation": {"openAPIV3Schema": {
            "type": "integer", "default": 0, "minimum": 0}}}],
        "template": {"enable": True, "definition": {"spec": {"numbervalue": "{{ numbervar | int }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}],
    }))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "minAvailable": 1, "provider": {"name": provider, "parameterValues": {"numbervar": 0}}}))

    [failed] = await scenario.unbound(pool, 1)
    failed = await until(kube, HANDLE, OPS, failed["metadata"]["name"], lambda h: health(h)[1] is not None)
    assert health(failed) == (False, False, False, False)

    await scenario.put(scenario.poolboy("ResourceClaim", "test-pool-04", {
        "provider": {"name": provider, "parameterValues": {"numbervar": 0}}}))
    claim = await until(kube, CLAIM, ns, "test-pool-04", lambda c: bound_to(c) is not None and state(c) is not None)
    assert bound_to(claim) != failed["metadata"]["name"]

    await kube.merge_patch(POOL, OPS, pool, {"spec": {"deleteUnhealthyResourceHandles": True,
                                                      "provider": {"parameterValues": {"numbervar": 1}}}})
    await gone(kube, HANDLE, OPS, failed["metadata"]["name"])
    [fresh] = await scenario.unbound(pool, 1)
    fresh = await until(kube, HANDLE, OPS, fresh["metadata"]["name"], lambda h: health(h)[1] is True)
    assert health(fresh) == (False, True, False, True)

    await kube.delete(POOL, OPS, pool)
    await scenario.unbound(pool, 0, reported=False)
    await kube.delete(CLAIM, ns, "test-pool-04")
    await gone(kube, HANDLE, OPS, bound_to(claim) or "")
