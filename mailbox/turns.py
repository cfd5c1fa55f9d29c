"""Turns by tenant for the actors' steps: a tenant with one runnable actor waits a round of tenants, not of actors.

The event loop runs whatever is ready first come, first served. When one tenant has hundreds of actors ready
to run (a storm) and another has one (a canary passing a message along a chain of actors), each of the
canary's hops waits behind a step of every one of the storm's actors, and a busy loop makes that long.

Here every step of a tenanted actor's task (its start, and each time it resumes after waiting: for a
message, an answer, the API, a time slice's yield) is timed and charged to its tenant. While tenants
contend, a tenant that has used its turn (`ROUND` seconds or more) in this round waits in its line for the
next; a round ends on the event loop's next pass, which lets a turn's worth of each tenant's waiting steps
go first. So the storm's actors run about a turn per pass between them, while the canary's actor, whose tenant has
time left, runs as soon as the loop reaches it: each of its hops waits behind a round of tenants. A lone
tenant is not held back: turns would only cost it loop passes and put work outside the actors ahead of it.
The price is the first step of a tenant that finds another alone, which waits as the loop has it. Each
step costs two clock reads and a dictionary update. The tenant is whatever key the app registers per
address (`register(..., tenant=)`): the runtime knows no more of tenants than that. Work outside tenanted
actors (other tasks, callbacks) is neither timed nor held back.

Like trio's scheduler, this decides which runnable task goes next; unlike it, it sits between asyncio's
Task and the actor's coroutine (`Gated`), so the event loop itself is left as it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Hashable
from time import perf_counter
from typing import Any

from .lanes import Meter

TenantOf = Callable[[str], Hashable]

# Seconds of steps a tenant may run per round while others wait for their turn, at least. A quiet tenant's
# step waits about this long for each other busy tenant; shorter rounds cost the loop a pass each. When the
# loop's pass is longer with work outside the actors (the informers, the HTTP client), a tenant's turn is
# as long as that work, up to `LONGEST`: else a busy tenant would get a sliver of a loop that the other
# work fills, and fall behind (the operator's start-up did).
ROUND = 0.002
LONGEST = 0.02
# Seconds that tenants count as contending after two of them last ran one after the other. A lone tenant
# runs as the loop takes its steps, held back by no round: turns would only cost it loop passes.
CONTENTION = 1.0

_NOBODY = object()


class Turns:
    """One per actor system: the time each tenant's steps took this round, and the steps waiting for the next."""

    __slots__ = ("_meters", "_spent", "_lines", "_order", "_ending", "_cost", "_last", "_mixed", "_began", "_turn",
                 "rounds", "parked")

    def __init__(self) -> None:
        self._meters: dict[Hashable, Meter] = {}  # each tenant's, by its key: the key the other tables use
        self._spent: dict[Meter, float] = {}  # seconds of steps this round, by tenant
        self._lines: dict[Meter, deque[asyncio.Future[None]]] = {}  # steps waiting, by tenant
        self._order: deque[Meter] = deque()  # tenants with steps waiting, next first
        self._ending = False  # the end of this round is scheduled
        self._cost = ROUND  # a step's seconds, on average lately: how many steps a round's turn holds
        self._last: object = _NOBODY  # the tenant of the last step
        self._mixed = -CONTENTION  # when a step's tenant was not the previous step's (perf_counter)
        self._began = 0.0  # when this round began (perf_counter), if its end is scheduled
        self._turn = ROUND  # seconds of steps per tenant this round
        self.rounds = 0  # rounds ended so far, for tests and the curious
        self.parked = 0  # steps that had to wait for a later round

    def meter(self, tenant: Hashable) -> Meter:
        """The tenant's meter: its key in the turns, and what the loop's fast lane reads (`lanes`)."""
        meter = self._meters.get(tenant)
        if meter is None:
            meter = self._meters[tenant] = Meter(tenant)
        return meter

    def known(self, tenant: Hashable) -> Meter | None:
        """The tenant's meter if any of its steps has run."""
        return self._meters.get(tenant)

    def may_run(self, tenant: Meter, now: float, released: bool = False) -> bool:
        """Whether a step of `tenant` may run now: no other tenant contends, or it has time left this round
        and (unless the step is one the round released) none of its steps waits before it."""
        if now - self._mixed > CONTENTION:
            return True
        return self._spent.get(tenant, 0.0) < self._turn and (released or tenant not in self._lines)

    def charge(self, tenant: Meter, began: float, ended: float) -> None:
        """A step of `tenant` ran from `began` to `ended`."""
        tenant.charge(ended - began, ended)
        if tenant != self._last:
            if self._last is not _NOBODY:
                if ended - self._mixed > CONTENTION:
                    self._spent.clear()  # contention begins: time spent alone does not count against anyone
                self._mixed = ended
            self._last = tenant
        elif ended - self._mixed > CONTENTION:
            return  # alone: nothing to count
        spent = self._spent
        seconds = ended - began
        spent[tenant] = spent.get(tenant, 0.0) + seconds
        self._cost += (seconds - self._cost) * 0.1

    def wait(self, tenant: Meter, first: bool = False) -> asyncio.Future[None]:
        """A future that resolves when `tenant`'s turn comes again (its time this round is used up); `first`:
        the step was released, but the steps released before it used the turn: it goes first next round."""
        self.parked += 1
        loop = asyncio.get_running_loop()
        turn = loop.create_future()
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = deque()
            self._order.append(tenant)
        if first:
            line.appendleft(turn)
        else:
            line.append(turn)
        if not self._ending:
            self._ending = True
            self._began = perf_counter()
            loop.call_soon(self._end_round)
        return turn

    def _end_round(self) -> None:
        """The loop came round again: a new round, whose turns go first to the steps that waited, a tenant's
        worth (about a turn's seconds of them) at a time."""
        self.rounds += 1
        now = perf_counter()
        other = now - self._began - sum(self._spent.values())  # the pass's work outside tenanted actors
        self._turn = length = min(max(ROUND, other), LONGEST)
        self._began = now
        self._spent.clear()
        order, lines = self._order, self._lines
        worth = max(1, int(length / self._cost)) if self._cost > 0 else 1
        for _ in range(len(order)):
            tenant = order.popleft()
            line = lines[tenant]
            if not line:  # all released last round, and none has had to wait since
                del lines[tenant]
                continue
            given = 0
            while line and given < worth:
                turn = line.popleft()
                if not turn.done():  # else its task was cancelled while it waited
                    turn.set_result(None)
                    given += 1
            # Its line stays, if only empty, until a round finds nothing in it: its fresh steps wait behind
            # the ones just released, which would otherwise find the turn used by them, round after round.
            order.append(tenant)
        # While steps wait, the round just begun ends on the loop's next pass too; else the next one to find
        # its tenant's time used up ends it. Idle, a tenant runs free until it has used a round's time.
        if order:
            asyncio.get_running_loop().call_soon(self._end_round)
        else:
            self._ending = False


class Gated(Coroutine[Any, None, None]):
    """An actor's task coroutine as asyncio's Task drives it, each step first taking its tenant's turn.

    The Task sends into this object as into the coroutine it wraps; before passing a resumption on, it asks
    `Turns` whether the tenant may run, and if not hands the Task a future to wait on instead. A thrown
    exception (a cancellation, a kill) goes through at once: ending promptly matters more than the order.
    A step cancelled while it waits for its turn sees the cancellation where it awaited, even if what it
    awaited had come: as for a task cancelled between its future's completion and its next step.
    """

    __slots__ = ("_coro", "_turns", "_tenant", "_waiting")

    def __init__(self, coro: Coroutine[Any, None, None], turns: Turns, tenant: Meter) -> None:
        self._coro = coro
        self._turns = turns
        self._tenant = tenant
        self._waiting = False  # the Task is waiting on our turn, not on something of the coroutine's

    def send(self, value: None) -> Any:
        turns = self._turns
        began = perf_counter()
        released, self._waiting = self._waiting, False  # released: our turn came (the round woke us)
        if not turns.may_run(self._tenant, began, released):
            # A released step checks the turn too: a round releases about a turn's worth of steps by their
            # average time, and one long step must not stretch the pass for everyone.
            self._waiting = True
            # What `await turn` hands the Task, through the public await protocol: the future, marked as one to
            # wait on (asyncio's private `_asyncio_future_blocking`, which the protocol sets for us). The rest of
            # that await is dropped: the Task sends the next step to us, not to it.
            return next(turns.wait(self._tenant, first=released).__await__())
        try:
            return self._coro.send(value)
        finally:
            turns.charge(self._tenant, began, perf_counter())

    def __next__(self) -> Any:
        return self.send(None)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._waiting = False
        began = perf_counter()
        try:
            if val is None and tb is None:
                return self._coro.throw(typ)
            return self._coro.throw(typ, val, tb)
        finally:
            self._turns.charge(self._tenant, began, perf_counter())

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        return (yield from self._coro.__await__())  # pragma: no cover - only a Task drives it

    def __repr__(self) -> str:
        return f"<Gated {self._coro!r} tenant={self._tenant.tenant!r}>"
