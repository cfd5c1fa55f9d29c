"""Rendering provider objects: variables, the type rule, and errors that name the field."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lessor.templates import TemplateError, render_object, render_string, template_variables

CLAIM = {
    "metadata": {"name": "my-claim", "namespace": "user-ns", "labels": {"team": "blue"}},
    "spec": {"resources": [{"template": {"spec": {"size": 3}}}]},
}
PROVIDER = {"metadata": {"name": "babylon"}, "spec": {"template": {"enable": True}}}
HANDLE = {"metadata": {"name": "guid-abc12"}}
TEMPLATE = {"spec": {"size": 3, "name": "{{ 7 * 7 }}", "enabled": True}}


def variables(**overrides: Any) -> dict[str, Any]:
    named: dict[str, Any] = dict(
        resource_claim=CLAIM,
        resource_handle=HANDLE,
        resource_index=0,
        resource_provider=PROVIDER,
        resource_template=TEMPLATE,
        requester_identity={"extra": {"email": "ann@example.com"}},
        requester_user={"metadata": {"name": "ann"}},
    )
    named.update(overrides)
    return template_variables(**named)


def test_every_documented_variable_is_available() -> None:
    override = {
        "metadata": {
            "name": "{{ resource_handle.metadata.name }}-{{ resource_index }}",
            "namespace": "{{ resource_claim.metadata.namespace }}",
            "annotations": {
                "owner": "{{ requester_user.metadata.name }}",
                "email": "{{ requester_identity.extra.email }}",
                "provider": "{{ resource_provider.metadata.name }}",
                "size": "size-{{ resource_template.spec.size }}",
            },
        }
    }
    assert render_object(override, variables()) == {
        "metadata": {
            "name": "guid-abc12-0",
            "namespace": "user-ns",
            "annotations": {"owner": "ann", "email": "ann@example.com", "provider": "babylon", "size": "size-3"},
        }
    }


def test_a_variable_that_does_not_apply_is_none_not_missing() -> None:
    unbound = variables(resource_claim=None)
    assert render_string("{{ 'unclaimed' if resource_claim is none else 'claimed' }}", unbound) == "unclaimed"
    with pytest.raises(TemplateError, match="undefined"):
        render_string("{{ resource_claim.metadata.name }}", unbound)


@pytest.mark.parametrize(
    ("source", "expected"),
    [
        ("{{ resource_index }}", 0),
        ("{{ resource_template.spec.size * 2 }}", 6),
        ("{{ resource_template.spec.enabled }}", True),
        ("{{ resource_claim.metadata.labels }}", {"team": "blue"}),
        ("{{ [1, 'two'] }}", [1, "two"]),
        ("{{ none }}", None),
        ("{{ 2.5 }}", 2.5),
        ("{{ '1.0' }}", "1.0"),  # the value's type, never a re-parse of its text
        ("{{ 'true' }}", "true"),
        ("{{- resource_index -}}", 0),
        ("{{ resource_index }} ", "0 "),
        ("#{{ resource_index }}", "#0"),
        ("{{ resource_index }}{{ resource_index }}", "00"),
        ("{% if true %}{{ resource_index }}{% endif %}", "0"),
        ("{{ resource_index | string }}", "0"),
        ("{{ resource_claim.metadata.labels | tojson }}", '{"team": "blue"}'),
        ("{{ range(3) }}", [0, 1, 2]),
        ("{{ resource_claim.metadata.labels.items() | list }}", [["team", "blue"]]),
    ],
)
def test_a_whole_string_expression_keeps_its_type_and_anything_else_is_text(source: str, expected: Any) -> None:
    rendered = render_string(source, variables())
    assert rendered == expected
    assert type(rendered) is type(expected)


def test_strings_without_markup_keys_and_non_strings_pass_through() -> None:
    template = {"{{ key }}": "plain\r\ntext", "n": 5, "b": False, "z": None, "l": [1.5, "x"]}
    assert render_object(template, variables()) == template


def test_a_trailing_newline_survives_rendering() -> None:
    assert render_string("name: {{ resource_index }}\n", variables()) == "name: 0\n"


def test_user_data_is_never_rendered_as_a_template() -> None:
    # The claim's template says "{{ 7 * 7 }}": it is data, copied verbatim.
    assert render_string("{{ resource_template.spec.name }}", variables()) == "{{ 7 * 7 }}"
    assert render_string("x-{{ resource_template.spec.name }}", variables()) == "x-{{ 7 * 7 }}"


def test_rendering_copies_instead_of_aliasing_the_inputs() -> None:
    template = {"labels": "{{ resource_claim.metadata.labels }}", "fixed": {"a": [1]}}
    before = copy.deepcopy(template)
    rendered = render_object(template, variables())
    rendered["labels"]["team"] = "red"
    rendered["fixed"]["a"].append(2)
    assert CLAIM["metadata"]["labels"] == {"team": "blue"}
    assert template == before


def test_an_error_carries_the_json_pointer_of_the_failing_string() -> None:
    override = {"metadata": {"annotations": {"lessor.dev/a~b": "{{ resource_claim.spec.missing }}"}}}
    with pytest.raises(TemplateError) as caught:
        render_object(override, variables(), "/spec/override")
    assert caught.value.path == "/spec/override/metadata/annotations/lessor.dev~1a~0b"
    assert "has no attribute 'missing'" in caught.value.message
    assert str(caught.value).startswith("/spec/override/metadata/annotations/lessor.dev~1a~0b: undefined: ")


def test_an_error_inside_a_list_names_the_index() -> None:
    with pytest.raises(TemplateError) as caught:
        render_object({"spec": {"args": ["ok", "{{ nope }}"]}}, variables())
    assert caught.value.path == "/spec/args/1"
    assert caught.value.message == "undefined: 'nope' is undefined"


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("{{ resource_index ", "syntax error on line 1"),
        ("{% for x in y %}", "syntax error on line 1"),
        ("{{ 1 / 0 }}", "division by zero"),
        ("{{ resource_claim.items }}", "cannot be written as JSON"),
        ("{{ {1: 'a'} }}", "object keys must be strings"),
        ("{{ 'a' ~ missing }}", "undefined: 'missing' is undefined"),
        ("{% if missing %}x{% endif %}", "undefined: 'missing' is undefined"),
        ("{% for x in missing %}{% endfor %}", "undefined: 'missing' is undefined"),
    ],
)
def test_template_failures_are_template_errors_with_a_message(source: str, message: str) -> None:
    with pytest.raises(TemplateError, match=message) as caught:
        render_string(source, variables(), "/spec/x")
    assert caught.value.path == "/spec/x"


def test_timestamps_inside_a_rendered_object_become_strings() -> None:
    rendered = render_string("{{ {'end': timestamp('2021-05-01T12:30:00Z').add('1d')} }}", variables())
    assert rendered == {"end": "2021-05-02T12:30:00Z"}
    text = render_string("{{ {'end': timestamp('2021-05-01T12:30:00Z')} | tojson }}", variables())
    assert text == '{"end": "2021-05-01T12:30:00Z"}'


def test_a_field_or_item_that_renders_to_omit_is_left_out() -> None:
    """Poolboy's `{{ value | default(omit) }}`: a field set only when its value is there."""
    template = {"data": {"size": "{{ size | default(omit) }}", "owner": "{{ owner | default(omit) }}",
                         "kept": "{{ omit if false else 'yes' }}"},
                "args": ["a", "{{ extra | default(omit) }}", "{{ omit }}", "b"]}
    rendered = render_object(template, {**variables(), "size": "small"})
    assert rendered == {"data": {"size": "small", "kept": "yes"}, "args": ["a", "b"]}


@pytest.mark.parametrize("source", ["name-{{ omit }}", "{{ [1, omit] }}", "{{ {'a': omit} }}", "{{ omit ~ '' }}"])
def test_omit_inside_a_text_or_a_value_is_an_error_that_says_why(source: str) -> None:
    with pytest.raises(TemplateError, match="omit leaves out a whole field or list item") as caught:
        render_object({"data": {"x": source}}, variables(), "/spec/override")
    assert caught.value.path == "/spec/override/data/x"


def test_a_whole_template_that_is_omit_is_an_error_not_an_empty_object() -> None:
    with pytest.raises(TemplateError, match="omit"):
        render_object("{{ omit }}", variables(), "/spec/override")
    with pytest.raises(TemplateError, match="omit"):
        render_string("{{ omit }}", variables(), "/spec/x")
