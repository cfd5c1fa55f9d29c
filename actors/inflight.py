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
    """Commit writes by object key, from sending until they settle."""

    __slots__ = ("_running", "_written")

    def __init__(self) -> None:
        self._running: dict[Hashable, set[asyncio.Task[Any]]] = {}
        self._written: dict[Hashable, Mapping[str, Any]] = {}

    async def run(self, key: Hashable, write: Callable[[], Awaitable[T]]) -> T:
        """Send `write()` as a task of its own: cancelling the caller does not cancel the write."""
        task: asyncio.Task[T] = asyncio.ensure_future(write())
        self._running.setdefault(key, set()).add(task)
        task.add_done_callback(lambda done: self._settle(key, done))
        result = await asyncio.shield(task)
        self._written.pop(key, None)  # the sender saw its answer: nothing to hand on
        return result

    def _settle(self, key: Hashable, task: asyncio.Task[Any]) -> None:
        running = self._running.get(key)
        if running is not None:
            running.discard(task)
            if not running:
                del self._running[key]
        if not task.cancelled() and task.exception() is None and isinstance(task.result(), Mapping):
            self._written[key] = task.result()  # read once by the next incarnation, then dropped

    def idle(self) -> bool:
        """No commit in flight and none waiting to be read: nothing any actor sent may still land unseen."""
        return not self._running and not self._written

    async def settled(self, key: Hashable) -> Mapping[str, Any] | None:
        """Wait until no write of `key` is in flight; the object the last settled one returned, if any
        (and forget it: it is for the incarnation that starts now)."""
        while running := self._running.get(key):
            await asyncio.wait(set(running))
        return self._written.pop(key, None)
