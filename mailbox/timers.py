"""Keyed timers: a message to an actor at a given time, from one heap of timers (no polling).

Timers belong to the address, not to the incarnation, so a passivated actor is
reactivated by its own timer (a lease expiring while its actor sleeps).

All of a system's timers share one heap and one event-loop timer, set for the
earliest: an asyncio `TimerHandle` per timer (its arguments tuple and context
included) was most of the memory of an idle exporter, which keeps one timer
for its heartbeat.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import math
import time
from collections.abc import Callable, Hashable
from typing import Any

from opentelemetry.context import Context

TimerTrace = Context | tuple[Context, Context] | None
"""The trace a timer goes on in when it fires: the one that armed it, or (parent, link) when armed on behalf of
another (`Actor.schedule(on_behalf_of=)`)."""
Fire = Callable[[str, Any, TimerTrace], None]

_RESOLUTION = time.get_clock_info("monotonic").resolution  # what asyncio allows a timer to fire early by
_COMPACT_AT = 256  # cancelled timers stay in the heap until due; past this many (and half of it), it is rebuilt


class Timers:
    """An address's timers by key. Most addresses have one (an exporter's heartbeat), so a lone timer is
    kept as itself, not in a dict of one: at 20k exporters that is a few MB."""

    def __init__(self, fire: Fire) -> None:
        self._fire = fire
        self._pending: dict[str, _Timer | dict[Hashable, _Timer]] = {}
        self._heap: list[_Timer] = []
        self._cancelled = 0  # of the heap's timers
        self._wake: asyncio.TimerHandle | None = None
        self._wake_at = math.inf
        # An empty contextvars context for every delivery: it is not part of whatever the scheduler was doing
        # when it armed the timer. `_run` sets no variable, so one serves all.
        self._context = contextvars.Context()

    def schedule(self, address: str, key: Hashable, message: Any, delay: float, context: TimerTrace) -> None:
        """Arm `key` for `address`, replacing any timer already armed under that key."""
        self.cancel(address, key)
        loop = asyncio.get_running_loop()
        timer = _Timer(loop.time() + max(delay, 0.0), address, key, message, context)
        heapq.heappush(self._heap, timer)
        timers = self._pending.get(address)
        if timers is None:
            self._pending[address] = timer
        elif isinstance(timers, _Timer):
            self._pending[address] = {timers.key: timers, key: timer}
        else:
            timers[key] = timer
        if timer.when < self._wake_at:
            self._arm(loop, timer.when)

    def cancel(self, address: str, key: Hashable) -> bool:
        found = self._take(address, key)
        if found is None:
            return False
        self._discard(found)
        return True

    def cancel_all(self, address: str) -> None:
        timers = self._pending.pop(address, None)
        for timer in ((timers,) if isinstance(timers, _Timer) else (timers or {}).values()):
            self._discard(timer)

    def close(self) -> None:
        if self._wake is not None:
            self._wake.cancel()
        self._wake, self._wake_at = None, math.inf
        self._pending.clear()
        self._heap.clear()
        self._cancelled = 0

    def _take(self, address: str, key: Hashable) -> _Timer | None:
        timers = self._pending.get(address)
        if timers is None:
            return None
        if isinstance(timers, _Timer):
            if timers.key != key:
                return None
            del self._pending[address]
            return timers
        found = timers.pop(key, None)
        if len(timers) == 1:
            [self._pending[address]] = timers.values()
        return found

    def _discard(self, timer: _Timer) -> None:
        """Drop a cancelled timer's message now; its heap entry goes when due, or when the heap is rebuilt."""
        timer.message = timer.context = None
        timer.live = False
        self._cancelled += 1
        if self._cancelled > _COMPACT_AT and 2 * self._cancelled > len(self._heap):
            self._heap = [live for live in self._heap if live.live]
            heapq.heapify(self._heap)
            self._cancelled = 0

    def _arm(self, loop: asyncio.AbstractEventLoop, when: float) -> None:
        if self._wake is not None:
            self._wake.cancel()
        self._wake_at = when
        self._wake = loop.call_at(when, self._run, context=self._context)

    def _run(self) -> None:
        """Deliver every timer that is due, then wait for the next one."""
        self._wake, self._wake_at = None, math.inf
        loop = asyncio.get_running_loop()
        now = loop.time() + _RESOLUTION
        try:
            while self._heap and (not self._heap[0].live or self._heap[0].when <= now):
                timer = heapq.heappop(self._heap)
                if not timer.live:
                    self._cancelled -= 1
                    continue
                self._take(timer.address, timer.key)
                timer.live = False
                try:
                    self._fire(timer.address, timer.message, timer.context)
                except Exception as error:  # as asyncio does for a callback: report it, deliver the others
                    loop.call_exception_handler({"message": f"timer for {timer.address} failed",
                                                 "exception": error})
        finally:  # whatever escaped, the timers still to come keep their wake-up
            if self._heap and self._heap[0].when < self._wake_at:
                self._arm(loop, self._heap[0].when)


class _Timer:
    """One armed timer; ordered by when it is due."""

    __slots__ = ("when", "address", "key", "message", "context", "live")

    def __init__(self, when: float, address: str, key: Hashable, message: Any, context: TimerTrace) -> None:
        self.when, self.address, self.key, self.message, self.context = when, address, key, message, context
        self.live = True

    def __lt__(self, other: _Timer) -> bool:
        return self.when < other.when
