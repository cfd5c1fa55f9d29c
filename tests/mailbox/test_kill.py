"""Kill: abrupt cancellation mid-handling is supervised like a crash; the chaos monkey picks its victims by kind."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorKilled, ActorSystem, ChaosMonkey, Supervision

FAST = Supervision(max_restarts=1000, within=60, backoff=0.001, max_backoff=0.001)


@dataclass(frozen=True)
class Hang:
    pass


@dataclass(frozen=True)
class Get:
    pass


class Keeper(Actor):
    """Rebuilds `value` from the store in `started`; `Hang` never finishes on its own."""

    def __init__(self, store: dict[str, str], starts: list[str], hanging: asyncio.Event) -> None:
        self.store, self.starts, self.hanging = store, starts, hanging

    async def started(self) -> None:
        self.starts.append(self.address)
        self.value = self.store.get(self.address, "fresh")

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Hang):
            self.value = "half-done"
            self.hanging.set()
            await asyncio.Event().wait()
        return self.value


async def test_kill_mid_handling_restarts_the_actor_and_it_handles_what_comes_next() -> None:
    store = {"keeper/1": "committed"}
    starts: list[str] = []
    hanging = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("keeper", lambda _: Keeper(store, starts, hanging), supervision=FAST)
        stuck = asyncio.create_task(system.ask("keeper/1", Hang(), timeout=60))
        await hanging.wait()
        system.tell("keeper/1", Get())  # waiting behind the hung message
        assert system.kill("keeper/1")
        with pytest.raises(ActorKilled):
            await stuck
        assert await system.ask("keeper/1", Get()) == "committed"  # not "half-done"
        assert starts == ["keeper/1", "keeper/1"]


async def test_killing_an_idle_actor_restarts_it_and_killing_nothing_says_so() -> None:
    starts: list[str] = []
    async with ActorSystem(registry=None) as system:
        system.register("keeper", lambda _: Keeper({}, starts, asyncio.Event()), supervision=FAST)
        await system.ask("keeper/1", Get())
        assert system.kill("keeper/1")
        assert await system.ask("keeper/1", Get()) == "fresh"
        assert starts == ["keeper/1", "keeper/1"]
        assert not system.kill("keeper/2")  # never spawned


async def test_the_chaos_monkey_kills_only_the_kinds_it_is_given(chaos_seed: int) -> None:
    starts: list[str] = []
    async with ActorSystem(registry=None) as system:
        for kind in ("lease", "exporter"):
            system.register(kind, lambda _: Keeper({}, starts, asyncio.Event()), supervision=FAST)
        addresses = [f"{kind}/{i}" for kind in ("lease", "exporter") for i in range(3)]
        for address in addresses:
            await system.ask(address, Get())
        async with ChaosMonkey(system, rate=2000, kinds={"lease"}, seed=chaos_seed) as monkey:
            while len(monkey.kills) < 10:
                await asyncio.sleep(0.001)
        for address in addresses:
            assert await system.ask(address, Get()) == "fresh"  # every victim came back
    assert {address.split("/")[0] for address in monkey.kills} == {"lease"}
    restarted = {address for address in starts if starts.count(address) > 1}
    assert restarted and all(address.startswith("lease/") for address in restarted)


async def test_an_actor_knows_whether_it_restarted_but_not_after_a_stop() -> None:
    """A restart (kill, crash) keeps the cell, so its next incarnation knows that what the last one sent may
    still be in flight; a stop ends the cell, and the next activation is a first one again."""
    seen: list[bool] = []

    class Noting(Actor):
        async def started(self) -> None:
            seen.append(self.restarted)

        async def receive(self, message: Any) -> Any:
            if message == "stop":
                self.stop()
            return None

    async def _until(check: Any) -> None:
        while not check():
            await asyncio.sleep(0.005)

    async with ActorSystem() as system:
        system.register("n", lambda _: Noting(), supervision=FAST)
        system.tell("n/1", "hello")
        await _until(lambda: len(seen) == 1)
        assert system.kill("n/1")
        system.tell("n/1", "hello")
        await _until(lambda: len(seen) == 2)
        system.tell("n/1", "stop")
        await asyncio.sleep(0.05)
        system.tell("n/1", "hello")
        await _until(lambda: len(seen) == 3)
    assert seen == [False, True, False]
