"""Delivery: per-sender FIFO, ask replies and timeouts, dead letters for unknown addresses."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, AskTimeout, DeadLetter, Undeliverable


@dataclass(frozen=True)
class Note:
    sender: str
    seq: int


@dataclass(frozen=True)
class Chat:
    target: str
    count: int


@dataclass(frozen=True)
class Double:
    n: int


@dataclass(frozen=True)
class Wait:
    gate: asyncio.Event


@dataclass(frozen=True)
class AskMyself:
    pass


class Sink(Actor):
    def __init__(self, notes: list[Note], expected: int, done: asyncio.Event) -> None:
        self.notes, self.expected, self.done = notes, expected, done

    async def receive(self, message: Any) -> None:
        self.notes.append(message)
        if len(self.notes) == self.expected:
            self.done.set()


class Chatter(Actor):
    async def receive(self, message: Any) -> None:
        for seq in range(message.count):
            self.tell(message.target, Note(self.address, seq))
            if seq % 3 == 0:
                await asyncio.sleep(0)  # let the other senders interleave


class Calculator(Actor):
    async def receive(self, message: Any) -> Any:
        if isinstance(message, Wait):
            await message.gate.wait()
            return "waited"
        if isinstance(message, AskMyself):
            return await self.ask(self.address, Double(1))
        return message.n * 2


async def test_each_senders_messages_arrive_in_the_order_sent() -> None:
    notes: list[Note] = []
    done = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("sink", lambda _: Sink(notes, 4 * 40, done))
        system.register("chatter", lambda _: Chatter())
        for name in ("a", "b", "c"):
            system.tell(f"chatter/{name}", Chat("sink/1", 40))
        for seq in range(40):
            system.tell("sink/1", Note("outside", seq))
            await asyncio.sleep(0)
        await done.wait()
    senders = {note.sender for note in notes}
    assert senders == {"chatter/a", "chatter/b", "chatter/c", "outside"}
    for sender in senders:
        assert [n.seq for n in notes if n.sender == sender] == list(range(40))
    # The senders really did interleave, so the order was the mailbox's doing.
    assert [n.sender for n in notes[:40]] != [notes[0].sender] * 40


async def test_ask_returns_the_handlers_reply() -> None:
    async with ActorSystem(registry=None) as system:
        system.register("calc", lambda _: Calculator())
        assert await system.ask("calc/1", Double(21)) == 42


async def test_ask_times_out_and_the_actor_carries_on() -> None:
    gate = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("calc", lambda _: Calculator())
        with pytest.raises(AskTimeout) as caught:
            await system.ask("calc/1", Wait(gate), timeout=0.01)
        assert isinstance(caught.value, TimeoutError)
        assert caught.value.address == "calc/1"
        gate.set()
        assert await system.ask("calc/1", Double(2)) == 4


async def test_ask_to_an_unregistered_kind_fails_at_once_and_is_a_dead_letter() -> None:
    async with ActorSystem(registry=None) as system:
        with pytest.raises(Undeliverable, match="unregistered"):
            await system.ask("nobody/1", Double(1), timeout=60)
        system.tell("nobody/2", Double(2))
        assert system.dead_letters.total == 2
        assert list(system.dead_letters.recent) == [
            DeadLetter("nobody/1", Double(1), "unregistered", None),
            DeadLetter("nobody/2", Double(2), "unregistered", None),
        ]


async def test_an_actor_asking_itself_gets_an_error_not_a_deadlock() -> None:
    async with ActorSystem(registry=None) as system:
        system.register("calc", lambda _: Calculator())
        with pytest.raises(ValueError, match="cannot ask itself"):
            await system.ask("calc/1", AskMyself())


async def test_sending_outside_the_block_is_an_error() -> None:
    system = ActorSystem(registry=None)
    system.register("calc", lambda _: Calculator())
    with pytest.raises(RuntimeError, match="not running"):
        system.tell("calc/1", Double(1))


def test_a_dead_letter_is_logged_cut_to_a_line_with_the_size_of_the_rest(caplog: pytest.LogCaptureFixture) -> None:
    """A message may carry a whole object: its dead letter was once a 244 KB log line."""
    from lessor.mailbox.dead_letters import LOGGED_CHARS, DeadLetters

    letters = DeadLetters()
    with caplog.at_level("WARNING", logger="lessor.mailbox.dead_letters"):
        letters.add(DeadLetter("lease/lab/l1", {"object": "x" * 250_000}, "stopped", None))
    (line,) = [r.getMessage() for r in caplog.records]
    assert len(line) < LOGGED_CHARS + 200 and "more characters" in line and "lease/lab/l1" in line
    assert letters.recent[-1].message == {"object": "x" * 250_000}  # kept whole for inspection
