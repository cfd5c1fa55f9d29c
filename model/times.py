"""Times as lessor writes them into objects: RFC 3339 in whole seconds with `Z`, as Kubernetes' `metav1.Time`.

Every time lessor writes (status times, condition transitions, lifespan ends, a heartbeat `lessor dev`
fakes) goes through `format_time`, so none carries microseconds (`...:02.433598Z`): Jumpstarter's and
Poolboy's tools, and anything parsing `%Y-%m-%dT%H:%M:%SZ`, read them. `metav1.MicroTime` fields (an
Event's `eventTime`, a coordination Lease's `renewTime`) are the exception and keep their microseconds.

Rounding is always down (`whole_seconds`), the way `metav1.Time` truncates:
- a time that records a moment (a grant, an end, a transition) is then never later than that moment;
- a lease's end is rounded down too, and the actor decides and sets its expiry timer from the rounded end
  (`LeaseRequest.end_for`, `expired`), not the exact one: the lease never holds its exporter past the end it
  shows, nor past the end it asked for, and a lease whose rounded end has passed is never granted. It may be
  up to a second shorter than asked, never longer, so it also never exceeds a policy's `maximumDuration`.
"""

from __future__ import annotations

from datetime import datetime

from lessor.templates.timestamps import format_timestamp

__all__ = ["format_time", "whole_seconds"]


def whole_seconds(value: datetime) -> datetime:
    """`value` rounded down to the second (see the module docstring for why down)."""
    return value.replace(microsecond=0)


def format_time(value: datetime) -> str:
    """RFC 3339, UTC, whole seconds, `Z`: the one form of every time lessor writes into an object."""
    return format_timestamp(whole_seconds(value))
