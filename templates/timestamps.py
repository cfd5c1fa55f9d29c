"""The `timestamp` and `timedelta` template variables.

They reproduce the forms providers already write: `timestamp("...")`,
`timestamp.utcnow`, `.add("3h")`, `.datetime`, `timedelta("10m")`,
`.timedelta`. Timestamps compare with each other and with RFC 3339 strings,
because checks compare raw fields (`spec.stop < timestamp.utcnow.add('8h')`),
and they print as RFC 3339 `Z` strings so rendered fields are valid as-is.
Both types are immutable: a template cannot change a value another
template will see.

Times are bounded: from `MIN_TIME` (1970-01-01T00:00:00Z) to before
`MAX_TIME` (9000-01-01T00:00:00Z). With durations at most 100 years
(`durations.MAX_DURATION`), a bounded time plus or minus a bounded
duration always exists, so lessor's own arithmetic (lease ends, lifespan
limits) cannot overflow; a template's arithmetic that leaves the range is
an error naming it.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import lru_cache
from datetime import datetime, timedelta, timezone
from typing import Any

from .durations import format_duration, parse_duration

#: The earliest time lessor accepts (inclusive) and the first it refuses.
MIN_TIME = datetime(1970, 1, 1, tzinfo=timezone.utc)
MAX_TIME = datetime(9000, 1, 1, tzinfo=timezone.utc)
TIME_RANGE_TEXT = "from 1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z"

_RFC3339 = re.compile(
    r"(\d{4}-\d{2}-\d{2})[Tt ](\d{2}:\d{2}:\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:\d{2})"
)


def parse_timestamp(text: object) -> datetime:
    """Parse an RFC 3339 date-time into an aware UTC datetime (sub-microsecond digits dropped)."""
    if not isinstance(text, str):
        raise TypeError(f"a timestamp must be a string, not {type(text).__name__}")
    return _parse_text(text)


@lru_cache(maxsize=4096)
def _parse_text(text: str) -> datetime:
    """`parse_timestamp` of a string, remembered: the same `lastSeen` or `creationTimestamp` is read again at
    each of its object's decisions (an exporter's `online` in every candidate list of a storm); datetimes are
    immutable, and a refused text raises again (exceptions are not cached)."""
    match = _RFC3339.fullmatch(text)
    if match is None:
        raise ValueError(f"invalid timestamp {text!r}: expected RFC 3339, e.g. 2021-05-01T12:30:00Z")
    day, time, fraction, offset = match.groups()
    fraction = f".{fraction[:6]:0<6}" if fraction else ""
    offset = "+00:00" if offset in ("Z", "z") else offset
    try:
        parsed = datetime.fromisoformat(f"{day}T{time}{fraction}{offset}")
    except ValueError as error:
        raise ValueError(f"invalid timestamp {text!r}: {error}") from None
    try:
        parsed = parsed.astimezone(timezone.utc)
    except OverflowError:  # 0001-01-01T00:00:00+01:00 is before year 1 in UTC
        parsed = MIN_TIME - timedelta(days=1)
    if not MIN_TIME <= parsed < MAX_TIME:
        raise ValueError(f"timestamp {text!r} is out of range: times are {TIME_RANGE_TEXT}")
    return parsed


def _bounded(value: datetime) -> datetime:
    if not MIN_TIME <= value < MAX_TIME:
        raise ValueError(f"the time {format_timestamp(value)} is out of range: times are {TIME_RANGE_TEXT}")
    return value


def _shift(value: datetime, delta: timedelta) -> datetime:
    """`value + delta`, or ValueError naming the range (never OverflowError)."""
    try:
        return _bounded(value + delta)
    except OverflowError:
        raise ValueError(f"{format_timestamp(value)} plus {format_duration(delta)} is out of range: "
                         f"times are {TIME_RANGE_TEXT}") from None


def _sum(left: timedelta, right: timedelta) -> timedelta:
    try:
        return left + right
    except OverflowError:
        raise ValueError(f"{format_duration(left)} plus {format_duration(right)} is out of range") from None


def format_timestamp(value: datetime) -> str:
    """RFC 3339 in UTC with a `Z`; fractional seconds only when there are any."""
    value = _utc(value)
    text = value.strftime("%Y-%m-%dT%H:%M:%S")
    if value.microsecond:
        text += f".{value.microsecond:06d}".rstrip("0")
    return text + "Z"


def _utc(value: datetime) -> datetime:
    # Kubernetes timestamps are UTC; a naive datetime is taken to be UTC too.
    if value.tzinfo is None:
        return value.replace(tzinfo=timezone.utc)
    return value.astimezone(timezone.utc)


def to_datetime(value: Any) -> datetime:
    """Accept a Timestamp, a datetime or an RFC 3339 string."""
    if isinstance(value, Timestamp):
        return value.datetime
    if isinstance(value, datetime):
        return _utc(value)
    if isinstance(value, str):
        return parse_timestamp(value)
    raise TypeError(f"expected a timestamp, got {type(value).__name__}")


def to_timedelta(value: Any) -> timedelta:
    """Accept a TimeDelta, a timedelta or a duration string."""
    if isinstance(value, TimeDelta):
        return value.timedelta
    if isinstance(value, timedelta):
        return value
    if isinstance(value, str):
        return parse_duration(value)
    raise TypeError(f"expected a duration, got {type(value).__name__}")


def _comparable(value: Any, convert: Callable[[Any], Any]) -> Any:
    """The converted value, or NotImplemented for types that are not comparable at all."""
    try:
        return convert(value)
    except TypeError:
        return NotImplemented


class Timestamp:
    """A point in time, in UTC."""

    __slots__ = ("_value",)

    def __init__(self, value: datetime) -> None:
        self._value = _utc(value)

    @property
    def datetime(self) -> datetime:
        return self._value

    def add(self, duration: Any) -> Timestamp:
        return Timestamp(_shift(self._value, to_timedelta(duration)))

    def __add__(self, other: Any) -> Timestamp:
        delta = _comparable(other, to_timedelta)
        return NotImplemented if delta is NotImplemented else Timestamp(_shift(self._value, delta))

    __radd__ = __add__

    def __sub__(self, other: Any) -> Timestamp | TimeDelta:
        """A duration back gives a timestamp; another timestamp gives the time between."""
        if isinstance(other, (TimeDelta, timedelta)) or (
            isinstance(other, str) and not _RFC3339.fullmatch(other)
        ):
            return Timestamp(_shift(self._value, -to_timedelta(other)))
        start = _comparable(other, to_datetime)
        return NotImplemented if start is NotImplemented else TimeDelta(self._value - start)

    def __rsub__(self, other: Any) -> TimeDelta:
        end = _comparable(other, to_datetime)
        return NotImplemented if end is NotImplemented else TimeDelta(end - self._value)

    def __eq__(self, other: Any) -> bool:
        try:
            other_value = _comparable(other, to_datetime)
        except ValueError:
            return False
        return NotImplemented if other_value is NotImplemented else self._value == other_value

    # Equal to strings, whose hashes differ: a hash could not honour both.
    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, other: Any) -> bool:
        other_value = _comparable(other, to_datetime)
        return NotImplemented if other_value is NotImplemented else self._value < other_value

    def __le__(self, other: Any) -> bool:
        other_value = _comparable(other, to_datetime)
        return NotImplemented if other_value is NotImplemented else self._value <= other_value

    def __gt__(self, other: Any) -> bool:
        other_value = _comparable(other, to_datetime)
        return NotImplemented if other_value is NotImplemented else self._value > other_value

    def __ge__(self, other: Any) -> bool:
        other_value = _comparable(other, to_datetime)
        return NotImplemented if other_value is NotImplemented else self._value >= other_value

    def __str__(self) -> str:
        return format_timestamp(self._value)

    def __repr__(self) -> str:
        return f"timestamp({str(self)!r})"


class TimeDelta:
    """A signed duration."""

    __slots__ = ("_value",)

    def __init__(self, value: timedelta) -> None:
        self._value = value

    @property
    def timedelta(self) -> timedelta:
        return self._value

    def __add__(self, other: Any) -> TimeDelta:
        if isinstance(other, (Timestamp, datetime)):
            return NotImplemented
        delta = _comparable(other, to_timedelta)
        return NotImplemented if delta is NotImplemented else TimeDelta(_sum(self._value, delta))

    __radd__ = __add__

    def __sub__(self, other: Any) -> TimeDelta:
        delta = _comparable(other, to_timedelta)
        return NotImplemented if delta is NotImplemented else TimeDelta(_sum(self._value, -delta))

    def __rsub__(self, other: Any) -> TimeDelta:
        delta = _comparable(other, to_timedelta)
        return NotImplemented if delta is NotImplemented else TimeDelta(_sum(delta, -self._value))

    def __neg__(self) -> TimeDelta:
        return TimeDelta(-self._value)

    def __eq__(self, other: Any) -> bool:
        try:
            other_value = _comparable(other, to_timedelta)
        except ValueError:
            return False
        return NotImplemented if other_value is NotImplemented else self._value == other_value

    __hash__ = None  # type: ignore[assignment]

    def __lt__(self, other: Any) -> bool:
        other_value = _comparable(other, to_timedelta)
        return NotImplemented if other_value is NotImplemented else self._value < other_value

    def __le__(self, other: Any) -> bool:
        other_value = _comparable(other, to_timedelta)
        return NotImplemented if other_value is NotImplemented else self._value <= other_value

    def __gt__(self, other: Any) -> bool:
        other_value = _comparable(other, to_timedelta)
        return NotImplemented if other_value is NotImplemented else self._value > other_value

    def __ge__(self, other: Any) -> bool:
        other_value = _comparable(other, to_timedelta)
        return NotImplemented if other_value is NotImplemented else self._value >= other_value

    def __str__(self) -> str:
        return format_duration(self._value)

    def __repr__(self) -> str:
        return f"timedelta({str(self)!r})"


def _system_clock() -> datetime:
    return datetime.now(timezone.utc)


class TimestampFactory:
    """The `timestamp` variable: call it to parse, read `.utcnow` for the current time.

    An object rather than the class itself, so `utcnow` can be a plain
    attribute (as the seed writes it) and tests can pass a fixed clock.
    """

    __slots__ = ("_clock",)

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock or _system_clock

    def __call__(self, value: Any) -> Timestamp:
        return Timestamp(to_datetime(value))

    @property
    def utcnow(self) -> Timestamp:
        """Now, to the whole second, like Kubernetes' own timestamps."""
        return Timestamp(self._clock().replace(microsecond=0))

    def __repr__(self) -> str:
        return "timestamp"


def make_timedelta(value: Any) -> TimeDelta:
    """The `timedelta` variable: `timedelta("10m")`."""
    return TimeDelta(to_timedelta(value))
