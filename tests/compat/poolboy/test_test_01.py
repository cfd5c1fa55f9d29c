"""Poolboy's test-01 (test/roles/poolboy_test_simple/tasks/test-01.yaml): a claim names its resource, which the
provider's schema allows; the resource is made with that name, and goes with the claim."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, TEST_KIND, Scenario, condition, has_state, named_like


async def test_a_claim_names_its_resource(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("test-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {"override": scenario.override(spec={"foo": "bar"}),
                                                        "validation": named_like("test-01")}),
        scenario.poolboy("ResourceClaim", "test-01", {"resources": [{"provider": {"name": provider},
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


async def test_a_named_resource_that_lessor_did_not_create_is_a_conflict_never_taken_over(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    """lessor's ownership rule holds for names a claim chooses: someone else's object is left as it is."""
    provider = scenario.name("test-01-own")
    theirs = {"apiVersion": TEST_KIND.api_version, "kind": "ResourceClaimTest",
              "metadata": {"name": "test-01-b"}, "spec": {"foo": "theirs"}}
    await kube.create(TEST_KIND, namespace, theirs)
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {"override": scenario.override(spec={"foo": "bar"}),
                                                        "validation": named_like("test-01")}),
        scenario.poolboy("ResourceClaim", "test-01-b", {"resources": [{"provider": {"name": provider},
                                                                       "template": {"metadata": {"name": "test-01-b"}}}]}))
    claim = await until(kube, CLAIM, namespace, "test-01-b", lambda c: condition(c, "Ready").get("reason")
                        == "ResourceConflict")
    assert "test-01-b" in condition(claim, "Ready")["message"]
    untouched = await kube.get(TEST_KIND, namespace, "test-01-b")
    assert untouched["spec"] == {"foo": "theirs"}
    assert not any(key.startswith("lessor.dev/") for key in untouched["metadata"].get("labels") or {})
