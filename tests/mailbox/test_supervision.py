"""Supervision: restart with a state rebuild, no replay, backoff, and escalation past the restart intensity."""

from __future__ import annotations

import asyncio
import random
from collections import deque
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lessor.mailbox import Actor, ActorSystem, Supervision, Undeliverable


@dataclass(frozen=True)
class Add:
    n: int


@dataclass(frozen=True)
class Boom:
    pass


@dataclass(frozen=True)
class Get:
    pass


class Tally(Actor):
    """Keeps a running total; `store` is its source of truth, `scratch` is state that only lives in memory."""

    def __init__(self, store: dict[str, int], events: list[str]) -> None:
        self.store, self.events = store, events

    async def started(self) -> None:
        self.events.append("started")
        self.total = self.store.get(self.address, 0)
        self.scratch: list[int] = []

    async def receive(self, message: Any) -> Any:
        self.events.append(type(message).__name__)
        if isinstance(message, Boom):
            raise ValueError("boom")
        if isinstance(message, Add):
            self.total += message.n
            self.scratch.append(message.n)
            self.store[self.address] = self.total
        return (self.total, self.scratch)


FAST = Supervision(max_restarts=3, within=60, backoff=0.001, max_backoff=0.002)


async def test_a_crashed_actor_is_restarted_rebuilds_its_state_and_the_failed_message_is_not_replayed() -> None:
    store: dict[str, int] = {}
    events: list[str] = []
    async with ActorSystem(registry=None) as system:
        system.register("tally", lambda _: Tally(store, events), supervision=FAST)
        system.tell("tally/1", Add(1))
        system.tell("tally/1", Boom())
        system.tell("tally/1", Add(2))
        total, scratch = await system.ask("tally/1", Get())
    assert total == 3  # rebuilt from the store, then the message after the crash
    assert scratch == [2]  # what lived only in memory is gone with the old incarnation
    assert events == ["started", "Add", "Boom", "started", "Add", "Get"]


async def test_an_asker_gets_the_handlers_exception() -> None:
    async with ActorSystem(registry=None) as system:
        system.register("tally", lambda _: Tally({}, []), supervision=FAST)
        with pytest.raises(ValueError, match="boom"):
            await system.ask("tally/1", Boom())
        assert await system.ask("tally/1", Add(5)) == (5, [5])


async def test_more_restarts_than_the_intensity_allows_stops_the_actor_for_good() -> None:
    escalated: list[tuple[str, BaseException]] = []
    registry = CollectorRegistry()
    async with ActorSystem(registry=registry, on_escalation=lambda a, e: escalated.append((a, e))) as system:
        policy = Supervision(max_restarts=2, within=60, backoff=0.001)
        system.register("tally", lambda _: Tally({}, []), supervision=policy)
        for _ in range(3):
            with pytest.raises(ValueError):
                await system.ask("tally/1", Boom())
        assert [(address, str(error)) for address, error in escalated] == [("tally/1", "boom")]
        assert system.live() == []
        system.tell("tally/1", Add(1))
        with pytest.raises(Undeliverable, match="escalated"):
            await system.ask("tally/1", Get())
        assert [d.reason for d in system.dead_letters.recent] == ["escalated", "escalated"]
        labels = {"kind": "tally"}
        assert registry.get_sample_value("lessor_actor_escalations_total", labels) == 1
        assert registry.get_sample_value("lessor_actor_restarts_total", {**labels, "reason": "crash"}) == 2


async def test_an_actor_that_cannot_start_is_escalated_rather_than_retried_forever() -> None:
    class Broken(Actor):
        async def started(self) -> None:
            raise RuntimeError("no source of truth")

    escalated = asyncio.Event()
    async with ActorSystem(registry=None, on_escalation=lambda a, e: escalated.set()) as system:
        system.register("broken", lambda _: Broken(), supervision=Supervision(max_restarts=2, backoff=0.001))
        with pytest.raises(Undeliverable, match="escalated"):
            await system.ask("broken/1", Get())
        assert escalated.is_set()


def test_backoff_doubles_up_to_the_cap_and_jitter_only_shortens_it() -> None:
    policy = Supervision(backoff=0.1, max_backoff=1.0, jitter=0.25)
    rng = random.Random(7)
    for restarts, ceiling in [(1, 0.1), (2, 0.2), (3, 0.4), (4, 0.8), (5, 1.0), (9, 1.0)]:
        for _ in range(50):
            assert ceiling * 0.75 <= policy.delay(restarts, rng) <= ceiling
    exact = Supervision(backoff=0.1, max_backoff=1.0, jitter=0)
    assert [exact.delay(n, rng) for n in (1, 2, 3)] == pytest.approx([0.1, 0.2, 0.4])


def test_restart_intensity_counts_only_failures_within_the_window() -> None:
    policy = Supervision(max_restarts=2, within=10)
    history: deque[float] = deque()
    assert [policy.record(history, t) for t in (0, 1)] == [1, 2]
    assert policy.record(history, 2) is None  # third within 10 s: escalate
    spaced: deque[float] = deque()
    assert [policy.record(spaced, t) for t in (0, 1, 20, 21)] == [1, 2, 1, 2]
