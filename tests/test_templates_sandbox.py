"""Known Jinja2 escape payloads are refused, internals never leak, inputs never change."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from lessor.templates import TemplateError, check_expression, render_object, render_string, template_variables

CLAIM = {"metadata": {"name": "c", "labels": {"team": "blue"}}, "spec": {"list": [1, 2]}}

ESCAPES = [
    "''.__class__.__mro__[1].__subclasses__()",
    "().__class__.__base__.__subclasses__()",
    "cycler.__init__.__globals__",
    "joiner.__init__.__globals__",
    "lipsum.__globals__",
    "namespace.__init__.__globals__",
    "self._TemplateReference__context",
    "self.__init__.__globals__",
    "config",
    "config.items()",
    "request",
    "request.application.__globals__",
    "''|attr('__class__')",
    "resource_claim|attr('__class__')|attr('__base__')",
    "''['__class__']",
    "[resource_claim]|map(attribute='__class__')|list",
    "[resource_claim]|selectattr('__class__')|list",
    "'{0.__class__}'.format(resource_claim)",
    "'{0.__class__.__init__.__globals__}'.format(timestamp)",
    "'{a.__class__}'.format_map({'a': resource_claim})",
    "''.format.__self__",
    "dict.mro()",
    "dict.__subclasses__()",
    "timestamp._clock",
    "timestamp.__call__.__globals__",
    "timestamp.utcnow._value",
    "timestamp.utcnow.add.__func__.__globals__",
    "timestamp.utcnow.datetime.__class__",
    "timedelta.__globals__",
    "timedelta('1h').timedelta.__class__",
    "range.__self__",
    "resource_claim.__class__",
    "resource_claim.__init__",
]

# Text that only the Python internals the payloads aim for would produce.
LEAKS = re.compile(r"<class |<function |<module |__builtins__|subprocess|Popen|os\.system|_io\.")


@pytest.fixture
def variables() -> dict[str, Any]:
    return template_variables(resource_claim=copy.deepcopy(CLAIM))


@pytest.mark.parametrize("payload", ESCAPES)
@pytest.mark.parametrize("shape", ["{{{{ {} }}}}", "x{{{{ {} }}}}", "{{% set v = {} %}}{{{{ v }}}}"])
def test_escape_payloads_are_refused_without_leaking(payload: str, shape: str, variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError) as caught:
        render_string(shape.format(payload), variables)
    message = caught.value.message
    assert message.startswith(("refused by the sandbox", "undefined")), message
    assert not LEAKS.search(message), message


def test_probing_an_unsafe_attribute_is_itself_refused(variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        check_expression("resource_claim.__class__ is defined", variables)


@pytest.mark.parametrize("payload", ESCAPES)
def test_escape_payloads_in_checks_are_errors_not_results(payload: str, variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError):
        check_expression(payload, variables)


@pytest.mark.parametrize(
    "payload",
    [
        "resource_claim.update({'hacked': true})",
        "resource_claim.metadata.labels.pop('team')",
        "resource_claim.metadata.labels.clear()",
        "resource_claim.metadata.labels.setdefault('x', 1)",
        "resource_claim.metadata.labels.__setitem__('team', 'red')",
        "resource_claim.spec.list.append(3)",
        "resource_claim.spec.list.extend([3])",
        "resource_claim.spec.list.insert(0, 0)",
        "resource_claim.spec.list.remove(1)",
        "resource_claim.spec.list.sort(reverse=true)",
        "resource_claim.spec.list.reverse()",
        "resource_claim.spec.list.__iadd__([3])",
    ],
)
def test_templates_cannot_change_the_variables(payload: str, variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="refused by the sandbox"):
        render_string(f"{{{{ {payload} }}}}", variables)
    assert variables["resource_claim"] == CLAIM


def test_set_statements_cannot_assign_into_the_variables(variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="non-namespace"):
        render_string("{% set c = resource_claim %}{% set c.hacked = 1 %}", variables)
    assert variables["resource_claim"] == CLAIM


def test_one_render_cannot_affect_the_next(variables: dict[str, Any]) -> None:
    template = {"a": "{% set resource_index = 9 %}{{ resource_index }}", "b": "{{ resource_index }}"}
    assert render_object(template, {**variables, "resource_index": 0}) == {"a": "9", "b": 0}


@pytest.mark.parametrize(
    ("payload", "message"),
    [
        ("range(10**10)|list", "Range too big"),
        ("range(10**6)", "Range too big"),
        ("'a' * 10**9", "sequence longer than"),
        ("[0] * 10**9", "sequence longer than"),
        ("10**9 * 'ab'", "sequence longer than"),
        ("2 ** (10**10)", "integer larger than"),
        ("9 ** (9 ** 9)", "integer larger than"),
    ],
)
def test_runaway_allocations_are_refused(payload: str, message: str, variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match=message):
        render_string(f"{{{{ {payload} }}}}", variables)


def test_unbounded_recursion_is_an_error_not_a_crash(variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match="recursion"):
        render_string("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", variables)


def test_templates_cannot_reach_files(variables: dict[str, Any]) -> None:
    for source in ("{% include '/etc/passwd' %}", "{% import '/etc/passwd' as p %}", "{% extends 'base' %}"):
        with pytest.raises(TemplateError, match="no loader"):
            render_string(source, variables)


def test_ordinary_use_of_the_same_objects_still_works(variables: dict[str, Any]) -> None:
    source = (
        "{{ resource_claim.metadata.labels.get('team') }}"
        "-{{ resource_claim.spec.list | sort(reverse=true) | join(',') }}"
        "-{{ '{0}/{1}'.format(resource_claim.metadata.name, 'x') }}"
        "-{{ 'ab' * 2 }}-{{ 2 ** 10 }}"
        "-{% set ns = namespace(n=0) %}{% for i in range(3) %}{% set ns.n = ns.n + i %}{% endfor %}{{ ns.n }}"
        "-{{ dict(a=1) | tojson }}"
    )
    assert render_string(source, variables) == 'blue-2,1-c/x-abab-1024-3-{"a": 1}'
    assert variables["resource_claim"] == CLAIM
