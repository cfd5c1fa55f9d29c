"""Poolboy's parameters-05 (test/roles/poolboy_test_simple/tasks/test-parameters-05.yaml): values that the
provider's parameters refuse (a value not in the enum, a string for an integer, an undeclared name) are reported
on the claim, before and after it is bound; put right, the claim is valid again and the change reaches the
resource.

Poolboy reports them as `status.provider.validationErrors`; lessor as `Valid=False` with a reason and a message
naming the value (docs/migrating.md), which is what this test reads. A bound claim keeps its handle and its
resource keeps the values last applied."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import CHECKED_PARAMETERS, OPS, TEST_KIND, Scenario, bound_to, condition, guid, has, has_state


def refused(field: str) -> Any:
    """The claim is not valid, and says which value is at fault."""
    def check(claim: Mapping[str, Any]) -> bool:
        valid = condition(claim, "Valid")
        return valid.get("status") == "False" and f"spec.provider.parameterValues.{field}" in valid.get("message", "")
    return check


def valid(claim: Mapping[str, Any]) -> bool:
    return has("Valid", "Valid")(claim)


async def test_refused_values_are_reported_and_put_right(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("parameters-05")
    stringvar = {"name": "stringvar", "required": True,  # no allowUpdate: fixed once bound
                 "validation": {"openAPIV3Schema": {"type": "string", "enum": ["one", "two", "three"]}}}
    numbervar = {"name": "numbervar", "allowUpdate": True, "validation": {
        "checks": CHECKED_PARAMETERS[1]["validation"]["checks"],
        "openAPIV3Schema": {"type": "integer", "minimum": 0, "maximum": 10}}}
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "parameters-05-{{ guid }}"}),
            "parameters": [stringvar, numbervar],
            "template": {"enable": True, "definition": {"spec": {
                "numbervalue": "{{ (numbervar | int if numbervar is defined else omit) | object }}",
                "stringvalue": "{{ stringvar }}"}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["add", "replace"]}]}),
        scenario.provider_claim("parameters-05-a", provider, {"stringvar": "invalid"}))

    async def set_values(**given: Any) -> None:
        await kube.merge_patch(CLAIM, namespace, "parameters-05-a", {"spec": {"provider": {"parameterValues": given}}})

    claim = await until(kube, CLAIM, namespace, "parameters-05-a", refused("stringvar"))
    assert condition(claim, "Valid")["reason"] == "SchemaViolation"
    assert "'invalid' is not one of ['one', 'two', 'three']" in condition(claim, "Valid")["message"]
    assert bound_to(claim) is None

    await set_values(stringvar="one")
    claim = await until(kube, CLAIM, namespace, "parameters-05-a", lambda c: valid(c) and has_state(c))
    handle, resource = bound_to(claim) or "", f"parameters-05-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"stringvalue": "one"}

    await set_values(numbervar="not-a-number")
    claim = await until(kube, CLAIM, namespace, "parameters-05-a", refused("numbervar"))
    assert bound_to(claim) == handle

    await set_values(numbervar=1)
    await until(kube, CLAIM, namespace, "parameters-05-a", valid)
    await until(kube, TEST_KIND, namespace, resource, lambda r: r["spec"] == {"numbervalue": 1, "stringvalue": "one"})

    await set_values(nosuchparam=True)
    claim = await until(kube, CLAIM, namespace, "parameters-05-a", refused("nosuchparam"))
    assert bound_to(claim) == handle

    await set_values(nosuchparam=None)  # a merge patch's null removes it
    claim = await until(kube, CLAIM, namespace, "parameters-05-a", valid)
    assert bound_to(claim) == handle
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"numbervalue": 1, "stringvalue": "one"}

    await kube.delete(CLAIM, namespace, "parameters-05-a")
    await gone(kube, CLAIM, namespace, "parameters-05-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
