"""Durations, `timestamp` and `timedelta` in exactly the forms providers write them."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lessor.templates import (
    TemplateError,
    check_expression,
    format_duration,
    parse_duration,
    parse_timestamp,
    render_string,
    template_variables,
)
from lessor.templates.durations import MAX_DURATION

NOW = datetime(2024, 2, 29, 23, 59, 59, 987654, tzinfo=timezone.utc)
VARIABLES = template_variables(clock=lambda: NOW)


def render(source: str) -> object:
    return render_string(source, VARIABLES)


def holds(expression: str) -> bool:
    return check_expression(expression, VARIABLES)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("1d", timedelta(days=1)),
        ("2d12h", timedelta(days=2, hours=12)),
        ("1.5h", timedelta(hours=1, minutes=30)),
        ("1h0m0s", timedelta(hours=1)),  # what Go prints
        ("500ms", timedelta(milliseconds=500)),
        ("0", timedelta(0)),
        ("-1h30m", -timedelta(hours=1, minutes=30)),
    ],
)
def test_durations_parse_go_and_day_forms(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "10", "1x", "h", "1 h", "1h 30m", "--1h", "1.5.2h", "1H", "3 days"])
def test_a_bad_duration_is_an_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid duration {text!r}"):
        parse_duration(text)


def test_a_bad_duration_in_a_template_names_the_string() -> None:
    with pytest.raises(TemplateError, match="invalid duration '3 days'"):
        render('{{ timestamp.utcnow.add("3 days") }}')


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (timedelta(minutes=10), "10m"),
        (timedelta(days=2, hours=12), "2d12h"),
        (timedelta(hours=1, seconds=5), "1h5s"),
        (timedelta(seconds=1.5), "1.5s"),
        (timedelta(0), "0s"),
        (-timedelta(hours=3), "-3h"),
    ],
)
def test_durations_print_compactly(value: timedelta, text: str) -> None:
    assert format_duration(value) == text


@given(st.timedeltas(min_value=-MAX_DURATION, max_value=MAX_DURATION))
def test_a_printed_duration_parses_back(value: timedelta) -> None:
    assert parse_duration(format_duration(value)) == value


@pytest.mark.parametrize("text", ["99999999h", "99999999d", "36500d1s", "-876001h", "9" * 30 + "ns", "1" * 5000 + "h"])
def test_a_duration_beyond_100_years_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match=r"out of range: at most 100 years|invalid duration"):
        parse_duration(text)
    assert parse_duration("36500d") == parse_duration("876000h") == MAX_DURATION


@pytest.mark.parametrize("text", ["0001-01-01T00:00:00Z", "1969-12-31T23:59:59Z", "9000-01-01T00:00:00Z",
                                  "9999-12-31T23:59:59Z", "0001-01-01T00:30:00+01:00"])
def test_a_time_outside_1970_to_9000_is_refused_by_name(text: str) -> None:
    with pytest.raises(ValueError, match="out of range: times are from 1970-01-01T00:00:00Z to before 9000"):
        parse_timestamp(text)
    assert parse_timestamp("8999-12-31T23:59:59Z") + MAX_DURATION > parse_timestamp("1970-01-01T00:00:00Z") - MAX_DURATION


@pytest.mark.parametrize("source", [
    '{{ timestamp("8999-12-31T00:00:00Z").add("2d") }}',
    '{{ timestamp("1970-01-01T00:00:00Z") - "1s" }}',
    '{{ timestamp("1970-01-01T00:00:00Z").add("99999999d") }}',
    "{% set ns = namespace(t=timestamp.utcnow) %}{% for i in range(200) %}"
    "{% set ns.t = ns.t.add('36500d') %}{% endfor %}{{ ns.t }}",
])
def test_template_time_arithmetic_out_of_range_is_a_template_error(source: str) -> None:
    with pytest.raises(TemplateError, match="out of range"):
        render(source)


def test_seed_forms_render_as_documented() -> None:
    assert render('{{ timestamp("2021-05-01T12:30:00Z") }}') == "2021-05-01T12:30:00Z"
    assert render('{{ timestamp("2021-05-01T12:30:00Z").add("3h") }}') == "2021-05-01T15:30:00Z"
    # utcnow is to the second, in %Y-%m-%dT%H:%M:%SZ form
    assert render("{{ timestamp.utcnow }}") == "2024-02-29T23:59:59Z"
    assert render('{{ timestamp.utcnow.add("1d") }}') == "2024-03-01T23:59:59Z"
    assert render("{{ timestamp.utcnow.datetime.year }}") == 2024
    assert render("{{ timestamp.utcnow.datetime.strftime('%d %b') }}") == "29 Feb"
    assert render('{{ timedelta("10m") }}') == "10m"
    assert render('{{ timedelta("10m").timedelta.total_seconds() }}') == 600.0


def test_a_timestamp_inside_text_prints_as_rfc3339() -> None:
    assert render("ends {{ timestamp.utcnow.add('8h') }}.") == "ends 2024-03-01T07:59:59Z."


def test_timestamps_normalise_to_utc_and_keep_microseconds() -> None:
    assert render('{{ timestamp("2021-05-01T14:30:00+02:00") }}') == "2021-05-01T12:30:00Z"
    assert render('{{ timestamp("2021-05-01T12:30:00.123456789Z") }}') == "2021-05-01T12:30:00.123456Z"
    assert render('{{ timestamp("2021-05-01T12:30:00.500Z") }}') == "2021-05-01T12:30:00.5Z"


@pytest.mark.parametrize("text", ["2021-05-01", "2021-05-01T12:30:00", "yesterday", "2021-13-01T00:00:00Z"])
def test_a_bad_timestamp_is_an_error_naming_it(text: str) -> None:
    with pytest.raises(ValueError, match=f"invalid timestamp {text!r}"):
        parse_timestamp(text)
    with pytest.raises(TemplateError, match="invalid timestamp"):
        render(f'{{{{ timestamp("{text}") }}}}')


def test_timestamps_compare_with_each_other_and_with_strings() -> None:
    assert holds('timestamp("2021-05-01T12:30:00Z") < timestamp("2021-05-01T12:30:01Z")')
    assert holds('"2021-05-01T12:30:00Z" < timestamp.utcnow.add("8h")')
    assert holds('timestamp.utcnow.add("8h") > "2024-03-01T07:59:58Z"')
    assert holds('timestamp("2021-05-01T12:30:00Z") == "2021-05-01T14:30:00+02:00"')
    assert holds('timestamp("2021-05-01T12:30:00Z") != "not a time"')
    assert holds('timestamp("2021-05-01T12:30:00Z") >= timestamp("2021-05-01T12:30:00Z")')
    assert not holds('"2024-03-02T00:00:00Z" <= timestamp.utcnow.add("1d")')


def test_ordering_a_timestamp_against_garbage_is_an_error() -> None:
    with pytest.raises(TemplateError, match="invalid timestamp 'soon'"):
        holds('"soon" < timestamp.utcnow')
    with pytest.raises(TemplateError, match="not supported"):
        holds("timestamp.utcnow < 5")


def test_subtraction_gives_durations_and_timestamps() -> None:
    assert render('{{ timestamp("2021-05-02T00:00:00Z") - timestamp("2021-05-01T12:00:00Z") }}') == "12h"
    assert render('{{ timestamp("2021-05-01T12:00:00Z") - "2021-05-02T00:00:00Z" }}') == "-12h"
    assert render('{{ "2021-05-02T00:00:00Z" - timestamp("2021-05-01T00:00:00Z") }}') == "1d"
    assert render('{{ timestamp("2021-05-01T12:00:00Z") - "1h" }}') == "2021-05-01T11:00:00Z"
    assert render('{{ timestamp("2021-05-01T12:00:00Z") - timedelta("1d") }}') == "2021-04-30T12:00:00Z"
    assert render('{{ timestamp("2021-05-01T12:00:00Z") + timedelta("30m") }}') == "2021-05-01T12:30:00Z"
    assert holds('timestamp("2021-05-14T23:59:59Z") - timestamp("2021-05-01T00:00:00Z") < timedelta("14d")')
    assert not holds('timestamp("2021-05-15T00:00:00Z") - timestamp("2021-05-01T00:00:00Z") < timedelta("14d")')
    assert holds('timedelta("90m") > "1h"')
    assert holds('timedelta("1h") + "30m" == timedelta("90m")')


def test_utcnow_follows_the_clock() -> None:
    ticks = iter([NOW, NOW + timedelta(hours=1)])
    variables = template_variables(clock=lambda: next(ticks))
    assert render_string("{{ timestamp.utcnow }}", variables) == "2024-02-29T23:59:59Z"
    assert render_string("{{ timestamp.utcnow }}", variables) == "2024-03-01T00:59:59Z"


def test_without_variables_timestamp_uses_the_real_clock() -> None:
    before = datetime.now(timezone.utc).replace(microsecond=0)
    rendered = render_string("{{ timestamp.utcnow }}", {})
    after = datetime.now(timezone.utc)
    assert before <= parse_timestamp(rendered) <= after
