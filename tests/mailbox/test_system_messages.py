"""System messages (stop, restart) are handled ahead of the user messages already waiting."""

from __future__ import annotations

import asyncio
from typing import Any

from lessor.mailbox import Actor, ActorSystem


class Gated(Actor):
    """Logs its lifecycle; the message "hold" blocks until the gate opens."""

    def __init__(self, log: list[str], entered: asyncio.Event, gate: asyncio.Event, stopped: asyncio.Event) -> None:
        self.log, self.entered, self.gate, self.stopped = log, entered, gate, stopped

    async def started(self) -> None:
        self.log.append("started")

    async def receive(self, message: Any) -> None:
        self.log.append(message)
        if message == "hold":
            self.entered.set()
            await self.gate.wait()
        elif message == "quit":
            self.stop()

    async def stopping(self) -> None:
        self.log.append("stopping")
        self.stopped.set()


class Fixture:
    def __init__(self, system: ActorSystem) -> None:
        self.log: list[str] = []
        self.entered, self.gate, self.stopped = asyncio.Event(), asyncio.Event(), asyncio.Event()
        system.register("gated", lambda _: Gated(self.log, self.entered, self.gate, self.stopped))


async def test_stop_goes_ahead_of_waiting_messages_which_become_dead_letters() -> None:
    async with ActorSystem(registry=None) as system:
        f = Fixture(system)
        for message in ("hold", "a", "b"):
            system.tell("gated/1", message)
        await f.entered.wait()
        system.stop("gated/1")
        f.gate.set()
        await f.stopped.wait()
        assert f.log == ["started", "hold", "stopping"]
        assert [(d.message, d.reason) for d in system.dead_letters.recent] == [("a", "stopped"), ("b", "stopped")]
        assert system.live() == []
        # The address is free again: the next message makes a new incarnation.
        f.stopped.clear()
        system.tell("gated/1", "c")
        system.tell("gated/1", "quit")
        await f.stopped.wait()
        assert f.log[3:] == ["started", "c", "quit", "stopping"]


async def test_restart_goes_ahead_of_waiting_messages_which_are_kept() -> None:
    async with ActorSystem(registry=None) as system:
        f = Fixture(system)
        for message in ("hold", "a", "b"):
            system.tell("gated/1", message)
        await f.entered.wait()
        system.restart("gated/1")
        f.gate.set()
        await f.stopped.wait()
        f.stopped.clear()
        system.tell("gated/1", "quit")
        await f.stopped.wait()
        assert f.log == ["started", "hold", "stopping", "started", "a", "b", "quit", "stopping"]
        assert system.dead_letters.total == 0


async def test_an_actor_stopping_itself_finishes_the_message_then_stops() -> None:
    async with ActorSystem(registry=None) as system:
        f = Fixture(system)
        for message in ("quit", "after"):
            system.tell("gated/1", message)
        await f.stopped.wait()
        assert f.log == ["started", "quit", "stopping"]
        assert [d.message for d in system.dead_letters.recent] == ["after"]
