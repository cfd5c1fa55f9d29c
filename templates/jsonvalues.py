"""Turning what an expression returns into plain JSON data.

A whole-string template keeps the type of its value (see `render`), so the
value must become something a Kubernetes object can hold. New containers
are built on the way, so the result never aliases the caller's variables.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from datetime import datetime, timedelta
from typing import Any

from jinja2 import Undefined

from .durations import format_duration
from .timestamps import Timestamp, TimeDelta, format_timestamp


class Omit:
    """`omit`: a whole-string template that renders to it leaves its field or list item out (as Poolboy's
    `{{ value | default(omit) }}`). Only a whole value can be omitted, so it has no text of its own."""

    __slots__ = ()

    def __str__(self) -> str:
        raise TypeError("omit leaves out a whole field or list item; it cannot be part of a text or of a value")

    def __repr__(self) -> str:
        return "omit"


OMIT = Omit()


def json_scalar(value: Any) -> str:
    """The string form of the time values templates produce; TypeError for anything else."""
    if isinstance(value, (Timestamp, TimeDelta)):
        return str(value)
    if isinstance(value, datetime):
        return format_timestamp(value)
    if isinstance(value, timedelta):
        return format_duration(value)
    raise TypeError(f"a {type(value).__name__} cannot be written as JSON")


def plain(value: Any) -> Any:
    """A JSON-compatible copy of `value`."""
    if value is OMIT:
        str(value)  # raises: an omit inside a value
    if isinstance(value, Undefined):
        str(value)  # a StrictUndefined raises the error that explains itself
    if value is None or isinstance(value, (bool, int)):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError(f"{value} is not a JSON number")
        return value
    if isinstance(value, str):
        return str(value)  # drops Markup and other str subclasses
    if isinstance(value, Mapping):
        result = {}
        for key, item in value.items():
            if not isinstance(key, str):
                raise TypeError(f"object keys must be strings, not {type(key).__name__} ({key!r})")
            result[str(key)] = plain(item)
        return result
    if isinstance(value, Iterable) and not isinstance(value, (bytes, bytearray)):
        return [plain(item) for item in value]
    return json_scalar(value)
