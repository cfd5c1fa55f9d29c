"""Coalescing: a newer snapshot replaces a waiting one with the same key, so the actor skips the stale backlog."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from lessor.mailbox import Actor, ActorSystem


@dataclass(frozen=True)
class Snapshot:
    name: str
    version: int


class Watcher(Actor):
    """Handles "hold" by waiting for the gate, so that messages pile up behind it."""

    def __init__(self, seen: list[Any], entered: asyncio.Event, gate: asyncio.Event) -> None:
        self.seen, self.entered, self.gate = seen, entered, gate

    async def receive(self, message: Any) -> None:
        self.seen.append(message)
        if message == "hold":
            self.entered.set()
            await self.gate.wait()


async def handled_after_backlog(sends: Sequence[tuple[Any, str | None]]) -> list[Any]:
    """What the actor handles when `sends` (message, coalesce key) pile up behind a blocked message."""
    seen: list[Any] = []
    entered, gate = asyncio.Event(), asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("watcher", lambda _: Watcher(seen, entered, gate))
        system.tell("watcher/1", "hold")
        await entered.wait()
        for message, key in sends:
            system.tell("watcher/1", message, coalesce=key)
        system.tell("watcher/1", "end")
        gate.set()
        await system.ask("watcher/1", "sync")
    return seen[1:-2]


async def test_only_the_newest_snapshot_is_handled() -> None:
    sends = [(Snapshot("e1", v), "e1") for v in range(1, 6)]
    assert await handled_after_backlog(sends) == [Snapshot("e1", 5)]


async def test_different_keys_do_not_replace_each_other() -> None:
    sends = [(Snapshot("e1", 1), "e1"), (Snapshot("e2", 1), "e2"), (Snapshot("e1", 2), "e1")]
    assert await handled_after_backlog(sends) == [Snapshot("e1", 2), Snapshot("e2", 1)]


async def test_the_replacement_takes_the_place_of_the_message_it_replaces() -> None:
    sends = [(Snapshot("e1", 1), "e1"), ("other", None), (Snapshot("e1", 2), "e1")]
    assert await handled_after_backlog(sends) == [Snapshot("e1", 2), "other"]


async def test_messages_without_a_key_are_never_coalesced() -> None:
    sends = [(Snapshot("e1", 1), None), (Snapshot("e1", 2), None)]
    assert await handled_after_backlog(sends) == [Snapshot("e1", 1), Snapshot("e1", 2)]


async def test_a_key_is_free_again_once_its_message_was_handled() -> None:
    seen: list[Any] = []
    async with ActorSystem(registry=None) as system:
        system.register("watcher", lambda _: Watcher(seen, asyncio.Event(), asyncio.Event()))
        system.tell("watcher/1", Snapshot("e1", 1), coalesce="e1")
        await system.ask("watcher/1", "sync")
        system.tell("watcher/1", Snapshot("e1", 2), coalesce="e1")
        await system.ask("watcher/1", "sync")
    assert seen == [Snapshot("e1", 1), "sync", Snapshot("e1", 2), "sync"]
