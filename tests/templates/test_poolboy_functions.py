"""Poolboy's template functions (strgen, to_datetime, parse_time_interval, now, json_query, ...), in the sandbox
and under its budget; and Poolboy's attribute names on the claim (`resource_claim.annotations`)."""

from __future__ import annotations

import re
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest

from lessor.templates import TemplateError, check_expression, check_variables, render_string, template_variables
from lessor.templates.strgen import PatternError, compile_pattern, strgen

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
CLAIM = {"metadata": {"name": "c", "namespace": "ns", "uid": "u-1", "annotations": {"extended-lifespan": ""}},
         "spec": {"resources": []}}


def render(source: str, **extra: Any) -> Any:
    return render_string(source, {**template_variables(resource_claim=CLAIM, clock=lambda: NOW), **extra})


@pytest.mark.parametrize("pattern,shape", [
    ("[0-9a-f]{8}", r"[0-9a-f]{8}"),
    ("[\\d]{3}", r"\d{3}"),
    ("\\u{2}\\c{2}", r"[A-Z]{2}[a-z]{2}"),
    ("[a-c]{2:4}", r"[a-c]{2,4}"),
    ("pre-[a-z]{5}", r"pre-[a-z]{5}"),
    ("(red|green){2}", r"(red|green){2}"),
    ("[\\d]{3}&[\\l]{3}", r"[0-9a-zA-Z]{6}"),
    ("\\[x\\]", r"\[x\]"),
])
def test_strgen_makes_strings_of_the_pattern(pattern: str, shape: str) -> None:
    for _ in range(20):
        assert re.fullmatch(shape, render(f"{{{{ {pattern!r} | strgen }}}}")), pattern


def test_strgen_shuffles_both_sides_together() -> None:
    made = strgen("[\\d]{4}&[\\u]{4}")
    assert sorted(map(str.isdigit, made)) == [False] * 4 + [True] * 4


def test_strgen_does_not_repeat_itself() -> None:
    assert len({render("{{ '[0-9a-f]{16}' | strgen }}") for _ in range(50)}) == 50


def test_strgen_draws_from_the_operating_systems_randomness(monkeypatch: pytest.MonkeyPatch) -> None:
    """Seeding Python's default generator changes nothing: names and passwords must not be predictable."""
    import random

    random.seed(1)
    first = strgen("[a-z]{32}")
    random.seed(1)
    assert strgen("[a-z]{32}") != first


@pytest.mark.parametrize("pattern", ["[a-z]{2000000}", "([a-z]{1000}){1001}", "(x{1000}|y){1001}",
                                     "[a-z]{99999999999999999999}"])
def test_strgen_beyond_the_size_limit_is_refused_before_drawing(pattern: str) -> None:
    with pytest.raises(TemplateError, match="template size limit"):
        render(f"{{{{ {pattern!r} | strgen }}}}")


@pytest.mark.parametrize("pattern,why", [("[a-z", "not closed"), ("(ab", "not closed"), ("ab)", "without its"),
                                         ("[z-a]", "goes down"), ("a{3:1}", "goes down"), ("a{x}", "count"),
                                         ("[]", "empty"), ("&a", "both sides"), ("a\\", "ends with")])
def test_a_bad_strgen_pattern_says_why(pattern: str, why: str) -> None:
    with pytest.raises(PatternError, match=why):
        compile_pattern(pattern)
    with pytest.raises(TemplateError, match=why):
        render(f"{{{{ {pattern!r} | strgen }}}}")


def test_to_datetime_and_now_subtract_and_compare() -> None:
    source = "{{ '2030-01-01T13:30:00Z' | to_datetime('%Y-%m-%dT%H:%M:%S%z') - now(true) }}"
    assert render(source) == "1h30m"
    assert render("{{ ('2030-01-01 13:00:00' | to_datetime) - now() < '2h' | parse_time_interval }}") is True
    assert render("{{ now(true).strftime('%FT%TZ') }}") == "2030-01-01T12:00:00Z"
    assert render("{{ now(fmt='%Y-%m-%d') }}") == "2030-01-01"


@pytest.mark.parametrize("text,value", [("1h", timedelta(hours=1)), ("2d", timedelta(days=2)),
                                        ("1h30m", timedelta(minutes=90)), ("90", timedelta(seconds=90)),
                                        ("1:30:00", timedelta(minutes=90)), ("1 h 30 m", timedelta(minutes=90))])
def test_parse_time_interval_reads_poolboys_intervals(text: str, value: timedelta) -> None:
    assert render("{{ (x | parse_time_interval).total_seconds() }}", x=text) == value.total_seconds()


def test_parse_time_interval_refuses_what_is_not_an_interval() -> None:
    with pytest.raises(TemplateError, match="invalid duration"):
        render("{{ 'soon' | parse_time_interval }}")
    with pytest.raises(TemplateError, match="out of range"):
        render("{{ '99999d' | parse_time_interval }}")


def test_pythons_timedelta_and_lessors_both_work() -> None:
    assert render("{{ now(true) + timedelta(hours=2) }}") == "2030-01-01T14:00:00Z"
    assert render("{{ timestamp.utcnow.add(timedelta('1d')) }}") == "2030-01-02T12:00:00Z"
    assert render("{{ datetime(2030, 1, 2, 12, tzinfo=timezone.utc) - now(true) }}") == "1d"


def test_json_query_merge_list_of_dicts_and_to_json() -> None:
    data = {"items": [{"name": "a", "ready": True}, {"name": "b", "ready": False}]}
    assert render("{{ data | json_query('items[?ready].name') }}", data=data) == ["a"]
    assert render("{{ [{'a': 1}, none, {'a': 2, 'b': 3}] | merge_list_of_dicts }}") == {"a": 2, "b": 3}
    assert render("{{ {'a': [1]} | to_json }}") == '{"a": [1]}'


def test_json_query_results_are_held_to_the_size_limit() -> None:
    data = {"x": list(range(600_000))}
    with pytest.raises(TemplateError, match="template size limit"):
        render("{{ data | json_query('[x, x]') }}", data=data)


def test_the_claim_answers_poolboys_attribute_names() -> None:
    assert render("{{ 'extended-lifespan' in resource_claim.annotations }}") is True
    assert render("{{ resource_claim.labels }}") == {}
    assert render("{{ resource_claim.name }}/{{ resource_claim.namespace }}/{{ resource_claim.uid }}") == "c/ns/u-1"
    assert render("{{ resource_claim.metadata.name }}") == "c"
    assert render("{{ resource_claim }}") == CLAIM  # written out, it is the object itself
    with pytest.raises(TemplateError, match="unsafe"):
        render("{{ resource_claim._metadata() }}")
    with pytest.raises(TemplateError):
        render("{{ resource_claim.update({'x': 1}) }}")


def test_checks_see_the_functions_too() -> None:
    variables = check_variables({"spec": {"end": "2030-01-01T12:30:00Z"}}, resource_claim=CLAIM, clock=lambda: NOW)
    assert check_expression("spec.end | to_datetime('%Y-%m-%dT%H:%M:%S%z') - now(true) < '1h' | parse_time_interval",
                            variables)
