"""Poolboy's recreate-01 (test/roles/poolboy_test_simple/tasks/test-recreate-01.yaml): a claim that names its
resource, deleted and created again under the same name, gets a new handle and its resource back."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, TEST_KIND, Scenario, has_state, named_like


async def test_a_recreated_claim_gets_a_new_handle_and_its_named_resource_again(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("recreate-01")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {"override": scenario.override(spec={"foo": "bar"}),
                                                                       "validation": named_like("recreate-01")}))
    claim_doc = scenario.poolboy("ResourceClaim", "recreate-01", {"resources": [
        {"provider": {"name": provider}, "template": {"metadata": {"name": "recreate-01-a"}}}]})

    await scenario.put(claim_doc)
    first = await until(kube, CLAIM, namespace, "recreate-01", has_state)
    assert first["status"]["resources"][0]["state"]["metadata"]["name"] == "recreate-01-a"
    assert (await kube.get(TEST_KIND, namespace, "recreate-01-a"))["spec"]["foo"] == "bar"
    old_handle = first["status"]["resourceHandle"]["name"]

    await kube.delete(CLAIM, namespace, "recreate-01")
    await gone(kube, CLAIM, namespace, "recreate-01")
    await gone(kube, HANDLE, OPS, old_handle)
    await gone(kube, TEST_KIND, namespace, "recreate-01-a")

    await scenario.put(claim_doc)
    again = await until(kube, CLAIM, namespace, "recreate-01", has_state)
    assert again["status"]["resourceHandle"]["name"] != old_handle
    assert again["status"]["resources"][0]["state"]["metadata"]["name"] == "recreate-01-a"
    assert (await kube.get(TEST_KIND, namespace, "recreate-01-a"))["spec"]["foo"] == "bar"
