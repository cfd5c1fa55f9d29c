"""Poolboy's parameters-04 (test/roles/poolboy_test_simple/tasks/test-parameters-04.yaml): parameter defaults as
values and as templates (one drawn with `strgen`), typed by `| object`, `| int`, `| bool`; changing two values
reaches the resource, and the drawn string stays what it was."""

from __future__ import annotations

import re

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM
from tests.polling import until

from .lab import TEST_KIND, Scenario, has_state

NAMES = ("string_with_default_value", "int_with_default_value", "boolean_with_default_value",
         "string_with_default_template", "int_with_default_template", "boolean_with_default_template")


async def test_parameter_defaults_as_values_and_templates(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("parameters-04")
    defaults = [{"value": "foo"}, {"value": 23}, {"value": True},
                {"template": "{{ '[0-9a-f]{8}' | strgen }}"}, {"template": "{{ (13 + 10) | int }}"},
                {"template": "{{ 'true' | bool }}"}]
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "parameters-04-{{ guid }}"}),
            "parameters": [{"name": name, "allowUpdate": True, "default": default}
                           for name, default in zip(NAMES, defaults)],
            "template": {"enable": True, "definition": {"spec": {name: f"{{{{ {name} | object }}}}" for name in NAMES}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["add", "replace"]}]}),
        scenario.poolboy("ResourceClaim", "parameters-04-a", {"provider": {"name": provider, "parameterValues": {}}}))
    assert not [n for n in scenario.notes if "strgen" in n.message and n.loss]  # lessor has Poolboy's strgen

    claim = await until(kube, CLAIM, namespace, "parameters-04-a", has_state)
    resource = f"parameters-04-{claim['status']['resourceHandle']['name'][len('guid-'):]}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    spec = (await kube.get(TEST_KIND, namespace, resource))["spec"]
    assert (spec["string_with_default_value"], spec["int_with_default_value"], spec["boolean_with_default_value"],
            spec["int_with_default_template"], spec["boolean_with_default_template"]) == ("foo", 23, True, 23, True)
    drawn = spec["string_with_default_template"]
    assert re.fullmatch(r"[0-9a-f]{8}", drawn)

    await kube.merge_patch(CLAIM, namespace, "parameters-04-a", {"spec": {"provider": {"parameterValues": {
        "int_with_default_template": 42, "int_with_default_value": 42}}}})
    spec = (await until(kube, TEST_KIND, namespace, resource,
                        lambda obj: (obj["spec"]["int_with_default_template"], obj["spec"]["int_with_default_value"])
                        == (42, 42)))["spec"]
    assert spec["string_with_default_template"] == drawn
