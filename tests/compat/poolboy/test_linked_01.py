"""Poolboy's linked-01 (test/roles/poolboy_test_simple/tasks/test-linked-01.yaml): a provider that links a base
provider waits (`waitingFor: Linked ResourceProvider`, on the claim and the handle) until the base resource says
it may go on (`waitFor` over its `templateVars`), then makes its own resource from the base's values; a change of
the claim's values reaches both."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, PARAMETERS, TEST_KIND, Scenario, bound_to, entries, guid, parameters_spec, values

WAITING = "Linked ResourceProvider"


async def test_a_linked_provider_waits_for_its_base_and_reads_it(kube: Gateway, namespace: str,
                                                                 scenario: Scenario) -> None:
    base, binder = scenario.name("linked-01-base"), scenario.name("linked-01-binder")
    await scenario.put(
        scenario.poolboy("ResourceProvider", base, parameters_spec(
            scenario.override({"name": "linked-01-{{ guid }}-{{ resource_name }}"}),
            "{{ numbervar | int }}", "{{ stringvar }}")),
        scenario.poolboy("ResourceProvider", binder, {
            "linkedResourceProviders": [{
                "name": base, "resourceName": "base",
                "parameterValues": {"numbervar": "{{ numbervar | int }}", "stringvar": "{{ stringvar }}"},
                "templateVars": [{"name": "base_numbervalue", "from": "/spec/numbervalue"},
                                 {"name": "base_stringvalue", "from": "/spec/stringvalue"}],
                "waitFor": "base_numbervalue | default(0) | int > 0"}],
            "override": scenario.override({"name": "linked-01-{{ guid }}-binder"}, spec={
                "numbervalue": "{{ (base_numbervalue | int * 10) | int }}",
                "stringvalue": "{{ base_stringvalue | upper }}"}),
            "parameters": PARAMETERS, "resourceName": "binder", "template": {"enable": True},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]}),
        scenario.provider_claim("linked-01-a", binder, {"stringvar": "one", "numbervar": 0}))

    claim = await until(kube, CLAIM, namespace, "linked-01-a", lambda c: len(
        (c.get("status") or {}).get("resources") or ()) == 2 and c["status"]["resources"][0].get("state") is not None
        and c["status"]["resources"][1].get("waitingFor") == WAITING)
    assert entries(claim) == [("base", base), ("binder", binder)]
    handle = bound_to(claim) or ""
    base_name, binder_name = f"linked-01-{guid(claim)}-base", f"linked-01-{guid(claim)}-binder"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == base_name
    assert (await kube.get(HANDLE, OPS, handle))["status"]["resources"][1]["waitingFor"] == WAITING
    assert values(await kube.get(TEST_KIND, namespace, base_name)) == (0, "one")

    await kube.merge_patch(CLAIM, namespace, "linked-01-a", {"spec": {"provider": {"parameterValues": {"numbervar": 1}}}})
    claim = await until(kube, CLAIM, namespace, "linked-01-a", lambda c: c["status"]["resources"][1].get("state")
                        is not None and "waitingFor" not in c["status"]["resources"][1])
    assert claim["status"]["resources"][1]["state"]["metadata"]["name"] == binder_name
    assert values(await kube.get(TEST_KIND, namespace, binder_name)) == (10, "ONE")

    await kube.merge_patch(CLAIM, namespace, "linked-01-a", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two", "numbervar": 2}}}})
    await until(kube, TEST_KIND, namespace, base_name, lambda r: values(r) == (2, "two"))
    await until(kube, TEST_KIND, namespace, binder_name, lambda r: values(r) == (20, "TWO"))

    await kube.delete(CLAIM, namespace, "linked-01-a")
    await gone(kube, CLAIM, namespace, "linked-01-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, base_name)
    await gone(kube, TEST_KIND, namespace, binder_name)
