"""Turns by tenant for the actors' handlings: a tenant with one runnable actor waits a round of tenants, not of actors.

The event loop runs whatever is ready first come, first served. When one tenant has hundreds of actors ready
to run (a storm) and another has one (a canary passing a message along a chain of actors), each of the
canary's hops waits behind a whole round of the storm's actors, and a busy loop makes that round long.

Here every step of a tenanted actor's task (its start, and each time it resumes after waiting: for a message,
an answer, the API, a time slice's yield) first takes a turn. A tenant takes one turn per round; its other
steps wait in its line. A round ends on the event loop's next pass, which hands the next turn to the first
step in each tenant's line. So the storm's actors run one step per round between them, and the canary's
actor, whose tenant has not had its turn, runs as soon as the loop reaches it. With no contention a step
costs a set lookup and one callback per round. The tenant is whatever key the app registers per address
(`register(..., tenant=)`): the runtime knows no more of tenants than that.

Like trio's scheduler, this decides which runnable task goes next; unlike it, it sits between asyncio's
Task and the actor's coroutine (`Gated`), so the event loop itself is left as it is.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable, Coroutine, Generator, Hashable
from time import perf_counter
from typing import Any

TenantOf = Callable[[str], Hashable]

# Seconds a round should last when tenants contend: the turns per tenant per round (`Turns.quota`) double
# while rounds are shorter and halve while they are over twice as long. Short rounds cost the loop's own
# pass each; long ones are what a quiet tenant's step waits. The time slice of a draining actor's turn.
ROUND = 0.001
MAX_QUOTA = 1024


class Turns:
    """One per actor system: the turns each tenant took this round, and the steps waiting for the next."""

    __slots__ = ("_taken", "_lines", "_order", "_ending", "_began", "quota", "rounds", "parked")

    def __init__(self) -> None:
        self._taken: dict[Hashable, int] = {}  # turns taken this round, by tenant
        self._lines: dict[Hashable, deque[asyncio.Future[None]]] = {}  # steps waiting, by tenant
        self._order: deque[Hashable] = deque()  # tenants with steps waiting, next first
        self._ending = False  # the end of this round is scheduled
        self._began = 0.0  # when this round began (perf_counter)
        self.quota = 1  # turns per tenant per round: adapted so that a round lasts about ROUND seconds
        self.rounds = 0  # rounds ended so far: the unit of a turn's wait, for tests and the curious
        self.parked = 0  # steps that had to wait for a later round

    def take(self, tenant: Hashable) -> asyncio.Future[None] | None:
        """None: `tenant`'s step may run now. Else a future that resolves when its turn comes."""
        taken = self._taken.get(tenant, 0)
        if taken < self.quota:
            self._taken[tenant] = taken + 1
            if not self._ending:
                self._ending = True
                self._began = perf_counter()
                asyncio.get_running_loop().call_soon(self._end_round)
            return None
        self.parked += 1
        turn = asyncio.get_running_loop().create_future()
        line = self._lines.get(tenant)
        if line is None:
            line = self._lines[tenant] = deque()
            self._order.append(tenant)
        line.append(turn)
        return turn

    def _end_round(self) -> None:
        """The loop came round again: a new round, whose turns go first to the steps that waited, tenant by tenant."""
        self.rounds += 1
        now = perf_counter()
        order, lines = self._order, self._lines
        if order:  # some tenant used up its turns: were they too few for the loop's pace, or too many?
            took = now - self._began
            if took < ROUND:
                self.quota = min(self.quota * 2, MAX_QUOTA)
            elif took > 2 * ROUND and self.quota > 1:
                self.quota //= 2
        self._began = now
        taken = self._taken
        taken.clear()
        quota = self.quota
        for _ in range(len(order)):
            tenant = order.popleft()
            line = lines[tenant]
            given = 0
            while line and given < quota:
                turn = line.popleft()
                if not turn.done():  # else its task was cancelled while it waited
                    turn.set_result(None)
                    given += 1
            if given:
                taken[tenant] = given
            if line:
                order.append(tenant)
            else:
                del lines[tenant]
        if taken:  # the round just begun ends on the loop's next pass too
            asyncio.get_running_loop().call_soon(self._end_round)
        else:
            self._ending = False


class Gated(Coroutine[Any, None, None]):
    """An actor's task coroutine as asyncio's Task drives it, each step first taking its tenant's turn.

    The Task sends into this object as into the coroutine it wraps; before passing a resumption on, it asks
    `Turns` whether the tenant may run, and if not hands the Task a future to wait on instead. A thrown
    exception (a cancellation, a kill) goes through at once: ending promptly matters more than the order.
    """

    __slots__ = ("_coro", "_turns", "_tenant", "_waiting")

    def __init__(self, coro: Coroutine[Any, None, None], turns: Turns, tenant: Hashable) -> None:
        self._coro = coro
        self._turns = turns
        self._tenant = tenant
        self._waiting = False  # the Task is waiting on our turn, not on something of the coroutine's

    def send(self, value: None) -> Any:
        if self._waiting:
            self._waiting = False  # our turn came
        else:
            turn = self._turns.take(self._tenant)
            if turn is not None:
                self._waiting = True
                turn._asyncio_future_blocking = True  # what `await turn` would say to the Task
                return turn
        return self._coro.send(value)

    def __next__(self) -> Any:
        return self.send(None)

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        self._waiting = False
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover - the Task throws an instance

    def close(self) -> None:
        self._coro.close()

    def __await__(self) -> Generator[Any, None, None]:
        return (yield from self._coro.__await__())  # pragma: no cover - only a Task drives it

    def __repr__(self) -> str:
        return f"<Gated {self._coro!r} tenant={self._tenant!r}>"
