"""Request slots shared out by turns between keys (namespaces), not first come first served.

With one FIFO queue, a namespace that creates 2,000 leases queues thousands of
writes, and another namespace's single lease waits behind all of them. Here each
key waits in its own line and a freed slot goes to the next line in turn, so a
key with one request waits for at most one request of every other busy key.
"""

from __future__ import annotations

import asyncio
from collections import deque


class FairSlots:
    """`size` slots; `acquire(key)` waits in `key`'s line; `release()` hands the slot to the next line in turn."""

    __slots__ = ("_free", "_lines", "_turns")

    def __init__(self, size: int) -> None:
        self._free = size
        self._lines: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()  # keys with waiters, in the order they get the next free slots

    def locked(self) -> bool:
        """Whether `acquire` would wait."""
        return self._free == 0 or bool(self._lines)

    def waiting(self) -> int:
        return sum(len(line) for line in self._lines.values())

    async def acquire(self, key: str) -> None:
        if not self.locked():
            self._free -= 1
            return
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        line = self._lines.get(key)
        if line is None:
            line = self._lines[key] = deque()
            self._turns.append(key)
        line.append(waiter)
        try:
            await waiter
        except asyncio.CancelledError:
            if waiter.done() and not waiter.cancelled():
                self.release()  # handed a slot as it was cancelled: pass it on
            else:
                self._forget(key, waiter)
            raise

    def release(self) -> None:
        while self._turns:
            key = self._turns.popleft()
            line = self._lines[key]
            waiter = line.popleft()
            if line:
                self._turns.append(key)  # its next request waits for one of every other line first
            else:
                del self._lines[key]
            waiter.set_result(None)
            return
        self._free += 1

    def _forget(self, key: str, waiter: asyncio.Future[None]) -> None:
        line = self._lines.get(key)
        if line is None or waiter not in line:
            return
        line.remove(waiter)
        if not line:
            del self._lines[key]
            self._turns.remove(key)
