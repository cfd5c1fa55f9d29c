"""A fast lane in the event loop: a light tenant's ready steps go before the loop's line, not at its end.

`turns` decides which tenant's steps may run in a pass of the loop; it cannot decide where in the pass they
run. The loop runs what is ready first come, first served, so each hop of a quiet tenant's chain (a lease
asking its exporter, the answer coming back, the API's reply waking the actor) waits for the rest of the
pass: in a storm, every other tenant's ready steps and every answer and watch event of theirs. A canary
lease's dozen hops each waited a pass of 10-50 ms.

Here each tenanted task runs in a context that names its tenant's `Meter` (`TENANT`), and so does every
task it starts (an API request's writer, a commit's write): asyncio gives a task the context of the code
that created it, and wakes it with that context. `LaneLoop.call_soon` reads it: a step of a tenant whose
recent steps took little time (`LIGHT` seconds, decaying by half every `HALF_LIFE`) goes in the lane,
which runs before the rest of the pass. So a quiet tenant's chain runs through its hops at once, while a
busy tenant's steps keep their place in line. The loop's own events go first too, the sockets' callbacks
and the timers come due: they only read, or post, and wake, so an answer to a light tenant is read, and its
timer's message posted, before the pass's line, not after it; and the loop looks for them again in the
middle of a long pass (`LOOK_AGAIN`), not only between passes. Readers of the app's input streams (the
informers, `Reading`) go in the lane: what they read is handed to a fair inbox, where tenants take turns.
The lane runs for at most `SLICE` seconds at a time; its rest runs when the loop next looks at its events,
so light tenants together get about half the loop at most, and the others' work the rest.

Like trio's scheduler, this reorders ready work; unlike it, only the few light steps move, and within the
lane the order stays first come, first served.
"""

from __future__ import annotations

import asyncio
import contextvars
import heapq
import math
from collections import deque
from collections.abc import Callable, Hashable, Iterable
from itertools import islice
from time import perf_counter
from typing import Any

# Seconds of steps a tenant may have taken lately and still be light: ~3 % of a core. A canary's lease
# takes a few milliseconds from create to Ready; a storm's tenant takes most of the loop.
LIGHT = 0.02
# Seconds after which a tenant's past steps count half: a tenant that stopped being busy is light again
# within a second or two.
HALF_LIFE = 0.5
# Seconds the lane may run at a time before the line gets its turn, until the loop next looks at its events.
SLICE = 0.005
# Seconds of a pass after which the loop looks at its sockets and timers again, before the rest of the pass.
LOOK_AGAIN = 0.005


class Meter:
    """One tenant's recent time in steps, decaying: how the lane knows who is light."""

    __slots__ = ("tenant", "load", "at", "context")

    def __init__(self, tenant: Hashable) -> None:
        self.tenant = tenant
        self.context = _naming(self)  # copied for each of the tenant's tasks (`tenant_context`)
        self.load = 0.0  # seconds of steps, decayed to `at`
        self.at = 0.0  # perf_counter() of the last charge

    def charge(self, seconds: float, now: float) -> None:
        load = self.load
        if load:
            load *= 2.0 ** ((self.at - now) / HALF_LIFE)
        self.load = load + seconds
        self.at = now

    def light(self, now: float) -> bool:
        load = self.load
        return load < LIGHT or load * 2.0 ** ((self.at - now) / HALF_LIFE) < LIGHT

    def __repr__(self) -> str:
        return f"<Meter {self.tenant!r} load={self.load:.4f}>"


class Serving:
    """For an actor that serves every tenant from a fair inbox (the topology): light while a light tenant's
    message waits in it, so that a quiet tenant's question does not wait for the loop's line twice, once to
    be answered and once for the answer. The inbox takes the tenants in turn (`fair_inbox`), so the step that
    runs in the lane comes to that message within a round of tenants.

    Such an actor is busy in a storm: its task's next step is usually already in the line when a light
    tenant's message comes. So the loop keeps that step movable (`queued`), and the message's arrival moves
    it to the lane (`arrived`)."""

    __slots__ = ("_waiting", "_meter_of", "queued", "context")

    LOOK = 8
    """Tenants looked at, next first: a quiet tenant's message is among the next few of a round."""

    def __init__(self, waiting: Callable[[], Iterable[Hashable]],
                 meter_of: Callable[[Hashable], Meter | None]) -> None:
        self._waiting = waiting
        self._meter_of = meter_of
        self.queued: _Movable | None = None  # the task's step waiting in the loop's line, if it can move
        self.context = _naming(self)

    def light(self, now: float) -> bool:
        for tenant in islice(self._waiting(), self.LOOK):
            if self._light(tenant, now):
                return True
        return False

    def arrived(self, tenant: Hashable) -> None:
        """A message of `tenant` was queued: if it is light, the step waiting in the line moves to the lane."""
        queued = self.queued
        if queued is not None and not queued.ran and self._light(tenant, perf_counter()):
            self.queued = None
            queued.hurry()

    def _light(self, tenant: Hashable, now: float) -> bool:
        meter = self._meter_of(tenant)
        return meter is None or meter.light(now)  # no meter: none of its steps has run yet


class Reading:
    """For a task that reads the app's input streams and hands what came to a fair inbox (an informer, which
    feeds the topology): its steps go in the lane, as the sockets' callbacks go first. The fair inbox orders
    the work by tenant, but only what has been read: behind the pass's line, a quiet tenant's watch event
    waited a pass (30-40 ms in a storm) before any fairness could apply to it. The reader's work is the same
    either way; only its place in the pass changes."""

    __slots__ = ("context",)

    def __init__(self) -> None:
        self.context = _naming(self)

    def light(self, now: float) -> bool:
        return True


TENANT: contextvars.ContextVar[Meter | Serving | Reading] = contextvars.ContextVar("lessor_tenant")
"""Whom the task running in this context works for (set by the actor system for its actors' tasks)."""


def tenant_context(tenant: Meter | Serving | Reading | None) -> contextvars.Context:
    """A fresh context for an actor's task, naming whom it works for if the lane should know (a copy of a
    context made once: copying is a fraction of making one and setting a variable in it)."""
    return contextvars.Context() if tenant is None else tenant.context.copy()


def _naming(tenant: Meter | Serving | Reading) -> contextvars.Context:
    context = contextvars.Context()
    context.run(TENANT.set, tenant)
    return context


READING = Reading()
"""The one `Reading`: readers need no meter of their own, only a place at the front."""


class _Movable(asyncio.Handle):
    """A step in the loop's line that may also be put in the lane: whichever place comes first runs it."""

    __slots__ = ("ran",)

    def __init__(self, callback: Callable[..., object], args: tuple[Any, ...], loop: LaneLoop,
                 context: contextvars.Context) -> None:
        super().__init__(callback, args, loop, context)
        self.ran = False

    def hurry(self) -> None:
        loop: LaneLoop = self._loop  # type: ignore[attr-defined]
        loop.moved += 1
        loop._into_lane(self)

    def _run(self) -> None:
        if not self.ran:
            self.ran = True
            super()._run()


class _Line(deque[asyncio.Handle]):
    """The loop's line of ready handles (asyncio's `_ready`), with a front for the loop's own events.

    asyncio looks at its sockets and timers once a pass, then runs the whole line: a socket's answer or a timer
    that comes due early in a pass waits for the rest of it, and a timer come due goes to the line's end,
    behind every step the last pass left. A light tenant's chain paid that at each of its waits (an API answer,
    a watch event, the exporter's decision window): 10-50 ms each in a storm. Here the loop looks again once a
    pass has run `LOOK_AGAIN` seconds (`popleft`, as asyncio takes each handle), and what it finds, the
    sockets' callbacks and then the timers come due in their order, goes to the front."""

    __slots__ = ("front", "look_at", "queued_io", "_look")

    def __init__(self, handles: Iterable[asyncio.Handle], look: Callable[[], None]) -> None:
        super().__init__(handles)
        self.front = 0  # handles put at the front since the loop last looked, which the next one goes behind
        self.look_at = math.inf  # perf_counter() when the loop looks at its sockets and timers again
        self.queued_io: set[asyncio.Handle] = set()  # sockets' callbacks in the line, not run yet (`LaneLoop`)
        self._look = look

    def append(self, handle: asyncio.Handle) -> None:
        if handle.__class__ is asyncio.TimerHandle:  # only asyncio's pass appends one: a timer come due
            self.to_front(handle)
        else:
            deque.append(self, handle)

    def to_front(self, handle: asyncio.Handle) -> None:
        self.insert(self.front, handle)
        self.front += 1

    def popleft(self) -> asyncio.Handle:
        handle = deque.popleft(self)
        if self.queued_io:
            self.queued_io.discard(handle)
        if perf_counter() > self.look_at:
            self._look()
        return handle


class LaneLoop(asyncio.SelectorEventLoop):
    """The selector event loop with the fast lane. Built by `loops.new_event_loop` once it found the asyncio
    internals this overrides; in asyncio's own loop the actors behave the same, but a light tenant's hops wait
    in the line as everyone's do."""

    def __init__(self, selector: Any = None) -> None:
        super().__init__(selector)
        self._ready: _Line = _Line(self._ready, self._look_again)
        self._lane: deque[asyncio.Handle] = deque()
        self._lane_runs = False  # a handle that runs the lane is in the loop's line
        self._lane_later: _Movable | None = None  # that handle, when the lane ran out of its slice
        self._lane_context = contextvars.Context()
        self.lane_steps = 0  # handles the lane ran, for tests and the curious
        self.moved = 0  # steps moved from the line to the lane (`Serving.arrived`)
        self.looked = 0  # times the loop looked at its sockets and timers in the middle of a pass

    def call_soon(  # type: ignore[override]
            self, callback: Callable[..., object], *args: Any, context: contextvars.Context | None = None,
    ) -> asyncio.Handle:
        if context is not None:
            tenant = context.get(TENANT)
            if tenant is not None:
                if tenant.light(perf_counter()):
                    self._check_closed()  # type: ignore[attr-defined]
                    handle = asyncio.Handle(callback, args, self, context)
                    self._into_lane(handle)
                    return handle
                if isinstance(tenant, Serving):
                    self._check_closed()  # type: ignore[attr-defined]
                    tenant.queued = movable = _Movable(callback, args, self, context)
                    self._ready.append(movable)
                    return movable
        return super().call_soon(callback, *args, context=context)

    def _process_events(self, event_list: list[Any]) -> None:
        """The loop looks at its sockets (the start of a pass, or `_look_again`): their callbacks, then the timers
        come due, go to the front (`_Line`)."""
        line = self._ready
        line.front = 0
        line.look_at = perf_counter() + LOOK_AGAIN
        super()._process_events(event_list)  # type: ignore[misc]
        later = self._lane_later
        if later is not None and not later.ran:  # the lane's rest, from the last time it ran out of its slice
            self._lane_later = None
            line.to_front(later)

    def _add_callback(self, handle: asyncio.Handle) -> None:
        """A socket is ready: its callback goes first, before the steps the last pass left in the line. It only
        reads what came (an API answer, a watch event) and wakes whoever waits for it: a light tenant's step into
        the lane, at once, the others to the line. Not in the lane itself: in a storm the sockets' callbacks
        would use its time. Once in the line until it runs: the loop may look again before it has."""
        line = self._ready
        if not handle.cancelled() and handle not in line.queued_io:
            line.queued_io.add(handle)
            line.to_front(handle)

    def _look_again(self) -> None:
        """In the middle of a long pass: what the sockets brought and the timers come due since the pass began
        go to the front, as at the start of a pass."""
        self.looked += 1
        self._process_events(self._selector.select(0))  # type: ignore[attr-defined]
        line, timers = self._ready, self._scheduled  # type: ignore[attr-defined]
        due = self.time() + self._clock_resolution  # type: ignore[attr-defined]
        while timers and timers[0]._when < due:
            timer = heapq.heappop(timers)
            timer._scheduled = False
            if timer._cancelled:  # counted when it was cancelled in the heap, which it leaves now
                self._timer_cancelled_count -= 1  # type: ignore[attr-defined]
            else:
                line.to_front(timer)

    def _into_lane(self, handle: asyncio.Handle) -> None:
        self._lane.append(handle)
        if not self._lane_runs:
            self._lane_runs = True
            # The front of the line: the pass under way runs it next (its count of handles is fixed, so the
            # pass's last handle moves to the next pass instead).
            self._ready.appendleft(asyncio.Handle(self._run_lane, (), self, self._lane_context))

    def _run_lane(self) -> None:
        self._lane_later = None
        lane = self._lane
        ends = perf_counter() + SLICE
        while lane:
            handle = lane.popleft()
            if not handle.cancelled():
                self.lane_steps += 1
                handle._run()
            if perf_counter() > ends:
                break
        if lane:
            # The rest runs when the loop next looks at its events: at the front then, after `LOOK_AGAIN` of the
            # line's work at most, not behind the whole line (a pass, 10-50 ms in a storm). In the line
            # meanwhile, so that the loop does not sleep on it; whichever place comes first runs it.
            later = self._lane_later = _Movable(self._run_lane, (), self, self._lane_context)
            line = self._ready
            deque.append(line, later)
            line.look_at = perf_counter() + LOOK_AGAIN  # the line's turn: the loop looks again after it
        else:
            self._lane_runs = False
