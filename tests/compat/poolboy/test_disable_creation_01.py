"""Poolboy's test/roles/poolboy_test_simple/tasks/test-disable-creation-01.yaml, in lessor's terms.

A provider with `disableCreation`: its claim waits unbound (lessor says why: `Bound=False`,
`WaitingForPool`) until an admin makes a free-standing handle (no pool, no claim) that matches; the claim
then binds that handle itself and gets its resource.
"""

from __future__ import annotations

from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import get, gone

from .lab import OPS, TEST_KIND, Scenario, bound_to, has, state, value_provider


async def test_a_claim_of_a_provider_without_creation_binds_the_free_standing_handle_made_later(
        scenario: Scenario, until) -> None:
    provider, claim_name, handle_name = (scenario.name("test-disable-creation-01"), "test-disable-creation-01",
                                         f"guid-{scenario.suffix}")
    await scenario.put(value_provider(scenario, provider, disableCreation=True))
    await scenario.put(scenario.poolboy("ResourceClaim", claim_name, {"resources": [
        {"provider": scenario.provider_ref(provider), "template": {"spec": {"value": "foo"}}}]}))

    waiting = await until(CLAIM, scenario.namespace, claim_name, has("Bound", "WaitingForPool", "False"))
    assert waiting["status"]["resources"][0]["provider"]["name"] == provider
    assert bound_to(waiting) is None

    await scenario.put(scenario.poolboy("ResourceHandle", handle_name, {"resources": [
        {"provider": scenario.provider_ref(provider), "template": {"spec": {"value": "foo"}}}]}))

    bound = await until(CLAIM, scenario.namespace, claim_name, lambda c: bound_to(c) == handle_name
                        and state(c) is not None)
    assert has("Bound", "Bound")(bound)
    made = state(bound)
    assert made is not None and made["spec"] == {"value": "foo"}
    assert made["metadata"]["name"] == f"{provider}-{scenario.suffix}"  # the handle's guid names it
    handle = await get(scenario.kube, HANDLE, OPS, handle_name)
    assert handle is not None and handle["spec"]["resourceClaim"] == {"name": claim_name,
                                                                     "namespace": scenario.namespace}

    await scenario.kube.delete(CLAIM, scenario.namespace, claim_name)
    await gone(scenario.kube, HANDLE, OPS, handle_name)  # a bound handle goes with its claim, as in Poolboy
    await gone(scenario.kube, TEST_KIND, scenario.namespace, made["metadata"]["name"])
