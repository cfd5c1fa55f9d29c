"""Provider mode against the real API server: a claim names a provider and gives parameter values; the
provider's template.definition, rendered with them, is its resource (Poolboy's test-parameters scenarios)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CONFIGMAP, HANDLE, NAMESPACE, PROVIDER
from tests.provisioning.test_operator import OPS, Lab, condition, handle_of, has, lab, message, reference, ready
from tests.polling import discard, get, until

pytestmark = pytest.mark.usefixtures("operator")
__all__ = ["lab"]  # the fixture
API = "lessor.dev/v1alpha1"


def parameters_provider(**extra: Any) -> dict[str, Any]:
    """ConfigMaps whose data the parameters decide, after Poolboy's test-parameters-01."""
    return {
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}},
        "parameters": [
            {"name": "stringvar", "allowUpdate": True, "required": True,
             "validation": {"openAPIV3Schema": {"type": "string", "default": "one", "enum": ["one", "two", "three"]}}},
            {"name": "numbervar", "allowUpdate": True,
             "validation": {"openAPIV3Schema": {"type": "integer", "default": 0, "minimum": 0}, "checks": [
                 {"name": "max for one", "check": "numbervar <= 1 or stringvar != 'one'"},
                 {"name": "max for two", "check": "numbervar <= 2 or stringvar != 'two'"}]}},
        ],
        "resourceClaimLabels": {"test-label": "test-label-value"},
        "resourceClaimAnnotations": {"test-annotation": "test-annotation-value"},
        "template": {"enable": True, "definition": {"data": {
            "numbervalue": "{{ numbervar | string }}", "stringvalue": "{{ stringvar }}"}}},
        "updateFilters": [{"pathMatch": "/data/.*", "allowedOps": ["replace"]}],
        **extra,
    }


async def provider_claim(kube: Gateway, ns: str, name: str, provider: str, **values: Any) -> None:
    await kube.create(CLAIM, ns, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                  "spec": {"provider": {"name": provider, "parameterValues": values}}})


async def test_a_claim_in_provider_mode_gets_the_definition_rendered_with_its_values_and_updates_them(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    provider = await lab.provider("params", **parameters_provider())
    await provider_claim(kube, namespace, "a", provider, numbervar=1)
    got = await until(kube, CLAIM, namespace, "a", ready)
    applied = {"name": provider, "parameterValues": {"numbervar": 1, "stringvar": "one"}}  # the default filled in
    assert got["status"]["provider"] == applied
    assert got["metadata"]["labels"]["test-label"] == "test-label-value"
    assert got["metadata"]["annotations"]["test-annotation"] == "test-annotation-value"
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["spec"]["provider"] == applied
    cm_name = reference(got)["name"]
    assert (await kube.get(CONFIGMAP, OPS, cm_name))["data"] == {"numbervalue": "1", "stringvalue": "one"}
    assert got["status"]["resources"][0]["state"]["data"] == {"numbervalue": "1", "stringvalue": "one"}

    await kube.merge_patch(CLAIM, namespace, "a", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two", "numbervar": 2}}}})
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"]["stringvalue"] == "two")
    assert cm["data"] == {"numbervalue": "2", "stringvalue": "two"}
    handle = await until(kube, HANDLE, OPS, handle_of(got),
                         lambda h: h["spec"]["provider"]["parameterValues"]["stringvar"] == "two")
    assert handle["spec"]["provider"]["parameterValues"] == {"numbervar": 2, "stringvar": "two"}
    got = await until(kube, CLAIM, namespace, "a", lambda c: c["status"]["provider"]["parameterValues"]["numbervar"] == 2)
    assert condition(got, "Valid") == ("True", "Valid")


async def test_bad_parameter_values_are_named_at_their_fields_and_nothing_is_made(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    provider = await lab.provider("params", **parameters_provider())
    await provider_claim(kube, namespace, "schema", provider, stringvar="four", numbervar=-1, colour="red")
    got = await until(kube, CLAIM, namespace, "schema", has("Valid", "SchemaViolation", "False"))
    text = message(got, "Valid")
    assert "spec.provider.parameterValues.stringvar: 'four' is not one of ['one', 'two', 'three']" in text
    assert "spec.provider.parameterValues.numbervar: -1 is less than the minimum of 0" in text
    assert f"spec.provider.parameterValues.colour: ResourceProvider {provider} has no parameter colour" in text
    assert condition(got, "Bound") == ("False", condition(got, "Bound")[1]) and "resourceHandle" not in got["status"]

    await provider_claim(kube, namespace, "checked", provider, numbervar=5)
    got = await until(kube, CLAIM, namespace, "checked", has("Valid", "CheckFailed", "False"))
    assert "spec.provider.parameterValues.numbervar: check 'max for one' failed" in message(got, "Valid")

    required = await lab.provider("required", **parameters_provider(parameters=[{"name": "size", "required": True}],
                                                                    template={"definition": {"data": {"s": "x"}}}))
    await provider_claim(kube, namespace, "missing", required)
    got = await until(kube, CLAIM, namespace, "missing", has("Valid", "SchemaViolation", "False"))
    assert f"spec.provider.parameterValues.size: is required by ResourceProvider {required}" in message(got, "Valid")


async def test_a_parameter_without_allow_update_cannot_change_once_bound_and_the_resource_keeps_its_value(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    fixed = parameters_provider()
    fixed["parameters"][0] = {**fixed["parameters"][0], "allowUpdate": False}
    provider = await lab.provider("fixed", **fixed)
    await provider_claim(kube, namespace, "a", provider, stringvar="two")
    got = await until(kube, CLAIM, namespace, "a", ready)
    cm_name = reference(got)["name"]

    await kube.merge_patch(CLAIM, namespace, "a", {"spec": {"provider": {"parameterValues": {"stringvar": "three"}}}})
    got = await until(kube, CLAIM, namespace, "a", has("Valid", "UpdateRefused", "False"))
    assert "spec.provider.parameterValues.stringvar: cannot change once the claim is bound (applied: 'two')" \
        in message(got, "Valid")
    assert got["status"]["provider"]["parameterValues"]["stringvar"] == "two"
    assert (await kube.get(CONFIGMAP, OPS, cm_name))["data"]["stringvalue"] == "two"

    await kube.merge_patch(CLAIM, namespace, "a", {"spec": {"provider": {"parameterValues": {"stringvar": "two"}}}})
    await until(kube, CLAIM, namespace, "a", has("Valid", "Valid"))


async def test_a_provider_without_a_definition_or_with_broken_parameters_is_named(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    plain = await lab.provider("plain", override={"apiVersion": "v1", "kind": "ConfigMap"})
    await provider_claim(kube, namespace, "plain", plain)
    got = await until(kube, CLAIM, namespace, "plain", has("Valid", "ProviderInvalid", "False"))
    assert f"ResourceProvider {plain} has no spec.template.definition" in message(got, "Valid")

    broken = await lab.provider("broken", **parameters_provider(parameters=[
        {"name": "x", "validation": {"checks": [{"name": "bad", "check": "x >"}]}}, {"name": "x"}]))
    await provider_claim(kube, namespace, "broken", broken)
    got = await until(kube, CLAIM, namespace, "broken", has("Valid", "ProviderInvalid", "False"))
    assert "spec.parameters[0].validation.checks[0].check:" in message(got, "Valid")
    assert "spec.parameters[1].name: x is declared twice" in message(got, "Valid")


async def test_the_provider_mode_example_in_the_docs_works_verbatim(kube: Gateway) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "claims.md").read_text()
    section = text.split("### Provider mode", 1)[1].split("\n### ", 1)[0]
    block = section.split("```yaml\n", 1)[1].split("```", 1)[0]
    provider, claim = list(yaml.safe_load_all(block))
    ns = claim["metadata"]["namespace"]
    if await get(kube, NAMESPACE, "", ns) is None:
        await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    await kube.create(PROVIDER, OPS, provider)
    try:
        await kube.create(CLAIM, ns, claim)
        got = await until(kube, CLAIM, ns, "my-env", ready)
        assert got["metadata"]["labels"]["environments"] == "sized"
        assert got["status"]["provider"]["parameterValues"] == {"size": "large", "replicas": 1}
        cm_name = reference(got)["name"]
        assert (await kube.get(CONFIGMAP, OPS, cm_name))["data"] == {"size": "large", "replicas": "1"}
        await kube.merge_patch(CLAIM, ns, "my-env", {"spec": {"provider": {"parameterValues": {"size": "small"}}}})
        await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"]["size"] == "small")
        await kube.merge_patch(CLAIM, ns, "my-env", {"spec": {"provider": {"parameterValues": {
            "size": "large", "replicas": 5}}}})
        got = await until(kube, CLAIM, ns, "my-env", has("Valid", "CheckFailed", "False"))
        assert "check 'a large environment has at most 3 replicas' failed" in message(got, "Valid")
    finally:
        await discard(kube, NAMESPACE, None, ns)
        await discard(kube, PROVIDER, OPS, "sized-env")


def linked_providers(lab: Lab) -> tuple[dict[str, Any], dict[str, Any]]:
    """A base provider and a binder that links it (after Poolboy's test-linked-01, with ConfigMaps)."""
    parameters = [
        {"name": "stringvar", "allowUpdate": True, "required": True,
         "validation": {"openAPIV3Schema": {"type": "string", "default": "one", "enum": ["one", "two", "three"]}}},
        {"name": "numbervar", "allowUpdate": True,
         "validation": {"openAPIV3Schema": {"type": "integer", "default": 0, "minimum": 0}}},
    ]
    override = {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"namespace": OPS, "name": "linked-{{ guid }}-{{ resource_name }}"}}
    base = {"override": override, "parameters": parameters,
            "template": {"enable": True, "definition": {"data": {
                "numbervalue": "{{ numbervar | string }}", "stringvalue": "{{ stringvar }}"}}},
            "updateFilters": [{"pathMatch": "/data/.*", "allowedOps": ["replace"]}]}
    binder = {
        "linkedResourceProviders": [{
            "name": lab.name("base"), "resourceName": "base",
            "parameterValues": {"numbervar": "{{ numbervar }}", "stringvar": "{{ stringvar }}"},
            "templateVars": [{"from": "/data/numbervalue", "name": "base_numbervalue"},
                             {"from": "/data/stringvalue", "name": "base_stringvalue"}],
            "waitFor": "base_numbervalue | default(0) | int > 0"}],
        "override": {**override, "data": {"numbervalue": "{{ (base_numbervalue | default(0) | int * 10) | string }}",
                                          "stringvalue": "{{ base_stringvalue | default('') | upper }}"}},
        "parameters": parameters, "resourceName": "binder", "template": {"enable": True},
        "updateFilters": [{"pathMatch": "/data/.*", "allowedOps": ["replace"]}],
    }
    return base, binder


async def test_a_linked_provider_comes_first_and_the_linking_one_waits_for_it_and_reads_it(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    base, binder = linked_providers(lab)
    await lab.provider("base", **base)
    provider = await lab.provider("binder", **binder)
    await provider_claim(kube, namespace, "a", provider, stringvar="one", numbervar=0)
    got = await until(kube, CLAIM, namespace, "a", lambda c: len((c.get("status") or {}).get("resources") or []) == 2
                      and "state" in c["status"]["resources"][0])
    first, second = got["status"]["resources"]
    assert (first["name"], first["provider"]["name"]) == ("base", lab.name("base"))
    assert (second["name"], second["provider"]["name"], second["waitingFor"]) == (
        "binder", provider, "Linked ResourceProvider")
    guid = handle_of(got).removeprefix("guid-")
    assert first["state"]["metadata"]["name"] == f"linked-{guid}-base"
    assert first["state"]["data"] == {"numbervalue": "0", "stringvalue": "one"}
    assert condition(got, "Ready") == ("False", "ResourcesNotReady")
    assert "waits for Linked ResourceProvider" in message(got, "Ready")
    assert await get(kube, CONFIGMAP, OPS, f"linked-{guid}-binder") is None

    await kube.merge_patch(CLAIM, namespace, "a", {"spec": {"provider": {"parameterValues": {"numbervar": 1}}}})
    got = await until(kube, CLAIM, namespace, "a", ready)
    assert "waitingFor" not in got["status"]["resources"][1]
    made = await kube.get(CONFIGMAP, OPS, f"linked-{guid}-binder")
    assert made["data"] == {"numbervalue": "10", "stringvalue": "ONE"}
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert [r["name"] for r in handle["spec"]["resources"]] == ["base", "binder"]
    applied = {"name": provider, "parameterValues": {"numbervar": 1, "stringvar": "one"}}  # the claim's provider
    assert got["status"]["provider"] == applied and handle["spec"]["provider"] == applied


async def test_a_link_left_out_by_when_and_links_in_a_cycle(kube: Gateway, namespace: str, lab: Lab) -> None:
    base, binder = linked_providers(lab)
    binder["linkedResourceProviders"][0]["when"] = "numbervar > 5"
    binder["linkedResourceProviders"][0].pop("waitFor")
    await lab.provider("base", **base)
    provider = await lab.provider("binder", **binder)
    await provider_claim(kube, namespace, "lone", provider, numbervar=1)
    got = await until(kube, CLAIM, namespace, "lone", ready)
    assert [r["name"] for r in got["status"]["resources"]] == ["binder"]
    assert got["status"]["resources"][0]["state"]["data"] == {"numbervalue": "0", "stringvalue": ""}

    looped = await lab.provider("looped", **{**base, "linkedResourceProviders": [{"name": lab.name("looped")}]})
    await provider_claim(kube, namespace, "looped", looped)
    got = await until(kube, CLAIM, namespace, "looped", has("Valid", "ProviderInvalid", "False"))
    assert "the links form a cycle" in message(got, "Valid")
