"""Poolboy's pool-preference-01 (test/roles/poolboy_test_simple/tasks/test-pool-preference-01.yaml): two pools
of one template with preference scores 10 and 20; each pool's handle carries its pool's score, and a claim that
either could serve gets the handle of the pool that scores higher."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM
from tests.polling import until

from .lab import Scenario, bound_to, value_provider


async def test_a_claim_gets_the_handle_of_the_preferred_pool(kube: Gateway, namespace: str,
                                                             scenario: Scenario) -> None:
    provider = scenario.name("pool-preference-01")
    low, high = scenario.name("pool-preference-01-a"), scenario.name("pool-preference-01-b")

    def pool(name: str, score: int) -> dict[str, object]:
        return scenario.poolboy("ResourcePool", name, {"minAvailable": 1, "preferenceScore": score, "resources": [
            {"provider": scenario.provider_ref(provider), "template": {"spec": {"value": "foo"}}}]})

    await scenario.put(value_provider(scenario, provider), pool(low, 10), pool(high, 20))
    [low_handle] = await scenario.unbound(low, 1)
    [high_handle] = await scenario.unbound(high, 1)
    assert (low_handle["spec"]["preferenceScore"], high_handle["spec"]["preferenceScore"]) == (10, 20)

    await scenario.put(scenario.poolboy("ResourceClaim", "pool-preference-01", {"resources": [
        {"provider": {"name": provider}, "template": {"spec": {"value": "foo"}}}]}))
    claim = await until(kube, CLAIM, namespace, "pool-preference-01", lambda c: bound_to(c) is not None)
    assert bound_to(claim) == high_handle["metadata"]["name"]
