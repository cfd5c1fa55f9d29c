"""Poolboy's template variables, vars and filters in lessor's templates (unit level; the real API server
sees them in test_porting.py)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

import pytest

from lessor.actors.provisioning.handle_render import render_handle
from lessor.actors.provisioning.provider import provider_from
from lessor.model.keys import reference_key
from lessor.templates import TemplateError, render_string

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
OPS = "lessor-system"
CLAIM = {"metadata": {"name": "my-claim", "namespace": "user"},
         "spec": {"resources": [{"name": "db", "template": {}}, {"name": "web", "template": {}}]}}


def provider(name: str = "p", **spec: Any) -> Any:
    spec.setdefault("template", {"enable": True})
    return provider_from({"metadata": {"name": name, "namespace": OPS}, "spec": spec})


def handle(*entries: dict[str, Any], vars: dict[str, Any] | None = None) -> dict[str, Any]:
    spec: dict[str, Any] = {"resources": list(entries), "resourceClaim": {"name": "my-claim", "namespace": "user"}}
    if vars is not None:
        spec["vars"] = vars
    return {"metadata": {"name": "guid-x7k2q", "generateName": "guid-", "namespace": OPS}, "spec": spec}


def test_poolboys_variables_describe_the_handle_and_its_resources() -> None:
    override = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ resource_name }}-{{ guid }}"},
                "data": {"other": "{{ resource_references[0].name }}", "seen": "{{ resource_states[0].data.v }}",
                         "mine": "{{ resource_state is none }}", "templates": "{{ resource_templates | length }}",
                         "ref": "{{ resource_reference }}", "who": "{{ requester_identities | length }}"}}
    p = provider(override=override)
    db_ref = {"apiVersion": "v1", "kind": "ConfigMap", "name": "db-x7k2q", "namespace": OPS}
    h = handle({"name": "db", "provider": {"name": "p"}, "template": {}, "reference": db_ref},
               {"name": "web", "provider": {"name": "p"}, "template": {}})
    live = {reference_key(db_ref): {"data": {"v": "42"}}}
    _, web = render_handle(h, {"p": p}, operator_namespace=OPS, claim=CLAIM, live=live, now=NOW)
    assert web.definition is not None, web.message
    assert web.definition["metadata"]["name"] == "web-x7k2q"
    assert web.definition["data"] == {"other": "db-x7k2q", "seen": "42", "mine": True, "templates": 2,
                                      "ref": {}, "who": 0}


def test_vars_render_in_order_and_the_handles_win() -> None:
    override = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ app }}-{{ guid }}"},
                "data": {"greeting": "{{ greeting }}", "size": "{{ size }}"}}
    p = provider(override=override, vars={"app": "demo", "greeting": "hello from {{ app }}", "size": "s"})
    [result] = render_handle(handle({"provider": {"name": "p"}, "template": {}}, vars={"size": "xl"}), {"p": p},
                             operator_namespace=OPS, claim=CLAIM, now=NOW)
    assert result.definition is not None, result.message
    assert result.definition["metadata"]["name"] == "demo-x7k2q"
    assert result.definition["data"] == {"greeting": "hello from demo", "size": "xl"}


def test_a_named_variable_wins_over_a_var_and_a_broken_var_names_its_field() -> None:
    override = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"g": "{{ guid }}", "bad": "{{ broken }}"}}
    p = provider(override=override, vars={"guid": "not-this", "broken": "{{ nothing.here }}"})
    [result] = render_handle(handle({"provider": {"name": "p"}, "template": {}}), {"p": p},
                             operator_namespace=OPS, claim=CLAIM, now=NOW)
    assert result.reason == "TemplateError"
    assert "/spec/vars/broken" in result.message
    p = provider(override={"apiVersion": "v1", "kind": "ConfigMap", "data": {"g": "{{ guid }}"}},
                 vars={"guid": "not-this"})
    [result] = render_handle(handle({"provider": {"name": "p"}, "template": {}}), {"p": p},
                             operator_namespace=OPS, claim=CLAIM, now=NOW)
    assert result.definition is not None and result.definition["data"] == {"g": "x7k2q"}


def test_a_var_that_does_not_parse_makes_the_provider_invalid() -> None:
    p = provider(override={"apiVersion": "v1", "kind": "ConfigMap"}, vars={"x": "{{ unclosed"})
    assert not p.valid
    assert any(error.startswith("spec.vars/x: ") for error in p.errors), p.errors


def test_defaults_see_resource_name_and_vars() -> None:
    p = provider(override={"apiVersion": "v1", "kind": "ConfigMap"}, vars={"tier": "gold"},
                 default={"data": {"name": "{{ resource_name }}", "tier": "{{ tier }}"}})
    assert p.apply_defaults({}, claim=CLAIM, index=1, now=NOW) == {"data": {"name": "web", "tier": "gold"}}


@pytest.mark.parametrize(("source", "value"), [
    ("{{ 'yes' | bool }}", True), ("{{ 'Off' | bool }}", False), ("{{ '1' | bool }}", True),
    ("{{ 0 | bool }}", False), ("{{ [1] | bool }}", True), ("{{ {'a': 1} | object }}", {"a": 1}),
])
def test_the_bool_and_object_filters(source: str, value: Any) -> None:
    assert render_string(source, {}) == value


def test_bool_refuses_a_string_that_says_neither() -> None:
    with pytest.raises(TemplateError, match="cannot read 'maybe' as true or false"):
        render_string("{{ 'maybe' | bool }}", {})


def test_the_webhook_and_the_valid_condition_name_a_broken_var() -> None:
    from lessor.actors.provisioning.validity import INVALID_TEMPLATE, provider_errors

    [error] = provider_errors({"metadata": {"name": "p", "namespace": OPS}, "spec": {
        "template": {"enable": True}, "override": {"apiVersion": "v1", "kind": "ConfigMap"},
        "vars": {"greeting": "{{ unclosed"}}})
    assert (error.field, error.reason) == ("spec.vars.greeting", INVALID_TEMPLATE)
