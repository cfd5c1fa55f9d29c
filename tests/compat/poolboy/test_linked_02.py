"""Poolboy's linked-02 (test/roles/poolboy_test_simple/tasks/test-linked-02.yaml): a provider with only
`linkedResourceProviders` creates nothing itself; a claim of it gets its linked provider's resource, and a change
of the claim's values reaches it.

Its link gives `stringvar | upper` to a provider whose parameter allows lower case only. Poolboy uses the value
unjudged, and so does the converted install: `lessor convert` sets `trustLinkedParameterValues` on the linked
provider and says so (docs/migrating.md; lessor's own default, which refuses it, is test_linked_03.py's)."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, PROVIDER
from tests.polling import until

from .lab import OPS, PARAMETERS, TEST_KIND, Scenario, condition, entries, has_state, parameters_spec


async def test_a_provider_with_only_links_gives_its_claims_the_linked_resources(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    base, linker = scenario.name("linked-02-base"), scenario.name("linked-02-links")
    naming = scenario.override({"name": "linked-02-{{ guid }}-{{ resource_name }}"})
    await scenario.put(
        scenario.poolboy("ResourceProvider", base, parameters_spec(naming, "{{ numbervar | int }}", "{{ stringvar }}")),
        scenario.poolboy("ResourceProvider", linker, {"parameters": PARAMETERS, "linkedResourceProviders": [{
            "name": base, "resourceName": "base",
            "parameterValues": {"numbervar": "{{ (numbervar * 10) | int }}", "stringvar": "{{ stringvar | upper }}"}}]}))
    await until(kube, PROVIDER, OPS, linker, lambda p: condition(p, "Valid").get("status") == "True")
    assert [(n.subject, n.verb) for n in scenario.notes if n.field == "spec.trustLinkedParameterValues"] == [
        (f"ResourceProvider poolboy/{base}", "changed")]
    assert not [str(n) for n in scenario.notes if n.loss]

    await scenario.put(scenario.poolboy("ResourceClaim", "linked-02-a", {"provider": {
        "name": linker, "parameterValues": {"stringvar": "one", "numbervar": 1}}}))
    claim = await until(kube, CLAIM, namespace, "linked-02-a", has_state)
    assert entries(claim) == [("base", base)]
    resource = f"linked-02-{claim['status']['resourceHandle']['name'][len('guid-'):]}-base"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    spec = (await kube.get(TEST_KIND, namespace, resource))["spec"]
    assert (spec["numbervalue"], spec["stringvalue"]) == (10, "ONE")

    await kube.merge_patch(CLAIM, namespace, "linked-02-a", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two", "numbervar": 2}}}})
    await until(kube, TEST_KIND, namespace, resource,
                lambda obj: (obj["spec"]["numbervalue"], obj["spec"]["stringvalue"]) == (20, "TWO"))
