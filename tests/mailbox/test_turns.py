"""Tenanted actors take turns by tenant (`register(..., tenant=)`): one tenant's many busy actors cost another
tenant's actor a round of tenants per step, not a round of their actors."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, AskTimeout
from lessor.mailbox.lanes import LaneLoop
from lessor.mailbox.loops import new_event_loop
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


async def chain_during_storm(*, tenanted: bool, systems: list[ActorSystem] | None = None) -> Count:
    count = Count()
    tenant = tenant_of if tenanted else None
    async with ActorSystem(registry=None) as system:
        if systems is not None:
            systems.append(system)
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


def test_in_the_mailboxs_loop_a_quiet_tenants_hops_go_before_the_storms_line() -> None:
    """`lanes`: in the loop the app runs (`new_event_loop`), a light tenant's ready step goes before the pass's
    line, so its chain does not wait for the storm's steps at all, not even a round of tenants."""
    systems: list[ActorSystem] = []
    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        count = runner.run(chain_during_storm(tenanted=True, systems=systems))
        loop = runner.get_loop()
        assert isinstance(loop, LaneLoop)
        lane_steps = loop.lane_steps
    # The first hop finds the storm just begun and still light, in the lane before it (a tenant is light
    # until its steps have taken `LIGHT` seconds lately): it waits behind those steps of the storm's.
    waits = sorted(count.waits[1:])
    # A step that the machine's scheduler happens to interrupt charges the canary the time it lost: enough
    # of them would make it heavy for a second. The typical hop still waits for none of the storm's steps.
    assert waits[len(waits) // 2] == 0, count.waits
    storm, canary = (systems[0]._turns.meter(name) for name in ("storm", "canary"))
    now = time.perf_counter()
    assert canary.light(now) and not storm.light(now), (canary, storm)
    # The whole chain waited less than a pass of the storm (a step of each of its actors); turns alone hold
    # each hop to a round of tenants (the first test), a few of the storm's steps per hop.
    assert sum(waits) < STORM_ACTORS and lane_steps >= HOPS, (count.waits, lane_steps)


async def test_the_suite_runs_in_the_loop_lessor_runs_in() -> None:
    """tests/conftest.py: every async test, the chaos tests among them, runs with the fast lane on."""
    assert isinstance(asyncio.get_running_loop(), LaneLoop)


@dataclass(frozen=True)
class Question:
    tenant: str


class Hub(Actor):
    """Serves every tenant from a fair inbox, as the topology does: each answer takes a storm step's time."""

    async def receive(self, message: Any) -> str:
        busy_until = time.perf_counter() + STEP
        while time.perf_counter() < busy_until:
            pass
        return message.tenant


class Asker(Actor):
    """A storm actor that keeps the hub busy with questions."""

    def __init__(self, count: Count) -> None:
        self.count = count

    async def receive(self, message: Any) -> None:
        while not self.count.done.is_set():
            await self.ask("hub/all", Question("storm"))


class AskingLink(Link):
    """A hop of the canary's chain that asks the hub first: waits counted from the question to the answer."""

    async def receive(self, message: Any) -> None:
        assert isinstance(message, Hop)
        asked = self.count.storm_steps
        assert await self.ask("hub/all", Question("canary")) == "canary"
        self.count.waits.append(self.count.storm_steps - asked)
        if message.n == HOPS:
            self.count.done.set()
        else:
            self.tell(f"link/canary/{message.n + 1}", Hop(message.n + 1, self.count.storm_steps))


def test_a_quiet_tenants_question_to_an_actor_serving_everyone_does_not_wait_for_the_storms_line() -> None:
    """`lanes.Serving`: the hub is busy with the storm's questions, its next step always in the loop's line; a
    quiet tenant's question moves that step to the lane, and the hub's fair inbox takes it within a round."""

    async def chain() -> Count:
        count = Count()
        async with ActorSystem(registry=None) as system:
            system.register("hub", lambda _: Hub(), capacity=100_000, fair_key=lambda m: m.tenant)
            system.register("asker", lambda _: Asker(count), tenant=tenant_of)
            system.register("storm", lambda _: Storm(count), tenant=tenant_of)
            system.register("link", lambda _: AskingLink(count), tenant=tenant_of)
            for i in range(STORM_ACTORS):  # the loop's line: the storm's steps, and the hub's among them
                system.tell(f"storm/storm/{i}", Spin())
                system.tell(f"asker/storm/{i}", Spin())
            while count.storm_steps < 4 * STORM_ACTORS:  # the storm is heavy by now (`lanes.LIGHT`)
                await asyncio.sleep(0.001)
            system.tell("link/canary/0", Hop(0, count.storm_steps))
            await asyncio.wait_for(count.done.wait(), 60)
        return count

    with asyncio.Runner(loop_factory=new_event_loop) as runner:
        count = runner.run(chain())
    waits = sorted(count.waits)
    # A question moves the hub's next step to the lane: the typical one waits for none of the storm's steps
    # in the loop's line (without `Serving`, each waits for the steps queued before the hub's: a turn's).
    assert waits[len(waits) // 2] == 0, count.waits


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
