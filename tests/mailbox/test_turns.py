"""Tenanted actors take turns by tenant (`register(..., tenant=)`): one tenant's many busy actors cost another
tenant's actor a round of tenants per step, not a round of their actors."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, AskTimeout
from lessor.mailbox.turns import ROUND

STORM_ACTORS = 40
HOPS = 30
STEP = 0.0005  # seconds of work in each of the storm's steps: a tenant's turn is a time, so the steps must take some


def tenant_of(address: str) -> str:
    """`kind/tenant/name`, as an app might spell its addresses."""
    return address.split("/")[1]


@dataclass(frozen=True)
class Spin:
    pass


@dataclass(frozen=True)
class Hop:
    n: int
    sent: int  # storm steps taken when the hop was sent


class Count:
    """Steps the storm's actors took, and how many of them each of the chain's hops waited."""

    def __init__(self) -> None:
        self.storm_steps = 0
        self.waits: list[int] = []
        self.done = asyncio.Event()


class Storm(Actor):
    """Busy until the chain is done: a step of work, then a yield, over and over."""

    def __init__(self, count: Count) -> None:
        self.count = count

    async def receive(self, message: Any) -> None:
        while not self.count.done.is_set():
            self.count.storm_steps += 1
            busy_until = time.perf_counter() + STEP
            while time.perf_counter() < busy_until:
                pass
            await asyncio.sleep(0)


class Link(Actor):
    """One hop of the chain: notes how long the hop waited (in the storm's steps), passes it on."""

    def __init__(self, count: Count) -> None:
        self.count = count

    async def receive(self, message: Any) -> None:
        assert isinstance(message, Hop)
        self.count.waits.append(self.count.storm_steps - message.sent)
        if message.n == HOPS:
            self.count.done.set()
        else:
            self.tell(f"link/canary/{message.n + 1}", Hop(message.n + 1, self.count.storm_steps))


async def chain_during_storm(*, tenanted: bool) -> Count:
    count = Count()
    tenant = tenant_of if tenanted else None
    async with ActorSystem(registry=None) as system:
        system.register("storm", lambda _: Storm(count), tenant=tenant)
        system.register("link", lambda _: Link(count), tenant=tenant)
        for i in range(STORM_ACTORS):
            system.tell(f"storm/storm/{i}", Spin())
        for _ in range(3):
            await asyncio.sleep(0)  # the storm is under way
        system.tell("link/canary/0", Hop(0, count.storm_steps))
        await asyncio.wait_for(count.done.wait(), 60)
    assert len(count.waits) == HOPS + 1
    return count


async def test_each_hop_of_a_quiet_tenants_chain_waits_about_a_round_of_tenants_not_of_the_storms_actors() -> None:
    count = await chain_during_storm(tenanted=True)
    # The first hop finds the storm alone, running as the loop takes it (no turns without contention): it
    # waits a step of each storm actor, as without tenants. From then on two tenants contend, and a round
    # gives each `ROUND` seconds of steps: a few of the storm's. A hop runs in the round it arrives in,
    # behind at most the storm's turn of that round and of the one it arrived at the end of; never behind
    # a step of each of the storm's forty actors.
    # A turn is a time, and a loaded machine stretches it (it lasts as long as the loop's other work in the
    # last pass, up to 20 ms): so the typical hop is held to that bound, and none waits a step of every
    # storm actor, as each does without tenants (the next test).
    turn = ROUND / STEP
    waits = sorted(count.waits[1:])
    assert waits[len(waits) // 2] <= 2 * turn + 2 < STORM_ACTORS / 2, count.waits
    assert waits[-1] < STORM_ACTORS - 1, count.waits


async def test_without_tenants_each_hop_waits_a_step_of_every_storm_actor() -> None:
    """What the turns are for: the event loop alone takes every ready task in turn."""
    count = await chain_during_storm(tenanted=False)
    assert min(count.waits[1:]) >= STORM_ACTORS - 1, count.waits


async def test_a_lone_tenant_loses_nothing_to_the_turns() -> None:
    """One tenant's actors all run, a step each per round, however many there are; nothing waits forever."""
    handled: list[int] = []

    class Work(Actor):
        async def receive(self, message: Any) -> int:
            for _ in range(3):
                await asyncio.sleep(0)
            handled.append(message)
            return int(message)

    async with ActorSystem(registry=None) as system:
        system.register("work", lambda _: Work(), tenant=tenant_of)
        answers = await asyncio.gather(*(system.ask(f"work/t/{i}", i) for i in range(200)))
        assert system._turns.parked == 0  # alone, it is never held back
    assert answers == list(range(200)) and sorted(handled) == list(range(200))


async def test_actors_waiting_for_their_turns_can_be_killed_and_asks_to_them_still_time_out() -> None:
    """A step waiting for its tenant's turn is still a task the runtime can cancel: a kill or a deadline ends it."""
    release, spinning = asyncio.Event(), set()

    class Busy(Actor):
        async def receive(self, message: Any) -> str:
            if message == "spin":
                spinning.add(self.address)
                while not release.is_set():
                    busy_until = time.perf_counter() + STEP
                    while time.perf_counter() < busy_until:
                        pass
                    await asyncio.sleep(0)
            return str(message)

    async with ActorSystem(registry=None) as system:
        system.register("busy", lambda _: Busy(), tenant=tenant_of)
        try:
            for i in range(10):  # two tenants contend: their steps wait for turns
                system.tell(f"busy/t/{i}", "spin")
                system.tell(f"busy/u/{i}", "spin")
            while len(spinning) < 20:
                await asyncio.sleep(0)
            parked = system._turns.parked
            assert parked > 0
            for i in range(10):
                assert system.kill(f"busy/t/{i}")
            with pytest.raises(AskTimeout):
                await system.ask("busy/t/3", "spin", timeout=0.05)
            assert system._turns.parked > parked
        finally:
            release.set()
        assert await system.ask("busy/t/3", "hello") == "hello"
        assert system.dead_letters.total == 0
