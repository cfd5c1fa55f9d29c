"""The template functions Poolboy's templates have, so its providers port unchanged, all inside the sandbox.

Filters: `strgen` (`strgen.py`), `to_datetime`, `parse_time_interval`,
`json_query`, `merge_list_of_dicts`, `to_json` (`bool` and `object` are in
`sandbox.py`). Globals: `now()`, `datetime`, `timezone`, and `timedelta`
called as Python's (`timedelta(hours=1)`) next to lessor's
(`timedelta("1h")`). Every one is wrapped by the sandbox like Jinja's own
filters: its input and result are held to the size limit, and it runs under
the time limit of the work that renders it.

Times are UTC: `now()` is the current time in UTC (Poolboy's `now()` without
`utc` is the host's local time, which for an operator in a container is UTC
too), and a `to_datetime` without a zone in its format is taken as UTC, so
any two of them subtract and compare.

`PoolboyObject`: Poolboy gives templates its claim, handle and provider
as objects with `.annotations`, `.labels`, `.name`, `.namespace`, `.uid`
and `.creation_timestamp`; lessor gives the object itself, with those read
from its metadata as well (`{}` for missing labels and annotations).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from datetime import datetime, timedelta, timezone
from typing import Any

import jmespath  # type: ignore[import-untyped]

from .durations import parse_duration
from .timestamps import TimeDelta, make_timedelta

_CLOCK_FORMAT = re.compile(r"(?:(\d+):)?(\d+):(\d+(?:\.\d*)?)")


def to_datetime(value: Any, fmt: str = "%Y-%m-%d %H:%M:%S") -> datetime:
    """`'2030-01-01T00:00:00Z' | to_datetime('%Y-%m-%dT%H:%M:%S%z')`: Python's strptime; no zone means UTC."""
    parsed = datetime.strptime(str(value), str(fmt))
    return parsed.replace(tzinfo=timezone.utc) if parsed.tzinfo is None else parsed.astimezone(timezone.utc)


def parse_time_interval(value: Any) -> timedelta:
    """`'1h' | parse_time_interval`: a Python timedelta from a duration (`90s`, `1h30m`, `2d`, `1 h 30 m`),
    a number of seconds, or `[hh:]mm:ss`; at most 100 years, as every duration in lessor."""
    if isinstance(value, TimeDelta):
        return value.timedelta
    if isinstance(value, timedelta):
        return value
    if isinstance(value, bool) or not isinstance(value, (int, float, str)):
        raise TypeError(f"parse_time_interval reads a string or a number, not {type(value).__name__}")
    if not isinstance(value, str):
        return parse_duration(f"{value}s")
    text = value.strip()
    clock = _CLOCK_FORMAT.fullmatch(text)
    if clock:
        hours, minutes, seconds = clock.groups()
        return parse_duration(f"{hours or 0}h{minutes}m{seconds}s")
    if re.fullmatch(r"\d+(\.\d*)?", text):
        return parse_duration(f"{text}s")
    return parse_duration(re.sub(r"\s+", "", text))  # its error quotes the text


def json_query(value: Any, query: str) -> Any:
    """`x | json_query('items[?ready].name')`: a JMESPath query (Ansible's and Poolboy's filter)."""
    return jmespath.search(str(query), value)


def merge_list_of_dicts(value: Any) -> dict[str, Any]:
    """`[a, b, c] | merge_list_of_dicts`: one object, later keys winning (none and empty entries skipped)."""
    if not value:
        return {}
    return functools.reduce(lambda merged, item: {**merged, **(item or {})}, value, {})


class Now:
    """`now()`, `now(true)`, `now(fmt='%Y-%m-%d')`: the current time in UTC (a string with `fmt`)."""

    __slots__ = ("_clock",)

    def __init__(self, clock: Callable[[], datetime] | None = None) -> None:
        self._clock = clock

    def __call__(self, utc: bool = False, fmt: str | None = None) -> datetime | str:
        moment = self._clock() if self._clock is not None else datetime.now(timezone.utc)
        moment = moment.replace(tzinfo=timezone.utc) if moment.tzinfo is None else moment.astimezone(timezone.utc)
        return moment.strftime(str(fmt)) if fmt is not None else moment

    def __repr__(self) -> str:
        return "now"


def poolboy_timedelta(*args: Any, **kwargs: Any) -> TimeDelta | timedelta:
    """`timedelta("10m")` (lessor's: a duration string) or `timedelta(hours=1)`, `timedelta(1)` (Python's, as in
    Poolboy's templates, so it adds to `now()` and to `to_datetime`)."""
    if len(args) == 1 and not kwargs and isinstance(args[0], (str, TimeDelta, timedelta)):
        return make_timedelta(args[0])
    return timedelta(*args, **kwargs)


FILTERS: dict[str, Callable[..., Any]] = {
    "to_datetime": to_datetime,
    "parse_time_interval": parse_time_interval,
    "json_query": json_query,
    "merge_list_of_dicts": merge_list_of_dicts,
}


class PoolboyObject(dict[str, Any]):
    """A claim, handle or provider as a template sees it: the object, plus Poolboy's attribute names for its
    metadata. A copy of the top level only (the values are shared, read-only in the sandbox)."""

    __slots__ = ()

    def _metadata(self) -> Mapping[str, Any]:
        metadata = self.get("metadata")
        return metadata if isinstance(metadata, Mapping) else {}

    @property
    def annotations(self) -> Mapping[str, Any]:
        return self._metadata().get("annotations") or {}

    @property
    def labels(self) -> Mapping[str, Any]:
        return self._metadata().get("labels") or {}

    @property
    def name(self) -> Any:
        return self._metadata().get("name")

    @property
    def namespace(self) -> Any:
        return self._metadata().get("namespace")

    @property
    def uid(self) -> Any:
        return self._metadata().get("uid")

    @property
    def creation_timestamp(self) -> Any:
        return self._metadata().get("creationTimestamp")


def poolboy_object(obj: Mapping[str, Any] | None) -> PoolboyObject | None:
    """`obj` with Poolboy's attribute names; None stays None (a variable that does not apply)."""
    if obj is None or isinstance(obj, PoolboyObject):
        return obj
    return PoolboyObject(obj)
