"""Poolboy's test/roles/poolboy_test_simple/tasks/test-pool-scaling-01.yaml, in lessor's terms.

ResourcePoolScalings of a pool in provider mode: one due now adds its handles on top of `minAvailable`; one
due tomorrow adds none until its `at` is moved to now; a scaling's handle that turns unhealthy is deleted
(`deleteUnhealthyResourceHandles`) and made again for the scaling. Deleting the pool takes them all.

One difference in the wording: Poolboy fails a handle by changing its `spec.provider.parameterValues`,
from which it renders the handle again. A lessor handle renders from its `spec.resources` (its
`spec.provider` records the values it was made from), so this test changes the value there.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

from lessor.gateway.resources import HANDLE, POOL, SCALING
from lessor.model.labels import POOL_SCALING
from tests.polling import gone, until

from .lab import OPS, Scenario


def of_scaling(handles: list[dict[str, Any]], scaling: str) -> list[str]:
    """The names of the handles made for `scaling`."""
    return sorted(h["metadata"]["name"] for h in handles
                  if (h["metadata"].get("labels") or {}).get(POOL_SCALING) == scaling)


async def test_scalings_of_a_provider_mode_pool_add_handles_when_due_and_replace_the_unhealthy(
        scenario: Scenario) -> None:
    kube = scenario.kube
    provider = pool = scenario.name("test-pool-scaling-01")
    now_scaling, later_scaling = scenario.name("test-pool-scaling-01-a"), scenario.name("test-pool-scaling-01-b")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "healthCheck": 'spec.value != "failed"',
        "override": scenario.override({"name": f"{provider}-{{{{ guid }}}}"}),
        "parameters": [{"name": "value", "allowUpdate": True, "validation": {"openAPIV3Schema": {"type": "string"}}}],
        "template": {"enable": True, "definition": {"spec": {"value": "{{ value }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}],
    }))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "deleteUnhealthyResourceHandles": True, "minAvailable": 1,
        "provider": {"name": provider, "parameterValues": {"value": "foo"}}}))
    await scenario.unbound(pool, 1)

    await scenario.put(scenario.poolboy("ResourcePoolScaling", now_scaling, {"count": 2,
                                                                             "resourcePool": {"name": pool}}))
    assert len(of_scaling(await scenario.unbound(pool, 3), now_scaling)) == 2

    tomorrow = (dt.datetime.now(dt.UTC) + dt.timedelta(days=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await scenario.put(scenario.poolboy("ResourcePoolScaling", later_scaling, {
        "at": tomorrow, "count": 2, "resourcePool": {"name": pool}}))
    waiting = await until(kube, SCALING, OPS, later_scaling, lambda s: (s.get("status") or {}).get("state"))
    assert waiting["status"]["state"] == "waiting" and waiting["status"]["count"] == 0
    assert of_scaling(await scenario.unbound(pool, 3), later_scaling) == []  # decided on, and nothing added

    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.merge_patch(SCALING, OPS, later_scaling, {"spec": {"at": now}})
    added = of_scaling(await scenario.unbound(pool, 5), later_scaling)
    assert len(added) == 2

    await kube.merge_patch(HANDLE, OPS, added[0], {"spec": {"resources": [
        {"provider": {"name": provider}, "template": {"spec": {"value": "failed"}}}]}})
    await gone(kube, HANDLE, OPS, added[0])
    replaced = of_scaling(await scenario.unbound(pool, 5), later_scaling)
    assert len(replaced) == 2 and added[0] not in replaced

    await kube.delete(POOL, OPS, pool)
    await scenario.unbound(pool, 0, reported=False)
