"""Request slots shared out by turns between keys (namespaces), not first come first served.

With one FIFO queue, a namespace that creates 2,000 leases queues thousands of
writes, and another namespace's single lease waits behind all of them. Here each
key waits in its own line and a freed slot goes to the next line in turn, so a
key with one request waits for at most one request of every other busy key.

That one request is still a wait for a slot to free, and while every slot is held a slot frees only when an
answer comes and the loop reaches its task. So a few spare slots go to keys that have nothing in flight and
nothing waiting: another namespace's single lease is sent at once, and a storm never holds more than the
regular slots (a key on a spare slot is busy, so its next request waits in line like any other).
"""

from __future__ import annotations

import asyncio
from collections import deque


class FairSlots:
    """`size` slots and `spare` more for idle keys; `acquire(key)` waits in `key`'s line; `release(key)` hands a
    regular slot to the next line in turn."""

    __slots__ = ("_free", "_spare", "_held", "_on_spare", "_lines", "_turns")

    def __init__(self, size: int, spare: int = 0) -> None:
        self._free = size
        self._spare = spare
        self._held: dict[str, int] = {}  # slots held, by key
        self._on_spare: set[str] = set()  # keys holding a spare slot (one each at most: they were idle)
        self._lines: dict[str, deque[asyncio.Future[None]]] = {}
        self._turns: deque[str] = deque()  # keys with waiters, in the order they get the next free slots

    def locked(self, key: str | None = None) -> bool:
        """Whether `acquire` would wait (for `key`: an idle key may take a spare slot)."""
        return (self._free == 0 or bool(self._lines)) and not self._spare_for(key)

    def waiting(self) -> int:
        return sum(len(line) for line in self._lines.values())

    async def acquire(self, key: str) -> None:
        if self._free and not self._lines:
            self._free -= 1
            self._held[key] = self._held.get(key, 0) + 1
            return
        if self._spare_for(key):
            self._spare -= 1
            self._on_spare.add(key)
            self._held[key] = 1
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
                self.release(key)  # handed a slot as it was cancelled: pass it on
            else:
                self._forget(key, waiter)
            raise

    def release(self, key: str) -> None:
        held = self._held[key] - 1
        if held:
            self._held[key] = held
        else:
            del self._held[key]
        if key in self._on_spare:  # any of its slots: a key holds one spare at most, and a slot is a slot
            self._on_spare.discard(key)
            self._spare += 1
            return
        while self._turns:
            next_key = self._turns.popleft()
            line = self._lines[next_key]
            waiter = line.popleft()
            if line:
                self._turns.append(next_key)  # its next request waits for one of every other line first
            else:
                del self._lines[next_key]
            if waiter.done():
                # Cancelled, and its task not yet woken to leave the line (a shutdown, a kill, cancels many at
                # once): the slot goes on to the next in turn. Handing it over raised, and the slot was lost.
                continue
            self._held[next_key] = self._held.get(next_key, 0) + 1
            waiter.set_result(None)
            return
        self._free += 1

    def _spare_for(self, key: str | None) -> bool:
        return key is not None and self._spare > 0 and key not in self._held and key not in self._lines

    def _forget(self, key: str, waiter: asyncio.Future[None]) -> None:
        line = self._lines.get(key)
        if line is None or waiter not in line:
            return
        line.remove(waiter)
        if not line:
            del self._lines[key]
            self._turns.remove(key)
