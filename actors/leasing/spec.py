"""A Lease's spec, validated once into a typed, immutable request.

`parse_lease` turns the raw object into a `LeaseRequest`, or into a `Verdict`
(condition type, reason, message naming the field) when the spec can never be
satisfied as written. Nothing here reads a clock or the API: the time a lease
asks for is relative to a `now` its caller passes.

Time fields: any two of `duration`, `beginTime` and `endTime` give the third
(begin + end give the duration, end + duration give the begin), so when all
three are given they must agree. A `beginTime` needs one of the other two
(a begin without an end is refused: "duration is required", as Jumpstarter
says); with neither of them and no begin the lease is unbounded. The end is
`endTime`, else begin plus duration (rule 11), where the begin of a lease
without `beginTime` is the moment it is granted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any

from lessor.model.selectors import Selector, SelectorError, parse_selector
from lessor.model.times import whole_seconds
from lessor.model.views.leasing import LeaseView
from lessor.templates.durations import parse_duration
from lessor.templates.timestamps import format_timestamp, parse_timestamp


class ConditionType(StrEnum):
    INVALID = "Invalid"
    UNSATISFIABLE = "Unsatisfiable"
    PENDING = "Pending"
    READY = "Ready"


class Reason(StrEnum):
    """Every reason the contract (DESIGN.md section 3, Lease) fixes."""

    INVALID_SELECTOR = "InvalidSelector"
    INVALID_DURATION = "InvalidDuration"
    EXPORTER_NOT_FOUND = "ExporterNotFound"
    SELECTOR_MISMATCH = "SelectorMismatch"
    EXPORTER_DISABLED = "ExporterDisabled"
    ALL_DISABLED = "AllDisabled"
    NO_ACCESS = "NoAccess"
    DURATION_EXCEEDED = "DurationExceeded"
    OFFLINE = "Offline"
    NOT_AVAILABLE = "NotAvailable"
    NOT_READY = "NotReady"
    SCHEDULED = "Scheduled"
    READY = "Ready"
    RELEASED = "Released"
    EXPIRED = "Expired"
    EVICTED = "Evicted"


@dataclass(frozen=True, slots=True)
class Verdict:
    """A terminal answer: the lease ends at once with this condition (`Invalid` or `Unsatisfiable`)."""

    type: ConditionType
    reason: Reason
    message: str


_TIME_KEYS = ("duration", "beginTime", "endTime")

# Go's time.ParseDuration syntax, as the CRD pattern has it: no `d` unit.
_MAX_TEXT = 64
_GO_DURATION = re.compile(r"[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|ms|s|m|h))+)")


def parse_go_duration(text: Any, field: str) -> timedelta:
    """A Go duration string (`90s`, `1h30m`) of at most 100 years; ValueError naming `field` otherwise.

    The webhook's lease and policy checks call this too: one rule, one place.
    """
    if not isinstance(text, str):
        raise ValueError(f"{field}: must be a duration string such as 1h30m, not {type(text).__name__}")
    if len(text) > _MAX_TEXT or not _GO_DURATION.fullmatch(text):
        hint = " (there is no day unit: write 24h)" if "d" in text else ""
        shown = text if len(text) <= _MAX_TEXT else text[:_MAX_TEXT] + "..."
        raise ValueError(
            f"{field}: invalid duration {shown!r}{hint}: expected a Go duration such as 90s, 10m or 1h30m"
        )
    try:
        return parse_duration(text)
    except ValueError as err:  # beyond MAX_DURATION
        raise ValueError(f"{field}: {err}") from None


def parse_time(text: Any, field: str) -> datetime:
    """An RFC 3339 time within lessor's range (1970 to 9000); ValueError naming `field` otherwise."""
    if not isinstance(text, str):
        raise ValueError(f"{field}: must be an RFC 3339 timestamp string, not {type(text).__name__}")
    try:
        return parse_timestamp(text)
    except ValueError as err:
        raise ValueError(f"{field}: {err}") from None


def format_go_duration(value: timedelta) -> str:
    """Write a duration as the Lease and policy fields take it: hours at most (`36h`, `1h30m`, `1.5s`), no days."""
    micros = value // timedelta(microseconds=1)
    sign = "-" if micros < 0 else ""
    hours, micros = divmod(abs(micros), 3_600_000_000)
    minutes, micros = divmod(micros, 60_000_000)
    seconds, micros = divmod(micros, 1_000_000)
    parts = [f"{n}{unit}" for n, unit in ((hours, "h"), (minutes, "m")) if n]
    if micros:
        parts.append(f"{seconds}.{micros:06d}".rstrip("0") + "s")
    elif seconds or not parts:
        parts.append(f"{seconds}s")
    return sign + "".join(parts)


@dataclass(frozen=True, slots=True)
class LeaseRequest:
    """What a lease asks for, checked. Times are aware UTC datetimes.

    `begin`, `end` and `duration` are completed from each other: whenever two
    are known the third is filled in, so `duration` is None only for a lease
    that gives no `duration`, no `beginTime` and at most an `endTime`.
    """

    name: str
    client: str
    selector: Selector | None = None  # None: spec.selector absent (exporterRef then pins the exporter)
    exporter_ref: str | None = None
    begin: datetime | None = None
    end: datetime | None = None
    duration: timedelta | None = None
    release: bool = False
    allow_disabled: bool = False
    created: datetime | None = None
    generation: int = 0
    given: frozenset[str] = frozenset()  # which of duration, beginTime, endTime the spec gave

    def requested_duration(self, now: datetime) -> timedelta | None:
        """How long the lease asks for; None is unbounded (neither a duration nor an end).

        A lease with an `endTime` but no begin starts when granted, at `now`
        at the earliest, so it asks for `end - now`.
        """
        if self.duration is not None:
            return self.duration
        if self.end is not None:
            return self.end - (self.begin or now)
        return None

    def scheduled(self, now: datetime) -> bool:
        """True while the begin (given, or derived from end - duration) is in the future: `Pending`/`Scheduled`."""
        return self.begin is not None and self.begin > now

    @property
    def fixed_end(self) -> datetime | None:
        """The end when it does not depend on the grant (an `endTime`, or a begin and a duration), in whole
        seconds rounded down as it is written (`lessor.model.times`); None when it comes from the grant or
        there is none."""
        if self.end is not None:
            return whole_seconds(self.end)
        if self.begin is not None and self.duration is not None:
            return whole_seconds(self.begin + self.duration)
        return None

    @property
    def expiry(self) -> datetime | None:
        """When a lease still waiting ends `Expired`, never granted: its fixed end, unless that is a `beginTime`
        plus `duration` already over when the lease was created. Such a lease starts at once and ends at its
        end, as the Jumpstarter controller grants it (its spec "BeginTime already in the past"); a begin
        computed from the same seconds is never over before it was created, so every rounding agrees. An
        `endTime` in the past expires as given."""
        end = self.fixed_end
        if end is None or (self.end is None and self.created is not None and end <= self.created):
            return None
        return end

    def expired(self, now: datetime) -> bool:
        """True once the expiry has passed: a lease still waiting then ends `Expired`, never granted (not
        even for the moment before its expiry timer would fire)."""
        expiry = self.expiry
        return expiry is not None and expiry <= now

    def end_for(self, granted_at: datetime) -> datetime | None:
        """Rule 11: `endTime`, else begin plus duration (begin: `beginTime`, else the grant); None: no end.

        In whole seconds, rounded down, as `status.endTime` shows it: the actor expires the lease at the
        time written, and a restarted one computes the same end from the written `status.beginTime`.
        """
        if (end := self.fixed_end) is not None:
            return end
        if self.duration is not None:
            return whole_seconds(granted_at + self.duration)
        return None

    def window(self, granted_at: datetime) -> tuple[datetime, datetime | None]:
        """`status.beginTime` and `status.endTime` for a grant at `granted_at`, in whole seconds (rounded down)."""
        begin = whole_seconds(granted_at)
        return begin, self.end_for(begin)

    def describe_duration(self, now: datetime) -> str:
        """The requested time in words, naming the fields it comes from (for messages)."""
        requested = self.requested_duration(now)
        if requested is None:
            return "unbounded time (no spec.duration and no spec.endTime)"
        length = format_go_duration(requested)
        if "duration" in self.given or self.end is None:
            return f"{length} (spec.duration)"
        if self.begin is not None and self.end is not None:
            return f"{length} (spec.beginTime {format_timestamp(self.begin)} to spec.endTime {format_timestamp(self.end)})"
        return f"{length} (from now until spec.endTime {format_timestamp(self.end)})"


def parse_lease(lease: LeaseView) -> LeaseRequest | Verdict:
    """Validate a Lease into a request, or the verdict that ends it.

    Every problem is reported, in one message: the reason is that of the
    first (selector problems before time problems), so a user fixing a
    manifest sees everything wrong with it at once.
    """
    spec = lease.spec
    if not spec:
        return Verdict(ConditionType.INVALID, Reason.INVALID_SELECTOR,
                       "spec: missing: a lease needs spec.clientRef and spec.selector or spec.exporterRef")
    problems: list[tuple[Reason, str]] = []

    selector, exporter_ref = _selection(spec, problems)
    begin, end, duration = _times(spec, problems)

    if problems:
        return Verdict(ConditionType.INVALID, problems[0][0], "; ".join(message for _, message in problems))

    client = lease.client
    if client is None:
        # The CRD requires it; no Invalid reason fits, and a lease nobody asks for admits no one.
        return Verdict(ConditionType.UNSATISFIABLE, Reason.NO_ACCESS,
                       "spec.clientRef.name: required: the Client asking for the lease")

    return LeaseRequest(
        name=lease.name,
        client=client,
        selector=selector,
        exporter_ref=exporter_ref,
        begin=begin,
        end=end,
        duration=duration,
        release=lease.release,
        allow_disabled=lease.allow_disabled,
        created=lease.meta.created,
        generation=lease.meta.generation or 0,
        given=frozenset(key for key in _TIME_KEYS if spec.get(key) is not None),
    )


def selection_problems(spec: Mapping[str, Any]) -> list[str]:
    """What `parse_lease` finds wrong with `selector`/`exporterRef`, each `field: message` (the webhook calls it)."""
    problems: list[tuple[Reason, str]] = []
    _selection(spec, problems)
    return [message for _, message in problems]


def time_problems(spec: Mapping[str, Any]) -> list[str]:
    """What `parse_lease` finds wrong with `duration`/`beginTime`/`endTime`, each `field: message` (the webhook's too)."""
    problems: list[tuple[Reason, str]] = []
    _times(spec, problems)
    return [message for _, message in problems]


def _selection(spec: Mapping[str, Any], problems: list[tuple[Reason, str]]) -> tuple[Selector | None, str | None]:
    raw_ref = spec.get("exporterRef")
    exporter_ref: str | None = None
    if raw_ref is not None:
        name = raw_ref.get("name") if isinstance(raw_ref, Mapping) else None
        if isinstance(name, str) and name:
            exporter_ref = name
        else:
            problems.append((Reason.INVALID_SELECTOR, "spec.exporterRef.name: required when spec.exporterRef is set"))

    raw_selector = spec.get("selector")
    selector: Selector | None = None
    if raw_selector is not None:
        try:
            selector = parse_selector(raw_selector, "spec.selector")
        except SelectorError as err:
            problems.append((Reason.INVALID_SELECTOR, str(err)))
            return None, exporter_ref
    if raw_ref is None and (selector is None or selector.empty):
        problem = "empty: it would match every exporter" if selector is not None else "missing"
        problems.append((Reason.INVALID_SELECTOR,
                         f"spec.selector: {problem}: select exporters by label (matchLabels or "
                         "matchExpressions) or name one in spec.exporterRef.name"))
    return selector, exporter_ref


def _times(
    spec: Mapping[str, Any], problems: list[tuple[Reason, str]]
) -> tuple[datetime | None, datetime | None, timedelta | None]:
    bad = Reason.INVALID_DURATION
    duration = begin = end = None
    if spec.get("duration") is not None:
        try:
            duration = parse_go_duration(spec["duration"], "spec.duration")
        except ValueError as err:
            problems.append((bad, str(err)))
        else:
            if duration <= timedelta(0):
                problems.append((bad, f"spec.duration: must be positive, not {spec['duration']}"))
                duration = None
    for key in ("beginTime", "endTime"):
        if spec.get(key) is None:
            continue
        try:
            value = parse_time(spec[key], f"spec.{key}")
        except ValueError as err:
            problems.append((bad, str(err)))
            continue
        if key == "beginTime":
            begin = value
        else:
            end = value
    if any(reason is bad for reason, _ in problems):
        return None, None, None

    if begin is not None and end is not None:
        if end <= begin:
            problems.append((bad, f"spec.endTime: {spec['endTime']} must be after spec.beginTime {spec['beginTime']}"))
        elif duration is not None and end - begin != duration:
            problems.append((bad,
                             f"spec.duration: {spec['duration']} does not match spec.endTime - spec.beginTime "
                             f"({format_go_duration(end - begin)}): give any two of duration, beginTime and endTime, "
                             "or three that agree"))
        else:
            duration = end - begin
    elif end is not None and duration is not None:
        begin = end - duration
    elif begin is not None and duration is None:
        # A begin alone would be a lease without an end; Jumpstarter refuses it with these words too.
        problems.append((bad, "spec.duration: duration is required when spec.beginTime is set: give spec.duration "
                              "or spec.endTime, so that the lease has an end"))
    return begin, end, duration
