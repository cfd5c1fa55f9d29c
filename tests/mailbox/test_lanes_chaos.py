"""Chaos in the fast lane (`mailbox/lanes.py`): actors killed at random while a busy tenant and quiet ones
share the loop, and a hub serving them all has its steps moved to the lane again and again.

What could go wrong there is the runtime's own: a step run twice (a moved step run from both places), a step
lost (a woken task never run), a message handled twice or out of order. Sampled while the monkey runs: every
message is handled at most once and in the order it was sent, and nothing reaches the loop's exception
handler. After: every actor answers, and the quiet tenants' chains all reached their end.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from lessor.mailbox import Actor, ActorKilled, ActorSystem, ChaosMonkey, Supervision, Undeliverable
from lessor.mailbox.lanes import LaneLoop
from tests.mailbox.test_turns import Question

FAST = Supervision(max_restarts=100_000, within=60, backoff=0.0005, max_backoff=0.001)
BUSY = 30  # the busy tenant's actors, each asking the hub and telling a counter over and over
QUIET = 4  # quiet tenants, each passing a message along a chain of counters
HOPS = 40
KILLS = 300


@dataclass(frozen=True)
class Count:
    sender: str
    seq: int


@dataclass(frozen=True)
class Hop:
    tenant: str
    n: int
    attempt: int = 0  # a chain started again (its hop was killed) numbers its counts afresh


class Record:
    def __init__(self) -> None:
        self.handled: dict[tuple[str, str], list[int]] = {}  # (counter, sender) -> seqs, in handling order
        self.broken: list[str] = []
        self.chains_done: set[str] = set()

    def count(self, counter: str, message: Count) -> None:
        seqs = self.handled.setdefault((counter, message.sender), [])
        if seqs and message.seq <= seqs[-1]:
            self.broken.append(f"{counter} handled {message.sender}'s {message.seq} after {seqs[-1]}")
        seqs.append(message.seq)


class Hub(Actor):
    async def receive(self, message: Any) -> str:
        busy_until = time.perf_counter() + 0.0002
        while time.perf_counter() < busy_until:
            pass
        return str(message.tenant)


class Counter(Actor):
    def __init__(self, record: Record) -> None:
        self.record = record

    async def receive(self, message: Any) -> None:
        if isinstance(message, Count):
            self.record.count(self.address, message)


class Busy(Actor):
    """The busy tenant: asks the hub and tells its counter, numbering what it tells."""

    def __init__(self, stop: asyncio.Event) -> None:
        self.stop = stop
        self.seq = 0  # a restart starts again from 0 under a new sender name

    async def receive(self, message: Any) -> None:
        sender = f"{self.address}#{id(self)}"
        while not self.stop.is_set():
            try:
                await self.ask("hub/all", Question("busy"), timeout=5)
            except (ActorKilled, Undeliverable):
                pass  # the hub was killed while it held the question
            self.seq += 1
            self.tell(f"counter/busy/{self.address.rsplit('/', 1)[1]}", Count(sender, self.seq))


class Link(Actor):
    """A quiet tenant's hop: asks the hub, tells its counter, passes the chain on."""

    def __init__(self, record: Record) -> None:
        self.record = record

    async def receive(self, message: Any) -> None:
        assert isinstance(message, Hop)
        try:
            await self.ask("hub/all", Question(message.tenant), timeout=5)
        except (ActorKilled, Undeliverable):
            pass
        self.tell(f"counter/{message.tenant}/c", Count(f"{message.tenant}#{message.attempt}", message.n))
        if message.n == HOPS:
            self.record.chains_done.add(message.tenant)
        else:
            self.tell(f"link/{message.tenant}/{message.n + 1}", Hop(message.tenant, message.n + 1, message.attempt))


def tenant_of(address: str) -> str:
    return address.split("/")[1]


def test_kills_in_a_shared_loop_lose_no_step_and_run_none_twice(chaos_seed: int) -> None:
    record = Record()
    errors: list[dict[str, Any]] = []

    async def run() -> tuple[list[str], int]:
        loop = asyncio.get_running_loop()
        assert isinstance(loop, LaneLoop)
        loop.set_exception_handler(lambda _, context: errors.append(context))
        stop = asyncio.Event()
        async with ActorSystem(registry=None) as system:
            system.register("hub", lambda _: Hub(), capacity=100_000, supervision=FAST,
                            fair_key=lambda m: m.tenant)
            system.register("busy", lambda _: Busy(stop), supervision=FAST, tenant=tenant_of)
            system.register("counter", lambda _: Counter(record), capacity=100_000, supervision=FAST,
                            tenant=tenant_of)
            system.register("link", lambda _: Link(record), supervision=FAST, tenant=tenant_of)
            for i in range(BUSY):
                system.tell(f"busy/busy/{i}", "go")
            await asyncio.sleep(0.05)  # the busy tenant is heavy by now
            async with ChaosMonkey(system, rate=2000, kinds={"busy", "link", "counter"}, seed=chaos_seed) as monkey, \
                    ChaosMonkey(system, rate=200, kinds={"hub"}, seed=chaos_seed + 1) as hub_monkey:
                for q in range(QUIET):
                    system.tell(f"link/q{q}/0", Hop(f"q{q}", 0))
                attempt = ticks = 0
                while len(monkey.kills) < KILLS or len(hub_monkey.kills) < KILLS // 20 or not loop.moved:
                    await asyncio.sleep(0.005)
                    ticks += 1
                    assert not record.broken and not errors, (record.broken[:3], errors[:3])
                    # Quick chains, or one cut by a kill: new ones (numbered afresh) while the monkey runs.
                    if len(record.chains_done) == QUIET or ticks % 40 == 0:
                        attempt += 1
                        record.chains_done.clear()
                        for q in range(QUIET):
                            system.tell(f"link/q{q}/0", Hop(f"q{q}", 0, attempt=attempt))
            # A chain whose hop was killed while handling it ends there: start the lost ones again.
            for q in range(QUIET):
                if f"q{q}" not in record.chains_done:
                    system.tell(f"link/q{q}/0", Hop(f"q{q}", 0, attempt=attempt + 1))
            deadline = loop.time() + 60
            while len(record.chains_done) < QUIET and loop.time() < deadline:
                await asyncio.sleep(0.01)
            stop.set()
            answers = [await system.ask("hub/all", Question(f"q{q}"), timeout=10) for q in range(QUIET)]
            assert answers == [f"q{q}" for q in range(QUIET)]
            for i in range(BUSY):
                await system.ask(f"counter/busy/{i}", "ping", timeout=10)
            return monkey.kills + hub_monkey.kills, loop.moved

    with asyncio.Runner(loop_factory=LaneLoop) as runner:
        kills, moved = runner.run(asyncio.wait_for(run(), 180))  # a lost step shows as a wait that never ends
    assert not record.broken, record.broken[:5]
    assert not errors, errors[:3]
    assert len(record.chains_done) == QUIET, record.chains_done
    assert {address.split("/")[0] for address in kills} >= {"busy", "counter", "hub"}  # the monkey reached them
    assert moved > 0  # quiet tenants' questions moved the hub's step from the line to the lane
