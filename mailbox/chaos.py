"""A chaos monkey: kills random live actors, so tests and demos show that restarts rebuild state."""

from __future__ import annotations

import asyncio
import random
from collections.abc import Collection
from types import TracebackType

from .system import ActorSystem


class ChaosMonkey:
    """Kills a random live actor `rate` times a second on average (Poisson arrivals).

    `kinds` limits the victims to those kinds. Use as an async context
    manager; `kills` lists the addresses killed, in order.
    """

    def __init__(
        self, system: ActorSystem, rate: float, *, kinds: Collection[str] | None = None, seed: int | None = None
    ) -> None:
        if rate <= 0:
            raise ValueError("rate must be positive")
        self.kills: list[str] = []
        self._system = system
        self._rate = rate
        self._kinds = None if kinds is None else frozenset(kinds)
        self._rng = random.Random(seed)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> ChaosMonkey:
        self._task = asyncio.create_task(self._run(), name="chaos-monkey")
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._task is not None
        self._task.cancel()
        try:
            await self._task
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if current is not None and current.cancelling():
                raise  # we are being cancelled ourselves, not just the monkey

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._rng.expovariate(self._rate))
            victims = [
                address
                for address in self._system.live()
                if self._kinds is None or address.partition("/")[0] in self._kinds
            ]
            if victims:
                victim = self._rng.choice(victims)
                if self._system.kill(victim):
                    self.kills.append(victim)
