"""Poolboy's pool-01 (test/roles/poolboy_test_simple/tasks/test-pool-01.yaml): a pool keeps two unbound handles;
a claim for its template takes one of them (its resource named by that handle's guid) and the pool makes another;
deleting the pool deletes its unbound handles and leaves the bound one, which goes with its claim."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, POOL
from tests.polling import get, gone, until

from .lab import OPS, Scenario, bound_to, guid, has_state, value_provider


async def test_a_claim_takes_a_pool_handle_and_the_pool_replenishes(kube: Gateway, namespace: str,
                                                                    scenario: Scenario) -> None:
    provider, pool = scenario.name("pool-01"), scenario.name("pool-01")
    await scenario.put(
        value_provider(scenario, provider),
        scenario.poolboy("ResourcePool", pool, {"minAvailable": 2, "resources": [
            {"provider": scenario.provider_ref(provider), "template": {"spec": {"value": "foo"}}}]}))
    waiting = {h["metadata"]["name"] for h in await scenario.unbound(pool, 2)}

    await scenario.put(scenario.poolboy("ResourceClaim", "pool-01", {"resources": [
        {"provider": {"name": provider}, "template": {"spec": {"value": "foo"}}}]}))
    claim = await until(kube, CLAIM, namespace, "pool-01", has_state)
    handle = bound_to(claim) or ""
    assert handle in waiting
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == f"{provider}-{guid(claim)}"

    replenished = await scenario.unbound(pool, 2)  # one made since, next to the one left

    await kube.delete(POOL, OPS, pool)
    for unbound in replenished:
        await gone(kube, HANDLE, OPS, unbound["metadata"]["name"])
    kept = await get(kube, HANDLE, OPS, handle)
    assert kept is not None and kept["spec"]["resourceClaim"]["name"] == "pool-01"

    await kube.delete(CLAIM, namespace, "pool-01")
    await gone(kube, CLAIM, namespace, "pool-01")
    await gone(kube, HANDLE, OPS, handle)
