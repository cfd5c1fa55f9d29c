"""Structured concurrency: leaving the block stops every actor and leaves no task behind."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import pytest

from lessor.mailbox import Actor, ActorSystem, Supervision


class Polite(Actor):
    def __init__(self, stopped: list[str], entered: asyncio.Event) -> None:
        self.stopped, self.entered = stopped, entered

    async def receive(self, message: Any) -> None:
        if message == "hold":
            self.entered.set()
            await asyncio.sleep(0.005)
        elif message == "crash":
            raise RuntimeError("crash")

    async def stopping(self) -> None:
        self.stopped.append(self.address)
        self.tell("polite/elsewhere", "goodbye")


class Stubborn(Actor):
    async def receive(self, message: Any) -> None:
        pass

    async def stopping(self) -> None:
        await asyncio.Event().wait()


def actor_tasks() -> list[asyncio.Task[Any]]:
    return [t for t in asyncio.all_tasks() if t.get_name().startswith(("polite/", "stubborn/"))]


async def test_leaving_the_block_stops_every_actor_and_drops_what_was_waiting() -> None:
    stopped: list[str] = []
    entered = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        slow_restarts = Supervision(backoff=10, max_backoff=10)
        system.register("polite", lambda _: Polite(stopped, entered), supervision=slow_restarts)
        system.tell("polite/idle", "hi")
        system.tell("polite/crashed", "crash")  # waiting out a 10 s backoff when the block ends
        system.tell("polite/busy", "hold")
        system.tell("polite/busy", "later")
        await entered.wait()
    assert sorted(stopped) == ["polite/busy", "polite/idle"]
    assert sorted((d.address, d.message, d.reason) for d in system.dead_letters.recent) == [
        ("polite/busy", "later", "shutdown"),
        ("polite/elsewhere", "goodbye", "shutdown"),
        ("polite/elsewhere", "goodbye", "shutdown"),
    ]
    assert system.live() == []
    assert actor_tasks() == []


async def test_a_stopping_hook_that_hangs_is_cancelled_after_the_timeout() -> None:
    async with ActorSystem(registry=None, shutdown_timeout=0.01) as system:
        system.register("stubborn", lambda _: Stubborn())
        system.tell("stubborn/1", "hi")
    assert system.live() == []
    assert actor_tasks() == []


async def test_an_error_in_the_block_propagates_as_itself() -> None:
    with pytest.raises(KeyError):
        async with ActorSystem(registry=None) as system:
            system.register("polite", lambda _: Polite([], asyncio.Event()))
            system.tell("polite/1", "hi")
            raise KeyError("app bug")


async def test_cancelled_from_outside_the_actors_still_stop_cleanly() -> None:
    stopped: list[str] = []
    entered = asyncio.Event()
    with anyio.move_on_after(0.01) as scope:
        async with ActorSystem(registry=None) as system:
            system.register("polite", lambda _: Polite(stopped, entered))
            system.tell("polite/1", "hi")
            await anyio.sleep(60)
    assert scope.cancelled_caught
    assert stopped == ["polite/1"]
    assert actor_tasks() == []


class LateAsker(Actor):
    """Asks a peer after the shutdown began: the peer is gone by then."""

    def __init__(self, entered: asyncio.Event) -> None:
        self.entered = entered

    async def receive(self, message: Any) -> Any:
        if message == "ask later":
            self.entered.set()
            await asyncio.sleep(0.02)
            return await self.ask("peer/1", "ping", timeout=1)
        return "pong"


async def test_an_ask_cut_off_by_the_shutdown_is_not_logged_as_a_failure(caplog: pytest.LogCaptureFixture) -> None:
    entered = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("asker", lambda _: LateAsker(entered))
        system.register("peer", lambda _: LateAsker(entered))
        assert await system.ask("peer/1", "ping") == "pong"
        system.tell("asker/1", "ask later")
        await entered.wait()
    assert system.dead_letters.by_reason["shutdown"] >= 1, "the late ask did meet the shutdown"
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
