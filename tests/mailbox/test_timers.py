"""Timers: keyed messages to self after a delay or at a time; cancellable; re-arming a key replaces it."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem


@dataclass(frozen=True)
class Arm:
    key: str
    message: Any
    delay: float | None = None
    at: datetime | None = None


@dataclass(frozen=True)
class Cancel:
    key: str


@dataclass(frozen=True)
class Last:
    """Sent by the last timer of a test: everything due earlier has been delivered."""


class Clock(Actor):
    def __init__(self, seen: list[Any], done: asyncio.Event) -> None:
        self.seen, self.done = seen, done

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Arm):
            self.schedule(message.key, message.message, delay=message.delay, at=message.at)
        elif isinstance(message, Cancel):
            return self.cancel(message.key)
        elif message == "arm-and-stop":
            self.schedule("late", "too-late", delay=0.005)
            self.stop()
        else:
            self.seen.append(message)
            if isinstance(message, Last):
                self.done.set()
        return None


async def run(*steps: Any) -> list[Any]:
    """Send `steps` to one clock actor (asks, so each is done before the next), return what its timers delivered."""
    seen: list[Any] = []
    done = asyncio.Event()
    replies = []
    async with ActorSystem(registry=None) as system:
        system.register("clock", lambda _: Clock(seen, done))
        for step in steps:
            replies.append(await system.ask("clock/1", step))
        await done.wait()
    return [r for r in replies if r is not None] + seen


async def test_a_timer_fires_after_its_delay_and_at_its_time() -> None:
    at = datetime.now(UTC) + timedelta(milliseconds=2)
    delivered = await run(Arm("a", "ping", delay=0.001), Arm("b", "pong", at=at), Arm("z", Last(), delay=0.01))
    assert sorted(delivered[:2]) == ["ping", "pong"] and delivered[2:] == [Last()]


async def test_a_cancelled_timer_does_not_fire() -> None:
    assert await run(Arm("a", "ping", delay=0.005), Cancel("a"), Cancel("a"), Arm("z", Last(), delay=0.01)) == [
        True,
        False,
        Last(),
    ]


async def test_rearming_a_key_replaces_the_pending_timer() -> None:
    assert await run(Arm("a", "first", delay=0.002), Arm("a", "second", delay=0.005), Arm("z", Last(), delay=0.01)) == [
        "second",
        Last(),
    ]


async def test_a_stopped_actors_timers_are_cancelled() -> None:
    seen: list[Any] = []
    done = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("clock", lambda _: Clock(seen, done))
        system.tell("clock/1", "arm-and-stop")  # its timer is due in 5 ms
        system.tell("clock/2", Arm("z", Last(), delay=0.02))
        await done.wait()
        assert "clock/1" not in system.live()  # no timer came to wake it
    assert seen == [Last()]


async def test_a_time_without_a_zone_is_refused() -> None:
    with pytest.raises(ValueError):
        await run(Arm("a", "ping", at=datetime.now()))
