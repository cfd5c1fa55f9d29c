"""Poolboy's linked-03 (test/roles/poolboy_test_simple/tasks/test-linked-03.yaml): links chosen by `when` over
the claim's values, each waiting (`waitFor`) for its resource and reading it (`templateVars`).

A deliberate difference: the links give `stringvar | upper` to providers whose parameter allows lower case only.
Poolboy uses such values unjudged; lessor refuses the claim, naming the value and the linked provider's opt-in,
because a provider's parameter rules are what its templates rely on (docs/migrating.md). With the opt-in,
`trustLinkedParameterValues: true` on the linked providers, the claims get what Poolboy's scenario expects."""

from __future__ import annotations

from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, PROVIDER
from tests.polling import until

from .lab import OPS, PARAMETERS, Scenario, condition, entries, has_state, parameters_spec


def values(claim: dict[str, Any], index: int) -> tuple[Any, Any]:
    spec = claim["status"]["resources"][index]["state"]["spec"]
    return spec["numbervalue"], spec["stringvalue"]


async def test_links_chosen_by_when_and_linked_values_judged_unless_trusted(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    base_a, base_b = scenario.name("linked-03-a"), scenario.name("linked-03-b")
    binder = scenario.name("linked-03-when")
    naming = scenario.override({"name": "linked-03-{{ guid }}-{{ resource_name }}"})

    def link(name: str, when: str) -> dict[str, Any]:
        return {"name": name, "resourceName": "base", "when": when,
                "parameterValues": {"numbervar": "{{ numbervar | int }}", "stringvar": "{{ stringvar | upper }}"},
                "templateVars": [{"name": "base_numbervalue", "from": "/spec/numbervalue"},
                                 {"name": "base_stringvalue", "from": "/spec/stringvalue"}],
                "waitFor": "base_numbervalue | default(0) | int > 0"}

    await scenario.put(
        scenario.poolboy("ResourceProvider", base_a, parameters_spec(naming, "{{ numbervar | int }}", "{{ stringvar }}-a")),
        scenario.poolboy("ResourceProvider", base_b,
                         parameters_spec(naming, "{{ (numbervar | int * 10) | int }}", "{{ stringvar }}-b")),
        scenario.poolboy("ResourceProvider", binder, {
            "parameters": PARAMETERS, "resourceName": "conditional_binder", "template": {"enable": True},
            "linkedResourceProviders": [link(base_a, "numbervar | default(0) | int == 1"),
                                        link(base_b, "numbervar | default(0) | int > 1")],
            "override": scenario.override({"name": "linked-03-{{ guid }}-binder"}, spec={
                "numbervalue": "{{ (base_numbervalue | default(0) | int * 10) | int }}",
                "stringvalue": "{{ base_stringvalue | default('no base') | upper }}"}),
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]}))
    for name in (base_a, base_b, binder):
        await until(kube, PROVIDER, OPS, name, lambda p: condition(p, "Valid").get("status") == "True")

    async def claim_of(name: str, stringvar: str, numbervar: int) -> None:
        await scenario.put(scenario.poolboy("ResourceClaim", name, {"provider": {
            "name": binder, "parameterValues": {"stringvar": stringvar, "numbervar": numbervar}}}))

    # No link applies: the binder alone, with what it says when there is no base.
    await claim_of("linked-03-a", "one", 0)
    claim = await until(kube, CLAIM, namespace, "linked-03-a", has_state)
    assert entries(claim) == [("conditional_binder", binder)]
    assert values(claim, 0) == (0, "NO BASE")

    # lessor's default: the upper-cased value is refused by the linked provider's parameter, and the claim says so.
    await claim_of("linked-03-b", "one", 1)
    refused = await until(kube, CLAIM, namespace, "linked-03-b",
                          lambda c: condition(c, "Valid").get("status") == "False")
    message = condition(refused, "Valid")["message"]
    assert condition(refused, "Valid")["reason"] == "SchemaViolation"
    assert "'ONE' is not one of ['one', 'two', 'three']" in message and "trustLinkedParameterValues" in message
    assert condition(refused, "Bound").get("status") != "True"

    # The opt-in on the linked providers restores Poolboy's behaviour.
    for name in (base_a, base_b):
        await kube.merge_patch(PROVIDER, OPS, name, {"spec": {"trustLinkedParameterValues": True}})
    claim = await until(kube, CLAIM, namespace, "linked-03-b", lambda c: len((c.get("status") or {}).get("resources") or ()) == 2
                        and has_state(c))
    assert entries(claim) == [("base", base_a), ("conditional_binder", binder)]
    assert (values(claim, 0), values(claim, 1)) == ((1, "ONE-a"), (10, "ONE-A"))

    await claim_of("linked-03-c", "two", 2)
    claim = await until(kube, CLAIM, namespace, "linked-03-c", lambda c: len((c.get("status") or {}).get("resources") or ()) == 2
                        and has_state(c))
    assert entries(claim) == [("base", base_b), ("conditional_binder", binder)]
    assert (values(claim, 0), values(claim, 1)) == ((20, "TWO-b"), (200, "TWO-B"))
