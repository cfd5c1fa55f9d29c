"""Asks to a kind registered with `ask_timeout`: its own deadline, or none (math.inf) for an actor that is
only ever busy (the topology), whose askers must wait rather than fail, restart and ask again."""

from __future__ import annotations

import asyncio
import math
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lessor.mailbox import Actor, ActorKilled, ActorSystem, AskTimeout, Supervision
from lessor.mailbox import system as system_module


class Gated(Actor):
    """Answers each question once the gate opens; says when a question has arrived."""

    def __init__(self, entered: asyncio.Event, gate: asyncio.Event) -> None:
        self.entered, self.gate = entered, gate

    async def receive(self, message: Any) -> Any:
        self.entered.set()
        await self.gate.wait()
        return message


class Asker(Actor):
    """Asks `busy/1` for each message, counting its own incarnations (a restart would show)."""

    incarnations = 0

    async def started(self) -> None:
        Asker.incarnations += 1

    async def receive(self, message: Any) -> Any:
        return await self.ask("busy/1", message)


async def test_a_kind_without_a_deadline_is_waited_for_and_its_asker_is_not_restarted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(system_module, "DEFAULT_ASK_TIMEOUT", 0.05)  # what counts as slow, shortened for the test
    registry = CollectorRegistry()
    entered, gate = asyncio.Event(), asyncio.Event()
    Asker.incarnations = 0
    async with ActorSystem(registry=registry) as system:
        system.register("busy", lambda _: Gated(entered, gate), ask_timeout=math.inf)
        system.register("asker", lambda _: Asker(), supervision=Supervision(backoff=0.001))
        answers = [asyncio.create_task(system.ask("asker/1", n, timeout=math.inf)) for n in range(3)]
        await entered.wait()
        await asyncio.sleep(0.3)  # far past what counts as slow: nobody has given up
        assert not any(answer.done() for answer in answers)
        gate.set()
        assert await asyncio.gather(*answers) == [0, 1, 2]
        assert Asker.incarnations == 1
        assert registry.get_sample_value("lessor_mailbox_slow_asks_total", {"kind": "busy"}) >= 1
        assert registry.get_sample_value("lessor_actor_restarts_total", {"kind": "asker", "reason": "crash"}) is None


async def test_an_ask_without_a_deadline_still_ends_when_the_answerer_is_killed() -> None:
    entered, gate = asyncio.Event(), asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("busy", lambda _: Gated(entered, gate), ask_timeout=math.inf,
                        supervision=Supervision(backoff=0.001))
        asked = asyncio.create_task(system.ask("busy/1", "question"))
        await entered.wait()
        system.kill("busy/1")
        with pytest.raises(ActorKilled):
            await asked


async def test_a_kinds_ask_timeout_applies_unless_the_asker_gives_one() -> None:
    entered, gate = asyncio.Event(), asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("busy", lambda _: Gated(entered, gate), ask_timeout=0.05)
        with pytest.raises(AskTimeout) as raised:
            await system.ask("busy/1", "first")
        assert raised.value.timeout == 0.05
        later = asyncio.create_task(system.ask("busy/1", "second", timeout=math.inf))
        await asyncio.sleep(0.2)
        assert not later.done()
        gate.set()
        assert await later == "second"
        with pytest.raises(ValueError):
            system.register("never", lambda _: Gated(entered, gate), ask_timeout=0)
