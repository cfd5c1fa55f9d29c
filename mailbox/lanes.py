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
busy tenant's steps keep their place in line. The sockets' callbacks go first too: they only read and
wake, and an answer to a light tenant is read before the pass's line, not after it. The lane runs for
at most `SLICE` seconds a pass, so light tenants together cannot hold the loop back from the others' work;
the rest of it waits its place.

Like trio's scheduler, this reorders ready work; unlike it, only the few light steps move, and within the
lane the order stays first come, first served.
"""

from __future__ import annotations

import asyncio
import contextvars
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
# Seconds the lane may run per pass of the loop before the rest of it waits its turn in the line.
SLICE = 0.005


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


TENANT: contextvars.ContextVar[Meter | Serving] = contextvars.ContextVar("lessor_tenant")
"""Whom the task running in this context works for (set by the actor system for its actors' tasks)."""


def tenant_context(tenant: Meter | Serving | None) -> contextvars.Context:
    """A fresh context for an actor's task, naming whom it works for if the lane should know (a copy of a
    context made once: copying is a fraction of making one and setting a variable in it)."""
    return contextvars.Context() if tenant is None else tenant.context.copy()


def _naming(tenant: Meter | Serving) -> contextvars.Context:
    context = contextvars.Context()
    context.run(TENANT.set, tenant)
    return context


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


class LaneLoop(asyncio.SelectorEventLoop):
    """The selector event loop with the fast lane. Without it (another loop) everything works the same,
    but a light tenant's hops wait in the line as everyone's do."""

    def __init__(self, selector: Any = None) -> None:
        super().__init__(selector)
        self._lane: deque[asyncio.Handle] = deque()
        self._lane_runs = False  # a handle that runs the lane is in the loop's line
        self._lane_context = contextvars.Context()
        self.lane_steps = 0  # handles the lane ran, for tests and the curious
        self.moved = 0  # steps moved from the line to the lane (`Serving.arrived`)

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
                    self._ready.append(movable)  # type: ignore[attr-defined]
                    return movable
        return super().call_soon(callback, *args, context=context)

    def _add_callback(self, handle: asyncio.Handle) -> None:
        """A socket is ready (the selector's events, at the start of a pass): its callback goes first, before
        the steps the last pass left in the line. It only reads what came (an API answer, a watch event) and
        wakes whoever waits for it: a light tenant's step into the lane, at once, the others to the line.
        Not in the lane itself: in a storm the sockets' callbacks would use its time."""
        if not handle.cancelled():
            self._ready.appendleft(handle)  # type: ignore[attr-defined]

    def _into_lane(self, handle: asyncio.Handle) -> None:
        self._lane.append(handle)
        if not self._lane_runs:
            self._lane_runs = True
            # The front of the line: the pass under way runs it next (its count of handles is fixed, so the
            # pass's last handle moves to the next pass instead).
            self._ready.appendleft(asyncio.Handle(self._run_lane, (), self, self._lane_context))  # type: ignore[attr-defined]

    def _run_lane(self) -> None:
        lane = self._lane
        ends = perf_counter() + SLICE
        while lane:
            handle = lane.popleft()
            if not handle.cancelled():
                self.lane_steps += 1
                handle._run()
            if perf_counter() > ends:
                break
        if lane:  # the rest waits its place behind this pass's line, as anyone's step would
            self._ready.append(asyncio.Handle(self._run_lane, (), self, self._lane_context))  # type: ignore[attr-defined]
        else:
            self._lane_runs = False


def new_event_loop() -> asyncio.AbstractEventLoop:
    """The loop an app built on this runtime should run in (`asyncio.Runner(loop_factory=new_event_loop)`)."""
    return LaneLoop()
