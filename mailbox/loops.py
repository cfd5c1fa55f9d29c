"""The event loop an app on this runtime runs in: the fast lane (`lanes.LaneLoop`), or asyncio's own.

The lane works by overriding asyncio internals that no API promises: the loop's ready line and its passes,
handles' fields, the timers' heap. A CPython release may rename or rework any of them, and the lane would then
fail, or worse, quietly stop reordering anything. So the loop is built only after `missing()` found every one
of them, shaped as the lane expects and working in a short trial; else the app runs in asyncio's own loop, with
one warning that names what is missing. The actors behave the same in either: only a light tenant's place in
the loop's pass differs (`lanes`). The turns (`turns`) need no internals and run in both.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import logging
import platform
from collections import deque
from typing import Any, Literal

from .lanes import READING, LaneLoop, _Line, tenant_context

log = logging.getLogger(__name__)

EventLoop = Literal["lane", "asyncio"]
EVENT_LOOPS: tuple[EventLoop, ...] = ("lane", "asyncio")

# What the lane reads or overrides, by the asyncio class that has it.
LOOP_NAMES = ("_ready", "_scheduled", "_selector", "_clock_resolution", "_timer_cancelled_count",
              "_check_closed", "_process_events", "_add_callback", "_run_once")
HANDLE_NAMES = ("_run", "_loop", "_cancelled")
TIMER_NAMES = ("_when", "_scheduled", "_cancelled")


def new_event_loop(kind: EventLoop = "lane") -> asyncio.AbstractEventLoop:
    """The loop to run in (`asyncio.Runner(loop_factory=new_event_loop)`): the lane if this Python has all it
    needs, else asyncio's own, after one warning naming what is missing."""
    if kind == "asyncio":
        return asyncio.new_event_loop()
    lacking = missing()
    if lacking:
        log.warning("the event loop's fast lane needs asyncio internals that Python %s lacks (%s): running plain "
                    "asyncio, where a quiet tenant's steps wait in the loop's line like everyone's",
                    platform.python_version(), "; ".join(lacking))
        return asyncio.new_event_loop()
    return LaneLoop()


def missing() -> list[str]:
    """What the lane needs of asyncio and does not find, or finds shaped otherwise; empty when all is there."""
    found: list[str] = []
    with contextlib.closing(asyncio.SelectorEventLoop()) as loop:
        found += _absent("SelectorEventLoop", loop, LOOP_NAMES)
        for name, kind in (("_ready", deque), ("_scheduled", list), ("_clock_resolution", float),
                           ("_timer_cancelled_count", int)):
            value = getattr(loop, name, None)
            if value is not None and not isinstance(value, kind):
                found.append(f"SelectorEventLoop.{name} is a {type(value).__name__}, not a {kind.__name__}")
        if not callable(getattr(getattr(loop, "_selector", None), "select", None)):
            found.append("SelectorEventLoop._selector.select")
        context = contextvars.Context()
        try:
            found += _absent("Handle", asyncio.Handle(_nothing, (), loop, context), HANDLE_NAMES)
            timer = asyncio.TimerHandle(1.0, _nothing, (), loop, context)
        except TypeError as error:  # their signatures changed
            return [*found, f"Handle(callback, args, loop, context): {error}"]
        found += _absent("TimerHandle", timer, TIMER_NAMES)
        if not found and (timer._when, timer._scheduled, timer._cancelled) != (1.0, False, False):  # type: ignore[attr-defined]
            found.append("TimerHandle's _when, _scheduled, _cancelled as asyncio sets them")
    return found or _trial()


def _absent(owner: str, obj: Any, names: tuple[str, ...]) -> list[str]:
    return [f"{owner}.{name}" for name in names if not hasattr(obj, name)]


def _trial() -> list[str]:
    """A few passes of a `LaneLoop`: a light step (in the lane) and a timer come due go before a step in the line,
    through asyncio's own `_run_once` (which must take each handle with `_ready.popleft()`)."""
    order: list[str] = []
    try:
        with contextlib.closing(LaneLoop()) as loop:
            async def trial() -> None:
                loop.call_soon(order.append, "line")
                loop.call_soon(order.append, "lane", context=tenant_context(READING))
                loop.call_later(0, order.append, "timer")
                await asyncio.sleep(0.001)

            loop.run_until_complete(trial())
            steps, line = loop.lane_steps, loop._ready
    except Exception as error:  # an internal gone or changed: the lane would break the app
        return [f"a trial run of the lane failed: {error!r}"]
    if sorted(order) != ["lane", "line", "timer"] or steps < 1 or not isinstance(line, _Line) \
            or order.index("line") < max(order.index("lane"), order.index("timer")):
        return [f"a trial run of the lane ran {order} ({steps} in the lane)"]
    return []


def _nothing() -> None:
    pass
