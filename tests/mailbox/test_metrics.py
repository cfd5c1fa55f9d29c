"""Prometheus metrics on an injected registry: depth, handled, handling time, restarts, dead letters."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from lessor.mailbox import Actor, ActorSystem, Supervision


@dataclass(frozen=True)
class Ping:
    pass


@dataclass(frozen=True)
class Boom:
    pass


class Meter(Actor):
    def __init__(self, entered: asyncio.Event, gate: asyncio.Event) -> None:
        self.entered, self.gate = entered, gate

    async def receive(self, message: Any) -> None:
        if isinstance(message, Boom):
            raise ValueError("boom")
        if message == "hold":
            self.entered.set()
            await self.gate.wait()


async def test_metrics_describe_what_the_actors_did() -> None:
    registry = CollectorRegistry()
    entered, gate = asyncio.Event(), asyncio.Event()
    async with ActorSystem(registry=registry) as system:
        system.register("meter", lambda _: Meter(entered, gate), supervision=Supervision(backoff=0.001))
        await system.ask("meter/1", Ping())
        await system.ask("meter/1", Ping())
        with pytest.raises(ValueError):
            await system.ask("meter/1", Boom())
        system.tell("nowhere/1", Ping())
        system.tell("meter/2", "hold")
        await entered.wait()
        system.tell("meter/2", Ping())
        system.tell("meter/2", Ping())

        def sample(name: str, **labels: str) -> float | None:
            return registry.get_sample_value(name, labels)

        assert sample("lessor_actors", kind="meter") == 2
        assert sample("lessor_mailbox_depth", kind="meter") == 2
        assert sample("lessor_messages_handled_total", kind="meter", message_type="Ping", outcome="ok") == 2
        assert sample("lessor_messages_handled_total", kind="meter", message_type="Boom", outcome="error") == 1
        assert sample("lessor_message_handling_seconds_count", kind="meter", message_type="Ping") == 2
        assert sample("lessor_actor_restarts_total", kind="meter", reason="crash") == 1
        assert sample("lessor_dead_letters_total", kind="", reason="unregistered") == 1
        assert b"# TYPE lessor_message_handling_seconds histogram" in generate_latest(registry)
        gate.set()


async def test_each_system_can_have_its_own_registry_and_gives_it_back_when_done() -> None:
    registry = CollectorRegistry()
    async with ActorSystem(registry=registry), ActorSystem(registry=CollectorRegistry()):
        pass
    async with ActorSystem(registry=registry):  # the first system unregistered itself
        pass
