"""A Lease's spec validated into a request: selector, exporterRef, the time window (rules 1, 10, 11)."""

from __future__ import annotations

import dataclasses
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lessor.model.views.leasing import LeaseView
from lessor.actors.leasing.spec import (
    ConditionType,
    LeaseRequest,
    Reason,
    Verdict,
    format_go_duration,
    parse_go_duration,
    parse_lease,
    time_problems,
)
from lessor.model.times import format_time
from lessor.templates.timestamps import format_timestamp

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
BOARD = {"matchLabels": {"board": "rpi4"}}


def lease(**spec: object) -> dict:
    body: dict = {"clientRef": {"name": "alice"}}
    body.update(spec)
    return {
        "metadata": {"name": "l1", "namespace": "lab", "generation": 3,
                     "creationTimestamp": "2030-01-01T11:00:00Z"},
        "spec": body,
    }


def ok(**spec: object) -> LeaseRequest:
    request = parse_lease(LeaseView.of(lease(**spec)))
    assert isinstance(request, LeaseRequest), request
    return request


def refused(**spec: object) -> Verdict:
    verdict = parse_lease(LeaseView.of(lease(**spec)))
    assert isinstance(verdict, Verdict), verdict
    return verdict


def ts(value: datetime) -> str:
    return format_timestamp(value)


def go(value: timedelta) -> str:
    """A Go duration (no day unit, unlike format_duration)."""
    return f"{int(value.total_seconds())}s"


# --- what a valid lease becomes ---------------------------------------------------------------


def test_a_valid_lease_becomes_a_typed_request() -> None:
    request = ok(selector=BOARD, duration="1h30m", release=True, allowDisabled=True)
    assert request.name == "l1"
    assert request.client == "alice"
    assert request.selector is not None and request.selector.matches({"board": "rpi4"})
    assert not request.selector.matches({"board": "rpi5"})
    assert request.exporter_ref is None
    assert request.duration == timedelta(hours=1, minutes=30)
    assert request.begin is None and request.end is None
    assert request.release is True and request.allow_disabled is True
    assert request.created == datetime(2030, 1, 1, 11, tzinfo=timezone.utc)
    assert request.generation == 3
    assert request.given == frozenset({"duration"})


def test_the_request_is_immutable() -> None:
    request = ok(selector=BOARD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        request.client = "mallory"  # type: ignore[misc]


def test_flags_default_to_false() -> None:
    request = ok(selector=BOARD)
    assert request.release is False and request.allow_disabled is False


def test_exporter_ref_alone_pins_an_exporter() -> None:
    request = ok(exporterRef={"name": "rpi4-1"})
    assert request.exporter_ref == "rpi4-1"
    assert request.selector is None


def test_exporter_ref_with_an_empty_selector_is_valid() -> None:
    assert ok(exporterRef={"name": "rpi4-1"}, selector={}).exporter_ref == "rpi4-1"


# --- rule 1: selector -------------------------------------------------------------------------


@pytest.mark.parametrize("spec", [{}, {"selector": {}}, {"selector": None},
                                  {"selector": {"matchLabels": {}, "matchExpressions": []}}])
def test_no_selector_and_no_exporter_ref_is_invalid_selector(spec: dict) -> None:
    verdict = refused(**spec)
    assert (verdict.type, verdict.reason) == (ConditionType.INVALID, Reason.INVALID_SELECTOR)
    assert verdict.message.startswith("spec.selector:")


def test_a_malformed_selector_is_invalid_selector_naming_the_field() -> None:
    verdict = refused(selector={"matchExpressions": [{"key": "board", "operator": "In"}]})
    assert verdict.reason is Reason.INVALID_SELECTOR
    assert "spec.selector.matchExpressions[0].values" in verdict.message


def test_an_exporter_ref_without_a_name_is_invalid_selector() -> None:
    verdict = refused(exporterRef={})
    assert verdict.reason is Reason.INVALID_SELECTOR
    assert "spec.exporterRef.name" in verdict.message


def test_no_spec_at_all_is_invalid() -> None:
    verdict = parse_lease(LeaseView.of({"metadata": {"name": "l1"}}))
    assert isinstance(verdict, Verdict) and verdict.type is ConditionType.INVALID


def test_a_missing_client_ref_admits_no_one() -> None:
    verdict = parse_lease(LeaseView.of({"metadata": {"name": "l1"}, "spec": {"selector": BOARD}}))
    assert isinstance(verdict, Verdict)
    assert (verdict.type, verdict.reason) == (ConditionType.UNSATISFIABLE, Reason.NO_ACCESS)
    assert "spec.clientRef.name" in verdict.message


def test_every_problem_is_reported_and_the_first_gives_the_reason() -> None:
    verdict = refused(selector={}, duration="-1h")
    assert verdict.reason is Reason.INVALID_SELECTOR
    assert "spec.selector" in verdict.message and "spec.duration" in verdict.message


# --- rule 1: time fields ----------------------------------------------------------------------


@pytest.mark.parametrize("duration", ["0", "0s", "-1h", "-30m"])
def test_a_non_positive_duration_is_invalid_duration(duration: str) -> None:
    verdict = refused(selector=BOARD, duration=duration)
    assert (verdict.type, verdict.reason) == (ConditionType.INVALID, Reason.INVALID_DURATION)
    assert verdict.message.startswith("spec.duration:")


@pytest.mark.parametrize("duration", ["1d", "an hour", "1h30", "", 3600])
def test_a_malformed_duration_is_invalid_duration(duration: object) -> None:
    verdict = refused(selector=BOARD, duration=duration)
    assert verdict.reason is Reason.INVALID_DURATION
    assert "spec.duration" in verdict.message


def test_the_day_unit_is_refused_with_a_hint() -> None:
    assert "24h" in refused(selector=BOARD, duration="1d").message


@pytest.mark.parametrize("field", ["beginTime", "endTime"])
def test_a_malformed_time_is_invalid_duration_naming_the_field(field: str) -> None:
    verdict = refused(selector=BOARD, **{field: "tomorrow"})
    assert verdict.reason is Reason.INVALID_DURATION
    assert f"spec.{field}" in verdict.message


@pytest.mark.parametrize("end", [NOW, NOW - HOUR])
def test_an_end_not_after_the_begin_is_invalid_duration(end: datetime) -> None:
    verdict = refused(selector=BOARD, beginTime=ts(NOW), endTime=ts(end))
    assert verdict.reason is Reason.INVALID_DURATION
    assert verdict.message.startswith("spec.endTime:")


def test_three_time_fields_that_disagree_are_invalid_duration() -> None:
    verdict = refused(selector=BOARD, beginTime=ts(NOW), endTime=ts(NOW + 2 * HOUR), duration="1h")
    assert verdict.reason is Reason.INVALID_DURATION
    assert verdict.message.startswith("spec.duration:")
    assert "2h" in verdict.message


def test_three_time_fields_that_agree_are_valid() -> None:
    request = ok(selector=BOARD, beginTime=ts(NOW), endTime=ts(NOW + 2 * HOUR), duration="2h")
    assert (request.begin, request.end, request.duration) == (NOW, NOW + 2 * HOUR, 2 * HOUR)


def test_begin_and_end_give_the_duration() -> None:
    request = ok(selector=BOARD, beginTime=ts(NOW), endTime=ts(NOW + 90 * timedelta(minutes=1)))
    assert request.duration == timedelta(minutes=90)


def test_end_and_duration_give_the_begin() -> None:
    request = ok(selector=BOARD, endTime=ts(NOW + 3 * HOUR), duration="1h")
    assert request.begin == NOW + 2 * HOUR
    assert request.scheduled(NOW)


def test_times_are_normalised_to_utc() -> None:
    request = ok(selector=BOARD, beginTime="2030-01-01T14:00:00+02:00", duration="1h")
    assert request.begin == NOW
    assert request.begin.utcoffset() == timedelta(0)


def test_parse_go_duration_names_the_field() -> None:
    assert parse_go_duration("1h30m", "f") == timedelta(hours=1, minutes=30)
    with pytest.raises(ValueError, match="^spec.x: "):
        parse_go_duration("2d", "spec.x")


# --- what the request asks for ---------------------------------------------------------------


def test_the_requested_duration() -> None:
    assert ok(selector=BOARD, duration="2h").requested_duration(NOW) == 2 * HOUR
    assert ok(selector=BOARD, beginTime=ts(NOW + HOUR), endTime=ts(NOW + 4 * HOUR)).requested_duration(NOW) \
        == 3 * HOUR
    # Only an end: the lease starts when granted, now at the earliest.
    assert ok(selector=BOARD, endTime=ts(NOW + 5 * HOUR)).requested_duration(NOW) == 5 * HOUR
    # Neither a duration nor an end: unbounded.
    assert ok(selector=BOARD).requested_duration(NOW) is None


def test_a_begin_without_a_duration_or_an_end_is_refused_naming_spec_duration() -> None:
    """Jumpstarter's "creating lease with BeginTime but zero Duration and no EndTime": a lease that would never end."""
    verdict = refused(selector=BOARD, beginTime=ts(NOW + HOUR))
    assert verdict.reason is Reason.INVALID_DURATION
    assert verdict.message.startswith("spec.duration: duration is required when spec.beginTime is set")
    assert time_problems({"beginTime": ts(NOW + HOUR)}) == [verdict.message]


def test_rule_11_the_end_is_end_time_else_begin_plus_duration() -> None:
    granted = NOW + timedelta(minutes=7)
    assert ok(selector=BOARD, endTime=ts(NOW + 5 * HOUR)).end_for(granted) == NOW + 5 * HOUR
    assert ok(selector=BOARD, beginTime=ts(NOW), duration="1h").end_for(granted) == NOW + HOUR
    assert ok(selector=BOARD, duration="1h").end_for(granted) == granted + HOUR
    assert ok(selector=BOARD).end_for(granted) is None
    assert ok(selector=BOARD, duration="1h").window(granted) == (granted, granted + HOUR)


def test_rule_10_a_begin_in_the_future_is_scheduled() -> None:
    request = ok(selector=BOARD, beginTime=ts(NOW + HOUR), duration="1h")
    assert request.scheduled(NOW)
    assert not request.scheduled(NOW + HOUR)
    assert not ok(selector=BOARD, duration="1h").scheduled(NOW)


def test_expired() -> None:
    request = ok(selector=BOARD, endTime=ts(NOW))
    assert request.expired(NOW) and not request.expired(NOW - timedelta(seconds=1))
    assert not ok(selector=BOARD, duration="1h").expired(NOW + 100 * HOUR)


def test_a_scheduled_lease_whose_window_has_passed_is_expired_before_it_is_granted() -> None:
    request = ok(selector=BOARD, beginTime=ts(NOW), duration="1h")
    assert request.fixed_end == NOW + HOUR
    assert request.expired(NOW + HOUR) and not request.expired(NOW + HOUR - timedelta(seconds=1))


def created_at(when: datetime, **spec: object) -> LeaseRequest:
    body = lease(selector=BOARD, **spec)
    body["metadata"]["creationTimestamp"] = ts(when)
    request = parse_lease(LeaseView.of(body))
    assert isinstance(request, LeaseRequest), request
    return request


@pytest.mark.parametrize("begun", [timedelta(seconds=2), timedelta(seconds=1, microseconds=1),
                                   timedelta(seconds=1), timedelta(microseconds=999_999)])
@pytest.mark.parametrize("into_second", [timedelta(0), timedelta(microseconds=1), timedelta(microseconds=999_999)])
def test_a_begin_plus_duration_over_before_creation_starts_at_once_at_every_rounding(
        begun: timedelta, into_second: timedelta) -> None:
    """Jumpstarter's "BeginTime already in the past": begun `begun` before the second the lease is created in,
    1 s long, so its window closed before (or as) it was created, whichever way the seconds round: never
    expired while it waits, so it is granted at once, and it ends at its end (already past)."""
    created = NOW + into_second
    request = created_at(created, beginTime=ts(NOW - begun), duration="1s")
    assert request.expiry is None and not request.expired(created + HOUR)
    assert request.end_for(created) == request.fixed_end <= NOW


def test_a_window_that_closes_while_the_lease_waits_still_expires() -> None:
    request = created_at(NOW, beginTime=ts(NOW - timedelta(seconds=2)), duration="3s")
    assert request.expiry == NOW + timedelta(seconds=1)
    assert request.expired(NOW + timedelta(seconds=1)) and not request.expired(NOW)
    # An endTime in the past expires as given, created before it or after.
    assert created_at(NOW, endTime=ts(NOW - timedelta(seconds=1))).expired(NOW)


# --- times in whole seconds, rounded down (lessor.model.times) ----------------------------------------


def test_the_window_is_written_in_whole_seconds_and_never_longer_than_asked() -> None:
    granted = NOW + timedelta(seconds=5, microseconds=433_598)
    begin, end = ok(selector=BOARD, duration="1.5s").window(granted)
    assert begin == NOW + timedelta(seconds=5) and end == NOW + timedelta(seconds=6)
    assert end - granted <= timedelta(seconds=1.5)
    # A restarted actor computes the same end from the written begin.
    assert ok(selector=BOARD, duration="1.5s").end_for(begin) == end


def test_an_end_with_a_fraction_is_rounded_down_and_expires_there() -> None:
    request = ok(selector=BOARD, endTime="2030-01-01T12:00:00.5Z")
    assert request.end_for(NOW) == NOW
    assert request.expired(NOW + timedelta(microseconds=1)) and request.expired(NOW)
    assert not request.expired(NOW - timedelta(microseconds=1))


def test_format_time_writes_whole_seconds() -> None:
    assert format_time(NOW + timedelta(seconds=2, microseconds=433_598)) == "2030-01-01T12:00:02Z"
    assert format_time(datetime(2030, 1, 1, 14, 0, 0, 999_999, tzinfo=timezone(timedelta(hours=2)))) \
        == "2030-01-01T12:00:00Z"


def test_describe_duration_names_the_fields() -> None:
    assert ok(selector=BOARD, duration="4h").describe_duration(NOW) == "4h (spec.duration)"
    assert "spec.endTime" in ok(selector=BOARD, endTime=ts(NOW + HOUR)).describe_duration(NOW)
    assert "spec.beginTime" in ok(selector=BOARD, beginTime=ts(NOW), endTime=ts(NOW + HOUR)).describe_duration(NOW)
    assert "unbounded" in ok(selector=BOARD).describe_duration(NOW)


# --- properties -------------------------------------------------------------------------------

_begins = st.integers(min_value=-10**6, max_value=10**6).map(lambda s: NOW + timedelta(seconds=s))
_lengths = st.integers(min_value=1, max_value=10**6).map(lambda s: timedelta(seconds=s))


@given(_begins, _lengths, st.sampled_from([("beginTime", "endTime"), ("beginTime", "duration"),
                                          ("endTime", "duration"), ("beginTime", "endTime", "duration")]))
def test_any_two_time_fields_give_the_same_window(begin: datetime, length: timedelta, keys: tuple[str, ...]) -> None:
    values = {"beginTime": ts(begin), "endTime": ts(begin + length), "duration": go(length)}
    request = ok(selector=BOARD, **{key: values[key] for key in keys})
    granted = begin + timedelta(seconds=1)
    assert request.end_for(granted) == begin + length
    assert request.requested_duration(begin) == length
    if "beginTime" in keys or "endTime" in keys and "duration" in keys:
        assert request.begin == begin


@given(_begins, _lengths, _lengths)
def test_three_time_fields_are_valid_exactly_when_they_agree(begin: datetime, length: timedelta,
                                                             other: timedelta) -> None:
    result = parse_lease(LeaseView.of(lease(selector=BOARD, beginTime=ts(begin), endTime=ts(begin + length),
                               duration=go(other))))
    if length == other:
        assert isinstance(result, LeaseRequest)
    else:
        assert isinstance(result, Verdict) and result.reason is Reason.INVALID_DURATION


@pytest.mark.parametrize(("value", "text"), [
    (timedelta(0), "0s"), (timedelta(hours=36), "36h"), (timedelta(hours=1, minutes=30), "1h30m"),
    (timedelta(seconds=1.5), "1.5s"), (timedelta(hours=-2), "-2h"), (timedelta(hours=1000), "1000h"),
])
def test_format_go_duration_writes_what_the_fields_accept(value: timedelta, text: str) -> None:
    assert format_go_duration(value) == text
    assert parse_go_duration(text, "f") == value


@given(st.integers(min_value=-10**12, max_value=10**12).map(lambda us: timedelta(microseconds=us)))
def test_property_format_go_duration_round_trips(value: timedelta) -> None:
    assert parse_go_duration(format_go_duration(value), "f") == value


# --- bounds: nothing a lease asks for can overflow an actor's arithmetic -------------------------------


@pytest.mark.parametrize(("spec", "message"), [
    ({"duration": "99999999h"},
     "spec.duration: duration '99999999h' is out of range: at most 100 years (36500d, 876000h)"),
    ({"duration": "876000h0.000001s"}, "spec.duration: duration '876000h0.000001s' is out of range"),
    ({"endTime": "0001-01-01T00:00:00Z", "duration": "1h"},
     "spec.endTime: timestamp '0001-01-01T00:00:00Z' is out of range: times are from 1970-01-01T00:00:00Z"),
    ({"beginTime": "9999-12-31T23:00:00Z", "duration": "2h"},
     "spec.beginTime: timestamp '9999-12-31T23:00:00Z' is out of range"),
    ({"duration": "9" * 100 + "h"}, "spec.duration: invalid duration '" + "9" * 64 + "...'"),
])
def test_out_of_range_times_and_durations_are_invalid_duration_naming_the_field(spec: dict, message: str) -> None:
    verdict = refused(selector=BOARD, **spec)
    assert (verdict.type, verdict.reason) == (ConditionType.INVALID, Reason.INVALID_DURATION)
    assert verdict.message.startswith(message)


def test_the_longest_lease_from_the_latest_time_still_has_an_end() -> None:
    latest = datetime(8999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)
    request = ok(selector=BOARD, beginTime=ts(latest), duration="876000h")
    assert request.end_for(NOW) == latest + timedelta(hours=876000)
    assert ok(selector=BOARD, duration="876000h").end_for(latest) == latest + timedelta(hours=876000)
    assert ok(selector=BOARD, endTime="1970-01-01T00:00:00Z", duration="876000h").begin.year == 1870
