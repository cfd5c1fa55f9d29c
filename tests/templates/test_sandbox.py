"""Known Jinja2 escape payloads are refused, internals never leak, inputs never change."""

from __future__ import annotations

import copy
import re
from typing import Any

import pytest

from lessor.templates import (
    TemplateError,
    check_expression,
    check_variables,
    render_object,
    render_string,
    run_checks,
    template_variables,
)

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
        ("'a' * 10**9", "longer than the template size limit"),
        ("[0] * 10**9", "longer than the template size limit"),
        ("10**9 * 'ab'", "longer than the template size limit"),
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


# --- the budget: memory bombs are refused before they allocate, and time is limited from outside -----------

SIZE_LIMIT = "longer than the template size limit \\(1,000,000 characters or items\\)"
DOUBLED = "{% set ns = namespace(l=['x' * 1000]) %}{% for i in range(30) %}{% set ns.l = [ns.l, ns.l] %}{% endfor %}"


@pytest.mark.parametrize("source", [
    "{{ '{:>999999999}'.format(1) }}",
    "{{ '{:{}}'.format(1, 999999999) }}",
    "{{ '{0:.999999999f}'.format(1.5) }}",
    "{{ '{x:>999999999}'.format_map({'x': 1}) }}",
    "{{ 'x'.ljust(999999999) }}",
    "{{ 'x'.rjust(999999999) }}",
    "{{ 'x'.center(999999999) }}",
    "{{ 'x'.zfill(999999999) }}",
    "{{ ('\\t' * 1000).expandtabs(999999) }}",
    "{{ ('a' * 1000).replace('a', 'b' * 100000) }}",
    "{{ ('ab' * 1000).translate({97: 'x' * 1000000}) }}",
    "{{ '%999999999d' % 1 }}",
    "{{ '%*d' % (999999999, 1) }}",
    "{{ 'x' * 999999999 }}",
    "{{ ('x' * 600000) + ('x' * 600000) }}",
    "{{ 'a' | center(999999999) }}",
    "{{ 'a' | indent(999999999) }}",
    "{{ ('a' * 1000) | replace('a', 'b' * 100000) }}",
    "{{ '%999999999d' | format(1) }}",
    "{{ [1] | batch(999999999, 'x') | list }}",
    # 10,000 items, not 100,000: over the size limit all the same, and far inside the 2 s time limit on a busy machine
    "{{ range(10000) | map('string') | join('x' * 200) }}",
    "{{ ','.join(range(10000) | map('string') | map('center', 200)) }}",
    "{{ (['x' * 1000000] * 2) | sum(start='') }}",
    "{% set ns = namespace(s='x' * 1000) %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ 1 }}",
    "{% for i in range(100000) %}{{ 'x' * 100 }}{% endfor %}",
    "{% macro m() %}{{ 'x' * 999999 }}{% endmacro %}{{ m() ~ m() }}",
    # shared references: tiny in memory, huge once written out as text or JSON
    "{{ ['x' * 600000] * 2 }}",
    "{{ ('{0}' * 100) .format('x' * 100000) }}",
    "{{ '%s%s' % ('x' * 600000, 'x' * 600000) }}",
    "{{ ('%(a)s' * 1000) % {'a': 'x' * 100000} }}",
    DOUBLED + "{{ ns.l }}",
    DOUBLED + "{{ ns.l | tojson }}",
    DOUBLED + "{{ ns.l | string | length }}",
    DOUBLED + "{{ 'a' ~ ns.l }}",
    DOUBLED + "{{ [ns.l] | join(',') }}",
    DOUBLED + "x{{ '{}'.format(ns.l) }}",
])
def test_memory_bombs_are_a_template_error_naming_the_limit(source: str, variables: dict[str, Any]) -> None:
    with pytest.raises(TemplateError, match=SIZE_LIMIT) as caught:
        render_string(source, variables, "/spec/override/data/x")
    assert caught.value.path == "/spec/override/data/x"


def test_the_limits_leave_ordinary_formatting_alone(variables: dict[str, Any]) -> None:
    source = ("{{ '%s-%05d' % ('a', 3) }} {{ '{:>5}|{:.2f}'.format(1, 2.5) }} {{ 'x'.ljust(3, '.') }}"
              " {{ 'a b' | replace(' ', '_') }} {{ ['a', 'b'] | join('-') }} {{ 'ab' | center(4) }}|")
    assert render_string(source, variables) == "a-00003     1|2.50 x.. a_b a-b  ab |"
    assert len(render_string("{{ 'x' * 1000000 }}", variables)) == 1_000_000


def test_a_template_that_runs_too_long_is_stopped_from_outside(variables: dict[str, Any]) -> None:
    # An empty loop body calls nothing the sandbox could check: only the watchdog can stop it.
    source = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
    with pytest.raises(TemplateError, match="ran out of time \\(the template time limit is 2 s\\)") as caught:
        render_string(source, variables, "/spec/override/data/loop")
    assert caught.value.path == "/spec/override/data/loop"
    assert render_string("{{ 1 + 1 }}", variables) == 2  # the next template has a budget of its own


def test_a_check_that_runs_too_long_is_a_named_check_failure(variables: dict[str, Any]) -> None:
    # 10**10 comparisons: minutes of CPU without the budget.
    quadratic = "range(100000) | select('in', range(100000, 200000) | list) | list | length == 0"
    failures = run_checks([{"name": "quadratic", "check": quadratic}, {"name": "quick", "check": "1 < 2"}],
                          check_variables({}))
    assert [(f.name, f.error) for f in failures] == [
        ("quadratic", "the template ran out of time (the template time limit is 2 s)")]
