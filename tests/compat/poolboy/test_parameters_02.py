"""Poolboy's parameters-02 (test/roles/poolboy_test_simple/tasks/test-parameters-02.yaml): a provider that links
one base provider twice, under two resource names and with values computed from the claim's; the claim gets both
base resources and then the binder's, and a change of values reaches the binder's resource."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import CHECKED_PARAMETERS, OPS, TEST_KIND, Scenario, bound_to, entries, guid, parameters_spec, values


def all_made(claim: Mapping[str, Any]) -> bool:
    resources = (claim.get("status") or {}).get("resources") or ()
    return len(resources) == 3 and all(r.get("state") is not None for r in resources)


async def test_one_provider_linked_twice_then_the_binder(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    base, binder = scenario.name("parameters-02-base"), scenario.name("parameters-02-binder")

    def link(resource_name: str, factor: int) -> dict[str, Any]:
        return {"name": base, "resourceName": resource_name, "parameterValues": {
            "numbervar": f"{{{{ (numbervar * {factor}) | int }}}}", "stringvar": "{{ stringvar }}"}}

    await scenario.put(
        scenario.poolboy("ResourceProvider", base, parameters_spec(
            scenario.override({"name": "parameters-02-{{ guid }}-{{ resource_name }}"}),
            "{{ numbervar | int }}", "{{ stringvar }}")),
        scenario.poolboy("ResourceProvider", binder, {
            **parameters_spec(scenario.override({"name": "parameters-02-{{ guid }}-binder"}),
                              "{{ numbervar | int }}", "{{ stringvar }}"),
            "parameters": CHECKED_PARAMETERS, "resourceName": "binder",
            "linkedResourceProviders": [link("base-a", 10), link("base-b", 100)]}),
        scenario.provider_claim("parameters-02-a", binder, {"stringvar": "one", "numbervar": 1}))

    claim = await until(kube, CLAIM, namespace, "parameters-02-a", all_made)
    assert entries(claim) == [("base-a", base), ("base-b", base), ("binder", binder)]
    handle, binder_name = bound_to(claim) or "", f"parameters-02-{guid(claim)}-binder"
    states = [r["state"] for r in claim["status"]["resources"]]
    assert [s["metadata"]["name"] for s in states] == [f"parameters-02-{guid(claim)}-{name}"
                                                       for name in ("base-a", "base-b", "binder")]
    assert [values(s) for s in states[:2]] == [(10, "one"), (100, "one")]  # what each link gave
    assert values(await kube.get(TEST_KIND, namespace, binder_name)) == (1, "one")

    await kube.merge_patch(CLAIM, namespace, "parameters-02-a", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two", "numbervar": 2}}}})
    await until(kube, TEST_KIND, namespace, binder_name, lambda r: values(r) == (2, "two"))

    await kube.delete(CLAIM, namespace, "parameters-02-a")
    await gone(kube, CLAIM, namespace, "parameters-02-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, binder_name)
