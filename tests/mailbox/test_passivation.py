"""Passivation: idle actors leave memory and come back, state rebuilt, on their next message or timer."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

from prometheus_client import CollectorRegistry

from lessor.mailbox import Actor, ActorSystem


@dataclass(frozen=True)
class Put:
    value: str


@dataclass(frozen=True)
class Get:
    pass


@dataclass(frozen=True)
class Arm:
    delay: float


@dataclass(frozen=True)
class Expired:
    pass


class Sleeper(Actor):
    def __init__(self, store: dict[str, str], log: list[str], gone: asyncio.Event, woke: asyncio.Event) -> None:
        self.store, self.log, self.gone, self.woke = store, log, gone, woke

    async def started(self) -> None:
        self.log.append("started")
        self.value = self.store.get(self.address)

    async def receive(self, message: Any) -> Any:
        self.log.append(type(message).__name__)
        if isinstance(message, Put):
            self.value = self.store[self.address] = message.value
        elif isinstance(message, Arm):
            self.schedule("expiry", Expired(), delay=message.delay)
        elif isinstance(message, Expired):
            self.woke.set()
        return self.value

    async def stopping(self) -> None:
        self.log.append("stopping")
        self.gone.set()


class Fixture:
    def __init__(self, system: ActorSystem) -> None:
        self.store: dict[str, str] = {}
        self.log: list[str] = []
        self.gone, self.woke = asyncio.Event(), asyncio.Event()
        system.register(
            "sleeper",
            lambda _: Sleeper(self.store, self.log, self.gone, self.woke),
            passivate_after=0.002,
        )


async def test_an_idle_actor_is_passivated_and_reactivated_by_its_next_message() -> None:
    registry = CollectorRegistry()
    async with ActorSystem(registry=registry) as system:
        f = Fixture(system)
        await system.ask("sleeper/1", Put("kept"))
        await f.gone.wait()
        assert system.live() == []
        assert registry.get_sample_value("lessor_actor_passivations_total", {"kind": "sleeper"}) == 1
        assert await system.ask("sleeper/1", Get()) == "kept"
        assert f.log == ["started", "Put", "stopping", "started", "Get"]
        assert system.dead_letters.total == 0


async def test_a_timer_outlives_passivation_and_wakes_the_actor() -> None:
    async with ActorSystem(registry=None) as system:
        f = Fixture(system)
        system.tell("sleeper/1", Arm(0.02))  # passivated after 2 ms, the timer fires at 20 ms
        await f.woke.wait()
        assert f.log == ["started", "Arm", "stopping", "started", "Expired"]
