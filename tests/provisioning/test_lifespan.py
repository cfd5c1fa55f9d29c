"""Lifespans: default when claimed, maximum from creation, relativeMaximum from now, clamping, unclaimed, minima."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lessor.actors.provisioning.lifespan import (
    LifespanConfig,
    claim_lifespan,
    claim_lifespan_of,
    combine,
    handle_lifespan_spec,
    unclaimed_end,
)

CREATED = datetime(2024, 3, 1, 9, 0, 0, tzinfo=timezone.utc)
NOW = datetime(2024, 3, 3, 9, 0, 0, tzinfo=timezone.utc)  # two days after the claim was made
DAY = timedelta(days=1)


def config(**spec: str) -> LifespanConfig:
    parsed, errors = LifespanConfig.parse(spec, "spec.lifespan")
    assert errors == ()
    return parsed


def test_settings_parse_and_each_bad_one_is_named() -> None:
    assert config(default="1d", maximum="7d", relativeMaximum="1d12h", unclaimed="30m") == LifespanConfig(
        DAY, 7 * DAY, timedelta(hours=36), timedelta(minutes=30))
    parsed, errors = LifespanConfig.parse({"default": "1 day", "maximum": "-1h", "unclaimed": "2h"}, "spec.lifespan")
    assert parsed == LifespanConfig(unclaimed=timedelta(hours=2))
    assert errors == ("spec.lifespan.default: invalid duration '1 day': expected terms like 90s, 10m, 1h30m, 1d "
                      "or 2d12h (units d, h, m, s, ms, us, ns)",
                      "spec.lifespan.maximum: a lifespan cannot be negative ('-1h')")


def test_without_settings_there_is_no_end() -> None:
    assert claim_lifespan(LifespanConfig(), created=CREATED, start=NOW, requested_end=None, now=NOW).end is None


def test_the_default_counts_from_when_the_handle_is_claimed() -> None:
    lifespan = claim_lifespan(config(default="1d"), created=CREATED, start=NOW, requested_end=None, now=NOW)
    assert (lifespan.end, lifespan.clamped, lifespan.message) == (NOW + DAY, False, "")


def test_maximum_counts_from_creation_and_relative_maximum_from_now_and_the_earlier_wins() -> None:
    both = config(maximum="3d", relativeMaximum="2d")
    assert both.limit(created=CREATED, now=NOW) == (CREATED + 3 * DAY, "maximum 3d from the claim's creation")
    later = NOW + 2 * DAY
    assert both.limit(created=CREATED, now=later) == (CREATED + 3 * DAY, "maximum 3d from the claim's creation")
    early = CREATED + timedelta(hours=1)
    assert both.limit(created=CREATED, now=early) == (early + 2 * DAY, "relativeMaximum 2d from now")


def test_a_requested_end_within_the_limits_is_kept() -> None:
    wanted = NOW + DAY
    lifespan = claim_lifespan(config(maximum="7d"), created=CREATED, start=NOW, requested_end=wanted, now=NOW)
    assert (lifespan.end, lifespan.clamped) == (wanted, False)


def test_a_requested_end_beyond_the_limits_is_clamped_and_the_claim_says_so() -> None:
    wanted = NOW + 30 * DAY
    lifespan = claim_lifespan(config(maximum="7d", relativeMaximum="1d"), created=CREATED, start=NOW,
                              requested_end=wanted, now=NOW)
    assert (lifespan.end, lifespan.clamped) == (NOW + DAY, True)
    assert lifespan.message == ("spec.lifespan.end 2024-04-02T09:00:00Z is later than allowed by the relativeMaximum "
                                "1d from now; the lifespan ends at 2024-03-04T09:00:00Z")


def test_a_default_longer_than_the_maximum_is_cut_to_it() -> None:
    lifespan = claim_lifespan(config(default="7d", maximum="3d"), created=CREATED, start=NOW,
                              requested_end=None, now=NOW)
    assert lifespan.end == CREATED + 3 * DAY and not lifespan.clamped
    assert "the default lifespan 7d would end after the maximum 3d" in lifespan.message


def test_without_a_default_the_maximum_is_the_end() -> None:
    lifespan = claim_lifespan(config(maximum="3d"), created=CREATED, start=NOW, requested_end=None, now=NOW)
    assert lifespan.end == CREATED + 3 * DAY


def test_extending_later_is_limited_by_the_maximum_from_creation() -> None:
    settings = config(maximum="5d", relativeMaximum="2d")
    first = claim_lifespan(settings, created=CREATED, start=NOW, requested_end=NOW + 10 * DAY, now=NOW)
    assert first.end == NOW + 2 * DAY
    a_day_later = NOW + DAY
    second = claim_lifespan(settings, created=CREATED, start=NOW, requested_end=NOW + 10 * DAY, now=a_day_later)
    assert second.end == CREATED + 5 * DAY  # relativeMaximum moved on, maximum did not


def test_the_claims_fields_are_read_and_a_bad_end_is_named() -> None:
    claim = {"metadata": {"creationTimestamp": "2024-03-01T09:00:00Z"},
             "spec": {"lifespan": {"end": "2024-03-20T00:00:00Z"}}}
    lifespan, error = claim_lifespan_of(config(maximum="7d"), claim, start=NOW, now=NOW)
    assert error == "" and lifespan is not None and lifespan.end == CREATED + 7 * DAY and lifespan.clamped
    claim["spec"]["lifespan"]["end"] = "next tuesday"
    lifespan, error = claim_lifespan_of(config(maximum="7d"), claim, start=NOW, now=NOW)
    assert lifespan is None and error.startswith("spec.lifespan.end: invalid timestamp 'next tuesday'")


def test_status_shows_the_effective_lifespan() -> None:
    settings = config(default="1d", maximum="7d", relativeMaximum="3d")
    lifespan = claim_lifespan(settings, created=CREATED, start=NOW, requested_end=None, now=NOW)
    assert lifespan.status(settings) == {"start": "2024-03-03T09:00:00Z", "end": "2024-03-04T09:00:00Z",
                                         "maximum": "7d", "relativeMaximum": "3d"}


def test_unclaimed_limits_how_long_a_pool_handle_waits() -> None:
    assert unclaimed_end(config(unclaimed="1h"), created=CREATED) == CREATED + timedelta(hours=1)
    assert unclaimed_end(config(default="1d"), created=CREATED) is None


def test_a_handle_for_several_providers_takes_the_minimum_of_each_setting() -> None:
    merged = combine([config(default="2d", maximum="7d"), config(default="1d", relativeMaximum="3d"),
                      config(unclaimed="4h"), LifespanConfig()])
    assert merged == LifespanConfig(DAY, 7 * DAY, 3 * DAY, timedelta(hours=4))
    assert combine([]) == LifespanConfig()


def test_a_handles_lifespan_spec_has_the_settings_and_the_end_but_not_unclaimed() -> None:
    settings = config(default="1d", maximum="7d", unclaimed="1h")
    assert handle_lifespan_spec(settings, NOW) == {"default": "1d", "maximum": "7d", "end": "2024-03-03T09:00:00Z"}


def test_a_lifespan_beyond_100_years_is_named_and_the_longest_allowed_cannot_overflow() -> None:
    parsed, errors = LifespanConfig.parse({"default": "99999999d", "maximum": "36501d", "relativeMaximum": "36500d",
                                           "unclaimed": "876000h"}, "spec.lifespan")
    assert errors == ("spec.lifespan.default: duration '99999999d' is out of range: at most 100 years (36500d, 876000h)",
                      "spec.lifespan.maximum: duration '36501d' is out of range: at most 100 years (36500d, 876000h)")
    latest = datetime(8999, 12, 31, 23, 59, 59, tzinfo=timezone.utc)  # the latest time lessor accepts
    lifespan = claim_lifespan(config(default="36500d", maximum="36500d", relativeMaximum="36500d"),
                              created=latest, start=latest, requested_end=None, now=latest)
    assert lifespan.end == latest + 36500 * DAY
    assert unclaimed_end(parsed, created=latest) == latest + 36500 * DAY


def test_a_claims_lifespan_end_outside_1970_to_9000_is_named() -> None:
    claim = {"metadata": {"creationTimestamp": "2024-03-01T09:00:00Z"},
             "spec": {"lifespan": {"end": "0001-01-01T00:00:00Z"}}}
    lifespan, error = claim_lifespan_of(config(maximum="7d"), claim, start=NOW, now=NOW)
    assert lifespan is None
    assert error == ("spec.lifespan.end: timestamp '0001-01-01T00:00:00Z' is out of range: times are from "
                     "1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z")
