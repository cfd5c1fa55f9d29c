"""`max_starting`: a kind whose start-ups wait on something slow runs only so many of them at once."""

from __future__ import annotations

import asyncio
import random
import time
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, ChaosMonkey, Supervision
from tests.slowness import scaled


class SlowStart(Actor):
    """Its start-up waits on `gate` (an API write at a first start, say); counts who is inside at once."""

    inside = 0
    most = 0

    def __init__(self, gate: asyncio.Event, handled: list[tuple[str, Any]]) -> None:
        self.gate, self.handled = gate, handled

    async def started(self) -> None:
        SlowStart.inside += 1
        SlowStart.most = max(SlowStart.most, SlowStart.inside)
        try:
            await self.gate.wait()
        finally:
            SlowStart.inside -= 1

    async def receive(self, message: Any) -> Any:
        self.handled.append((self.address, message))
        return message


@pytest.fixture(autouse=True)
def _counts() -> None:
    SlowStart.inside = SlowStart.most = 0


async def test_at_most_max_starting_actors_start_at_once_and_none_loses_a_message() -> None:
    gate, handled = asyncio.Event(), []
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled), max_starting=5)
        for i in range(50):
            system.tell(f"slow/{i}", "first")
            system.tell(f"slow/{i}", "second")
        await asyncio.sleep(0.05)
        assert SlowStart.inside == 5, "five start, the others wait for a slot"
        gate.set()
        answers = await asyncio.gather(*(system.ask(f"slow/{i}", "third") for i in range(50)))
    assert answers == ["third"] * 50
    assert SlowStart.most == 5
    for i in range(50):
        assert [m for a, m in handled if a == f"slow/{i}"] == ["first", "second", "third"]


async def test_without_the_limit_every_start_runs_at_once() -> None:
    gate, handled = asyncio.Event(), []
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled))
        for i in range(50):
            system.tell(f"slow/{i}", "first")
        await asyncio.sleep(0.05)
        assert SlowStart.inside == 50
        gate.set()


async def test_a_shutdown_does_not_wait_for_the_actors_waiting_for_a_slot() -> None:
    gate, handled = asyncio.Event(), []  # never set: the starts in their slots never finish
    began = time.monotonic()
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled), max_starting=2)
        for i in range(100):
            system.tell(f"slow/{i}", "first")
        await asyncio.sleep(0.05)
    assert time.monotonic() - began < 2.0
    assert system.live() == [] and handled == []


async def test_a_stop_requested_while_waiting_for_a_slot_skips_the_start() -> None:
    gate, handled = asyncio.Event(), []
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled), max_starting=1)
        system.tell("slow/a", "first")
        system.tell("slow/b", "first")
        await asyncio.sleep(0.02)
        system.stop("slow/b")  # b waits behind a's start
        gate.set()
        assert await system.ask("slow/a", "again") == "again"
        await asyncio.sleep(0.02)
        assert "slow/b" not in system.live()
    assert SlowStart.most == 1
    assert ("slow/b", "first") not in handled


async def test_actors_waiting_for_a_slot_hold_no_task() -> None:
    """A task per waiting actor (coroutines, frames, a future) is memory a large start-up frees only after the
    actors that stay were made among it: the allocator keeps the holes. In line, an actor is its cell."""
    gate, handled = asyncio.Event(), []
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled), max_starting=3)
        before = len(asyncio.all_tasks())
        for i in range(300):
            system.tell(f"slow/{i}", "first")
        await asyncio.sleep(0.02)
        assert len(asyncio.all_tasks()) - before == 3, "a task for each actor in a slot, none for those in line"
        assert system.busy() == 300, "those in line are at work too: their starts are under way"
        gate.set()
        answers = await asyncio.gather(*(system.ask(f"slow/{i}", "second") for i in range(300)))
    assert answers == ["second"] * 300
    assert SlowStart.most == 3
    assert [m for a, m in handled if a == "slow/299"] == ["first", "second"]


def test_max_starting_must_be_positive() -> None:
    system = ActorSystem(registry=None)
    with pytest.raises(ValueError, match="max_starting"):
        system.register("slow", lambda _: SlowStart(asyncio.Event(), []), max_starting=0)



class Flaky(SlowStart):
    """Starts slowly (a random few ms, as an API write would), so kills land inside `started` too."""

    def __init__(self, handled: list[tuple[str, Any]], rng: random.Random) -> None:
        super().__init__(asyncio.Event(), handled)
        self.rng = rng

    async def started(self) -> None:
        SlowStart.inside += 1
        SlowStart.most = max(SlowStart.most, SlowStart.inside)
        try:
            await asyncio.sleep(self.rng.uniform(0.001, 0.01))
        finally:
            SlowStart.inside -= 1


async def test_killed_mid_start_the_slots_are_given_back_and_every_actor_serves(chaos_seed: int) -> None:
    """Kills while actors start and wait for slots: never more inside `started` than the limit (sampled
    throughout), no slot lost (every actor answers in the end), no message handled twice."""
    handled: list[tuple[str, Any]] = []
    rng = random.Random(chaos_seed)
    samples = []
    async with ActorSystem(registry=None) as system:
        system.register("flaky", lambda _: Flaky(handled, rng), max_starting=4,
                        supervision=Supervision(max_restarts=1000, within=60.0, backoff=0.001, max_backoff=0.01))
        async with ChaosMonkey(system, rate=300, kinds={"flaky"}, seed=chaos_seed) as monkey:
            for i in range(200):
                system.tell(f"flaky/{i}", ("hello", i))
            for _ in range(40):
                samples.append(SlowStart.inside)
                await asyncio.sleep(0.005)
        answers = await asyncio.gather(*(system.ask(f"flaky/{i}", ("ask", i), timeout=scaled(10)) for i in range(200)))
        for _ in range(100):  # the last drains end just after their answers
            if system.busy() == 0:
                break
            await asyncio.sleep(0.01)
        assert system.busy() == 0, "every task that started has ended and been counted out"
    assert monkey.kills, "the monkey killed some actors"
    assert max(samples) <= 4 and SlowStart.most <= 4
    assert answers == [("ask", i) for i in range(200)]
    assert len(handled) == len(set(handled)), "a message handled twice"


async def test_with_tenants_start_slots_go_to_the_tenants_in_turn() -> None:
    """One tenant's hundreds of new actors waiting for a start slot hold another tenant's one new actor back by a
    start per waiting tenant, not by all of theirs (issue 23: one namespace's storm of new exporters must not
    starve another namespace's new exporter)."""
    gate, handled = asyncio.Event(), []
    started: list[str] = []

    class Noted(SlowStart):
        async def started(self) -> None:
            started.append(self.address)
            await super().started()

    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: Noted(gate, handled), max_starting=2,
                        tenant=lambda address: address.split("/")[1])
        for i in range(200):
            system.tell(f"slow/storm/{i}", "hello")
        for _ in range(5):
            await asyncio.sleep(0)
        system.tell("slow/quiet/one", "hello")
        gate.set()
        await asyncio.wait_for(system.ask("slow/quiet/one", "ping"), scaled(30))
        # Two started at once; then the quiet tenant's goes first or second, whatever the storm has in line.
        assert started.index("slow/quiet/one") <= 3, started[:10]
        # And nothing is lost: every storm actor starts and handles its message.
        async with asyncio.timeout(scaled(30)):
            while len([a for a, _ in handled if a.startswith("slow/storm/")]) < 200:
                await asyncio.sleep(0.01)
