"""Poolboy's test-01 (test/roles/poolboy_test_simple/tasks/test-01.yaml): a claim names its resource, which the
provider's schema allows; the resource is made with that name, and goes with the claim."""

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


async def test_a_claim_names_its_resource(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("test-01")
    await scenario.create(
        poolboy_provider(provider, {"override": override_for(namespace, spec={"foo": "bar"}),
                                    "validation": named_like("test-01")}),
        poolboy_claim("test-01", namespace, {"resources": [{"provider": {"name": provider},
                                                            "template": {"metadata": {"name": "test-01-a"}}}]}))
    assert not [n for n in scenario.notes if n.field.endswith("template.metadata.name")]  # the name carries over

    claim = await until(kube, CLAIM, namespace, "test-01", has_state)
    assert len(claim["status"]["resources"]) == 1
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == "test-01-a"
    made = await kube.get(TEST_KIND, namespace, "test-01-a")
    assert made["spec"]["foo"] == "bar"

    handle = claim["status"]["resourceHandle"]["name"]
    await kube.delete(CLAIM, namespace, "test-01")
    await gone(kube, CLAIM, namespace, "test-01")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, "test-01-a")
