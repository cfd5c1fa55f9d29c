"""A function, filter or test the sandbox lacks is an error before anything renders, wherever it is;
what a template binds itself, and what Jinja2 binds while it runs, is not. (Names no one will add,
such as `frobnicate` and `shout`: Poolboy's functions may land in the sandbox.)"""

from __future__ import annotations

import pytest

from lessor.templates import (
    TemplateError,
    check_expression,
    compiled_checks,
    missing_names,
    render_string,
    template_errors,
    template_variables,
)


@pytest.mark.parametrize(("source", "message"), [
    ("{{ frobnicate() }}", "line 1: lessor's templates have no function 'frobnicate'"),
    ("{% if false %}\n{{ x | shout }}{% endif %}", "line 2: lessor's templates have no filter 'shout'"),
    ("{% if false %}{% if 1 is truthy %}x{% endif %}{% endif %}", "line 1: lessor's templates have no test 'truthy'"),
    ("{% filter shout %}x{% endfilter %}", "line 1: lessor's templates have no filter 'shout'"),
])
def test_what_the_sandbox_lacks_fails_even_in_a_branch_never_taken(source: str, message: str) -> None:
    with pytest.raises(TemplateError) as caught:
        render_string(source, template_variables(), "/spec/override/data/x")
    assert str(caught.value) == f"/spec/override/data/x: {message}"
    assert template_errors("spec.override", {"data": {"x": source}}) == [f"spec.override/data/x: {message}"]


def test_a_check_is_refused_at_compile_time_too() -> None:
    _, errors = compiled_checks("spec.validation.checks", [{"name": "n", "check": "spec.at | shout < frobnicate()"}])
    assert errors == ["spec.validation.checks[0].check: line 1: lessor's templates have no filter 'shout'"]
    with pytest.raises(TemplateError, match="no function 'frobnicate'"):
        check_expression("frobnicate()", {})


@pytest.mark.parametrize("source", [
    "{% macro m(x) %}{{ x }}{% endmacro %}{{ m(1) }}",
    "{% set f = timestamp %}{{ f('2024-01-01T00:00:00Z') }}",
    "{% for i in [[1], [2]] recursive %}{{ i if i is number else loop(i) }}{% endfor %}",
    "{% macro m() %}{{ caller() }}{% endmacro %}{% call m() %}x{% endcall %}",
    "{{ range(2) | list }}{{ dict(a=1) }}{{ namespace(a=1).a }}{{ timedelta('1h') }}",
    "{{ 'a b'.split() | map('upper') | join(',') }}{{ 3 is odd }}",
])
def test_what_a_template_binds_or_the_sandbox_offers_is_not_missing(source: str) -> None:
    assert missing_names(source) == []
    render_string(source, template_variables())


def test_every_use_is_named_with_its_line_and_names_of_the_old_tool_on_request() -> None:
    source = "{{ frobnicate() }}\n{{ oldclock.utcnow() | shout }}\n{% set oldclock = 1 %}"
    assert [str(m) for m in missing_names(source, also={"oldclock"})] == [
        "line 1: lessor's templates have no function 'frobnicate'",
        "line 2: lessor's templates have no filter 'shout'",
    ]  # `oldclock` is bound by the template itself
    assert [str(m) for m in missing_names("{{ oldclock.utcnow() }}", also={"oldclock"})] == [
        "line 1: lessor's templates have no name 'oldclock'"]
    assert missing_names("{{ datetime.utcnow() }}", also={"datetime"}) == []  # Poolboy's, and lessor's now
