"""Commit writes outlive the actor incarnation that sent them.

A commit point (an exporter's `status.leaseRef`, a pool's handle binding) is
one compare-and-set write. If the actor that sent it is killed while it is in
flight, cancelling the request does not unsend it: the API server may still
apply it a moment later. A next incarnation that decided from the state before
that write lands would decide twice (a lease named by two exporters). So a
commit runs as its own task, shielded from the sender's cancellation and kept
here by object until it settles; an actor's next incarnation waits for the
writes still in flight for its object (`settled`) and starts from what the last
one returned (`last_written`), never from a guess.

This belongs to the API side of the actors, as a client's request queue does:
an actor reads only the writes of its own object, and only when it starts.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Hashable, Mapping
from typing import Any, TypeVar

T = TypeVar("T")


class InFlight:
    """Commit writes by object key, from sending until they settle; and what each names (`naming`)."""

    __slots__ = ("_running", "_written", "_naming")

    def __init__(self) -> None:
        self._running: dict[Hashable, set[asyncio.Task[Any]]] = {}
        self._written: dict[Hashable, tuple[Mapping[str, Any], Hashable | None]] = {}
        self._naming: dict[Hashable, int] = {}  # writes running or unread, by what they name

    async def run(self, key: Hashable, write: Callable[[], Awaitable[T]], *, naming: Hashable | None = None) -> T:
        """Send `write()` as a task of its own: cancelling the caller does not cancel the write. `naming` is the
        object the write decides for (the lease an exporter's commit names): see `may_name`."""
        task: asyncio.Task[T] = asyncio.ensure_future(write())
        self._running.setdefault(key, set()).add(task)
        self._count(naming, +1)
        task.add_done_callback(lambda done: self._settle(key, done, naming))
        result = await asyncio.shield(task)
        self._forget(key)  # the sender saw its answer: nothing to hand on
        return result

    def _settle(self, key: Hashable, task: asyncio.Task[Any], naming: Hashable | None) -> None:
        running = self._running.get(key)
        if running is not None:
            running.discard(task)
            if not running:
                del self._running[key]
        if not task.cancelled() and task.exception() is None and isinstance(task.result(), Mapping):
            self._forget(key)  # an older unread answer is superseded by this one
            self._written[key] = (task.result(), naming)  # read once by the next incarnation, then dropped
        else:
            self._count(naming, -1)

    def _forget(self, key: Hashable) -> Mapping[str, Any] | None:
        written = self._written.pop(key, None)
        if written is None:
            return None
        self._count(written[1], -1)
        return written[0]

    def _count(self, naming: Hashable | None, step: int) -> None:
        if naming is None:
            return
        count = self._naming.get(naming, 0) + step
        if count > 0:
            self._naming[naming] = count
        else:
            self._naming.pop(naming, None)

    def may_name(self, naming: Hashable) -> bool:
        """Whether a commit naming `naming` is in flight, or landed unread by its sender: only then can an
        incarnation of that object (a lease) that starts now be named somewhere it does not know of. In a
        storm some commit is nearly always in flight; asking about one object keeps a new lease from asking
        every candidate where it stands (two messages per candidate) for commits that are not its own."""
        return naming in self._naming

    async def settled(self, key: Hashable) -> Mapping[str, Any] | None:
        """Wait until no write of `key` is in flight; the object the last settled one returned, if any
        (and forget it: it is for the incarnation that starts now)."""
        while running := self._running.get(key):
            await asyncio.wait(set(running))
        return self._forget(key)
