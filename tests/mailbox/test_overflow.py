"""Bounded mailboxes: a full mailbox refuses the message, the sender gets MailboxFull, the message is a dead letter."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, MailboxFull


class Slow(Actor):
    def __init__(self, seen: list[Any], entered: asyncio.Event, gate: asyncio.Event, ticked: asyncio.Event) -> None:
        self.seen, self.entered, self.gate, self.ticked = seen, entered, gate, ticked

    async def receive(self, message: Any) -> None:
        self.seen.append(message)
        if message == "tick":
            self.ticked.set()
        if message == "hold":
            self.schedule("tick", "tick", delay=0.001)
            self.entered.set()
            await self.gate.wait()


async def test_a_full_mailbox_refuses_tells_and_asks_and_keeps_what_it_accepted() -> None:
    seen: list[Any] = []
    entered, gate, ticked = asyncio.Event(), asyncio.Event(), asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: Slow(seen, entered, gate, ticked), capacity=2)
        system.tell("slow/1", "hold")
        await entered.wait()
        system.tell("slow/1", "a")
        system.tell("slow/1", "b", coalesce="b")
        with pytest.raises(MailboxFull) as caught:
            system.tell("slow/1", "c")
        assert caught.value.capacity == 2
        with pytest.raises(MailboxFull):
            await system.ask("slow/1", "d")
        system.tell("slow/1", "b2", coalesce="b")  # replaces a waiting message: no room needed
        await asyncio.sleep(0.005)  # the actor's own timer comes due while the mailbox is full
        gate.set()
        await ticked.wait()
    assert [(d.message, d.reason) for d in system.dead_letters.recent] == [("c", "mailbox-full"), ("d", "mailbox-full")]
    assert seen == ["hold", "a", "b2", "tick"]
