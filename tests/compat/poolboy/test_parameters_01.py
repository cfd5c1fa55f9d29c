"""Poolboy's parameters-01 (test/roles/poolboy_test_simple/tasks/test-parameters-01.yaml): a provider-mode claim
gets the provider's `resourceClaimLabels` and `resourceClaimAnnotations`, its handle records the provider and the
values (defaults included) in `spec.provider`, and a change of values reaches the handle and the resource."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import CHECKED_PARAMETERS, OPS, TEST_KIND, Scenario, bound_to, guid, has_state, values

async def test_values_reach_the_handle_and_the_resource(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("parameters-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "parameters-01-{{ guid }}"}), "parameters": CHECKED_PARAMETERS,
            "resourceClaimAnnotations": {"test-annotation": "test-annotation-value"},
            "resourceClaimLabels": {"test-label": "test-label-value"},
            "template": {"enable": True, "definition": {"spec": {"numbervalue": "{{ numbervar | int }}",
                                                                 "stringvalue": "{{ stringvar }}"}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]}),
        scenario.provider_claim("parameters-01-a", provider, {"numbervar": 1}))

    claim = await until(kube, CLAIM, namespace, "parameters-01-a", has_state)
    handle, resource = bound_to(claim) or "", f"parameters-01-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert claim["metadata"]["annotations"]["test-annotation"] == "test-annotation-value"
    assert claim["metadata"]["labels"]["test-label"] == "test-label-value"
    assert (await kube.get(HANDLE, OPS, handle))["spec"]["provider"] == {
        "name": provider, "parameterValues": {"numbervar": 1, "stringvar": "one"}}
    assert values(await kube.get(TEST_KIND, namespace, resource)) == (1, "one")

    await kube.merge_patch(CLAIM, namespace, "parameters-01-a", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two", "numbervar": 2}}}})
    await until(kube, TEST_KIND, namespace, resource, lambda r: values(r) == (2, "two"))
    assert (await kube.get(HANDLE, OPS, handle))["spec"]["provider"] == {
        "name": provider, "parameterValues": {"numbervar": 2, "stringvar": "two"}}

    await kube.delete(CLAIM, namespace, "parameters-01-a")
    await gone(kube, CLAIM, namespace, "parameters-01-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
