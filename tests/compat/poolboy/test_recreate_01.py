"""Poolboy's recreate-01 (test/roles/poolboy_test_simple/tasks/test-recreate-01.yaml): a claim that names its
resource, deleted and created again under the same name, gets a new handle and its resource back."""

from __future__ import annotations

from lessor.gateway import Gateway
from tests.polling import gone, until

from .support_templates import (  # noqa: F401 (the fixtures' functions)
    CLAIM,
    HANDLE,
    OPS,
    TEST_KIND,
    Scenario,
    claim_test_kind_fixture,
    has_state,
    named_like,
    override_for,
    poolboy_claim,
    poolboy_provider,
    scenario_fixture,
)


async def test_a_recreated_claim_gets_a_new_handle_and_its_named_resource_again(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("recreate-01")
    await scenario.create(poolboy_provider(provider, {"override": override_for(namespace, spec={"foo": "bar"}),
                                                      "validation": named_like("recreate-01")}))
    claim_doc = poolboy_claim("recreate-01", namespace, {"resources": [
        {"provider": {"name": provider}, "template": {"metadata": {"name": "recreate-01-a"}}}]})

    await scenario.create(claim_doc)
    first = await until(kube, CLAIM, namespace, "recreate-01", has_state)
    assert first["status"]["resources"][0]["state"]["metadata"]["name"] == "recreate-01-a"
    assert (await kube.get(TEST_KIND, namespace, "recreate-01-a"))["spec"]["foo"] == "bar"
    old_handle = first["status"]["resourceHandle"]["name"]

    await kube.delete(CLAIM, namespace, "recreate-01")
    await gone(kube, CLAIM, namespace, "recreate-01")
    await gone(kube, HANDLE, OPS, old_handle)
    await gone(kube, TEST_KIND, namespace, "recreate-01-a")

    await scenario.create(claim_doc)
    again = await until(kube, CLAIM, namespace, "recreate-01", has_state)
    assert again["status"]["resourceHandle"]["name"] != old_handle
    assert again["status"]["resources"][0]["state"]["metadata"]["name"] == "recreate-01-a"
    assert (await kube.get(TEST_KIND, namespace, "recreate-01-a"))["spec"]["foo"] == "bar"
