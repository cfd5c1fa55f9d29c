"""Poolboy's linked-03 (test/roles/poolboy_test_simple/tasks/test-linked-03.yaml): links chosen by `when` over
the claim's values, each waiting (`waitFor`) for its resource and reading it (`templateVars`).

The links give `stringvar | upper` to providers whose parameter allows lower case only. Poolboy uses such values
unjudged; the converted providers do too, because `lessor convert` sets `trustLinkedParameterValues: true` on
them, saying so. lessor's own default (the field false or absent) refuses the claim, naming the value and the
opt-in, because a provider's parameter rules are what its templates rely on (docs/migrating.md)."""

from __future__ import annotations

from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, PROVIDER
from tests.polling import until

from .lab import OPS, PARAMETERS, Scenario, condition, entries, has_state, parameters_spec


def values(claim: dict[str, Any], index: int) -> tuple[Any, Any]:
    spec = claim["status"]["resources"][index]["state"]["spec"]
    return spec["numbervalue"], spec["stringvalue"]


async def test_links_chosen_by_when_pass_linked_values_as_poolboy_does_once_converted(
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

    assert sorted(n.subject for n in scenario.notes if n.field == "spec.trustLinkedParameterValues") == sorted(
        f"ResourceProvider poolboy/{name}" for name in (base_a, base_b))
    assert not [str(n) for n in scenario.notes if n.loss]

    # No link applies: the binder alone, with what it says when there is no base.
    await claim_of("linked-03-a", "one", 0)
    claim = await until(kube, CLAIM, namespace, "linked-03-a", has_state)
    assert entries(claim) == [("conditional_binder", binder)]
    assert values(claim, 0) == (0, "NO BASE")

    # As converted: the upper-cased values reach the linked providers, as in Poolboy.
    await claim_of("linked-03-b", "one", 1)
    claim = await until(kube, CLAIM, namespace, "linked-03-b", lambda c: len((c.get("status") or {}).get("resources") or ()) == 2
                        and has_state(c))
    assert entries(claim) == [("base", base_a), ("conditional_binder", binder)]
    assert (values(claim, 0), values(claim, 1)) == ((1, "ONE-a"), (10, "ONE-A"))

    await claim_of("linked-03-c", "two", 2)
    claim = await until(kube, CLAIM, namespace, "linked-03-c", lambda c: len((c.get("status") or {}).get("resources") or ()) == 2
                        and has_state(c))
    assert entries(claim) == [("base", base_b), ("conditional_binder", binder)]
    assert (values(claim, 0), values(claim, 1)) == ((20, "TWO-b"), (200, "TWO-B"))

    # lessor's default, the field turned off: the upper-cased value is refused, and a new claim says so.
    await kube.merge_patch(PROVIDER, OPS, base_a, {"spec": {"trustLinkedParameterValues": False}})
    await until(kube, PROVIDER, OPS, base_a, lambda p: p["spec"]["trustLinkedParameterValues"] is False
                and condition(p, "Valid").get("status") == "True")
    await claim_of("linked-03-d", "one", 1)
    refused = await until(kube, CLAIM, namespace, "linked-03-d",
                          lambda c: condition(c, "Valid").get("status") == "False")
    message = condition(refused, "Valid")["message"]
    assert condition(refused, "Valid")["reason"] == "SchemaViolation"
    assert "'ONE' is not one of ['one', 'two', 'three']" in message and "trustLinkedParameterValues" in message
    assert condition(refused, "Bound").get("status") != "True"
