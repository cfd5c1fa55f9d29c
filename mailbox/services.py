"""What a cell and its actor use of the actor system: a small interface, so that neither reaches into the system.

`ActorSystem` hands each cell one `SystemServices`; a test may hand a cell anything shaped as `Services`. The
counters and flags are plain attributes (`at_work` changes at every task's start and end), the calls bound
methods of the system: the hot paths cost what they cost before.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
from collections.abc import Callable, Coroutine, Hashable
from typing import TYPE_CHECKING, Any, Protocol

from .envelope import Envelope
from .storms import FailureLog
from .timers import Timers
from .tracing import Cause, Tracing
from .turns import Turns

if TYPE_CHECKING:
    from .cell import Cell

Spawn = Callable[[Coroutine[Any, Any, None], str, contextvars.Context], "asyncio.Task[None]"]
Tell = Callable[..., None]  # (address, message, sender, key, links=(), bounded=True, parent=None)
Ask = Callable[[str, Any, "str | None", "float | None"], Coroutine[Any, Any, Any]]
Schedule = Callable[[str, Hashable, Any, float, "Cause | None"], None]


class Services(Protocol):
    """The system as its cells and actors see it."""

    turns: Turns  # tenanted actors' steps take turns by tenant
    tracing: Tracing
    timers: Timers
    rng: random.Random  # restart backoff's jitter
    failure_log: FailureLog
    closed: set[str]  # addresses escalated: stopped for good
    at_work: int  # cells whose task is running or in line for a start slot (`ActorSystem.busy`)
    closing: bool  # the system is being left: every actor stops
    spawn: Spawn  # (coroutine, address, context): the actor's task, in the system's task group
    tell: Tell
    ask: Ask  # (address, message, sender, timeout)
    schedule: Schedule  # (address, key, message, delay, on_behalf_of)
    forget: Callable[[Cell], None]  # the cell left the system
    dead_letter: Callable[[str, Envelope, str], None]  # (address, envelope, reason)
    escalated: Callable[[str, BaseException], None]  # an actor exceeded its restart intensity


class SystemServices:
    """`Services` as `ActorSystem` gives them."""

    __slots__ = ("turns", "tracing", "timers", "rng", "failure_log", "closed", "at_work", "closing", "spawn",
                 "tell", "ask", "schedule", "forget", "dead_letter", "escalated")

    def __init__(self, *, turns: Turns, tracing: Tracing, timers: Timers, failure_log: FailureLog, spawn: Spawn,
                 tell: Tell, ask: Ask, schedule: Schedule, forget: Callable[[Cell], None],
                 dead_letter: Callable[[str, Envelope, str], None],
                 escalated: Callable[[str, BaseException], None]) -> None:
        self.turns = turns
        self.tracing = tracing
        self.timers = timers
        self.rng = random.Random()
        self.failure_log = failure_log
        self.closed: set[str] = set()
        self.at_work = 0
        self.closing = False
        self.spawn = spawn
        self.tell = tell
        self.ask = ask
        self.schedule = schedule
        self.forget = forget
        self.dead_letter = dead_letter
        self.escalated = escalated

