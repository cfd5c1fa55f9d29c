"""`Actor.failed`: a failing incarnation may deal with its failure itself and be kept, instead of crash-looping.

Failures are counted in a row per `failure_key` (what the actor works on);
the default hook restarts as before.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, Supervision


@dataclass(frozen=True)
class Poison:
    """Makes the actor fail while it works on `version`."""

    version: int


@dataclass(frozen=True)
class Get:
    pass


FAST = Supervision(max_restarts=100, within=60, backoff=0.001, max_backoff=0.002)


class Worker(Actor):
    """Works on one input version at a time; gives up on a version after `patience` failures in a row."""

    def __init__(self, log: list[tuple[str, Any]], patience: int | None) -> None:
        self.log, self.patience = log, patience
        self.version = 0
        self.given_up: int | None = None

    async def started(self) -> None:
        self.log.append(("started", None))

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Poison):
            self.version = message.version
            raise OverflowError(f"version {message.version} overflows")
        return self.given_up

    def failure_key(self) -> Any:
        return self.version

    async def failed(self, error: Exception, attempts: int) -> bool:
        self.log.append(("failed", (self.version, attempts)))
        if self.patience is None or attempts < self.patience:
            return False
        self.given_up = self.version
        return True


async def test_failures_in_a_row_on_one_key_are_counted_and_the_actor_resumes_when_it_gives_up() -> None:
    log: list[tuple[str, Any]] = []
    async with ActorSystem(registry=None) as system:
        system.register("w", lambda _: Worker(log, patience=3), supervision=FAST)
        for _ in range(3):
            system.tell("w/1", Poison(7))
        assert await system.ask("w/1", Get()) == 7  # the same incarnation, which gave up on version 7
        with pytest.raises(OverflowError):  # an asker still gets the error
            await system.ask("w/1", Poison(8))
        assert await system.ask("w/1", Get()) is None  # version 8 failed once: a fresh incarnation
    assert [entry for entry in log if entry[0] == "failed"] == [
        ("failed", (7, 1)), ("failed", (7, 2)), ("failed", (7, 3)), ("failed", (8, 1))]
    assert [entry[0] for entry in log].count("started") == 4  # after failures 7/1, 7/2 and 8/1; not after 7/3


async def test_by_default_every_failure_restarts_as_before() -> None:
    log: list[tuple[str, Any]] = []
    async with ActorSystem(registry=None) as system:
        system.register("w", lambda _: Worker(log, patience=None), supervision=FAST)
        for _ in range(4):
            system.tell("w/1", Poison(7))
        assert await system.ask("w/1", Get()) is None
    assert [entry[0] for entry in log].count("started") == 5
    assert ("failed", (7, 4)) in log


class Restarter(Actor):
    def __init__(self, log: list[str]) -> None:
        self.log = log

    async def started(self) -> None:
        self.log.append("started")

    async def receive(self, message: Any) -> Any:
        if message == "again":
            self.restart()
        return len(self.log)


async def test_an_actor_may_ask_for_its_own_restart() -> None:
    log: list[str] = []
    async with ActorSystem(registry=None) as system:
        system.register("r", lambda _: Restarter(log), supervision=FAST)
        await system.ask("r/1", "once")
        system.tell("r/1", "again")
        assert await system.ask("r/1", "after") == 2
    assert log == ["started", "started"]
