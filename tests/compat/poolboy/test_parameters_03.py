"""Poolboy's parameters-03 (test/roles/poolboy_test_simple/tasks/test-parameters-03.yaml): an optional value left
out is left out of the resource (`default(omit)`), a schema default fills a value not given, and values given
later are added to the resource or replace the default."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, guid, has_state


async def test_optional_required_and_defaulted_values(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("parameters-03")

    def string(name: str, **more: object) -> dict[str, object]:
        return {"name": name, "allowUpdate": True, "validation": {"openAPIV3Schema": {"type": "string", **more}}}

    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "parameters-03-{{ guid }}"}),
            "parameters": [string("optionalvar"), {**string("requiredvar"), "required": True},
                           {**string("varwithdefault", default="defaultvalue"), "required": True}],
            "template": {"enable": True, "definition": {"spec": {
                field: f"{{{{ {var} | default(omit) | object }}}}"
                for field, var in (("optional", "optionalvar"), ("required", "requiredvar"),
                                   ("withdefault", "varwithdefault"))}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["add", "replace"]}]}),
        scenario.provider_claim("parameters-03-a", provider, {"requiredvar": "requiredvalue"}))

    claim = await until(kube, CLAIM, namespace, "parameters-03-a", has_state)
    handle, resource = bound_to(claim) or "", f"parameters-03-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"required": "requiredvalue",
                                                                         "withdefault": "defaultvalue"}

    await kube.merge_patch(CLAIM, namespace, "parameters-03-a", {"spec": {"provider": {"parameterValues": {
        "optionalvar": "optionalvalue", "requiredvar": "requiredvalue", "varwithdefault": "providedvalue"}}}})
    await until(kube, TEST_KIND, namespace, resource, lambda r: r["spec"] == {
        "optional": "optionalvalue", "required": "requiredvalue", "withdefault": "providedvalue"})

    await kube.delete(CLAIM, namespace, "parameters-03-a")
    await gone(kube, CLAIM, namespace, "parameters-03-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
