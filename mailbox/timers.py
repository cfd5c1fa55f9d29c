"""Keyed timers: a message to an actor at a given time, on the event loop's timer heap (no polling).

Timers belong to the address, not to the incarnation, so a passivated actor is
reactivated by its own timer (a lease expiring while its actor sleeps).
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Callable, Hashable
from typing import Any

from opentelemetry.context import Context

Fire = Callable[[str, Any, Context | None], None]


class Timers:
    """An address's timers by key. Most addresses have one (an exporter's heartbeat), so a lone timer is
    kept as its handle, not in a dict of one: at 20k exporters that is a few MB."""

    def __init__(self, fire: Fire) -> None:
        self._fire = fire
        self._pending: dict[str, _Keyed | dict[Hashable, _Keyed]] = {}
        # An empty contextvars context for every delivery: it is not part of whatever the scheduler was doing
        # when it armed the timer. One for all (a context each was 64 bytes a timer): `_due` sets no variable.
        self._context = contextvars.Context()

    def schedule(self, address: str, key: Hashable, message: Any, delay: float, context: Context | None) -> None:
        """Arm `key` for `address`, replacing any timer already armed under that key."""
        self.cancel(address, key)
        handle = _Keyed(key, asyncio.get_running_loop().call_later(
            max(delay, 0.0), self._due, address, key, message, context, context=self._context))
        timers = self._pending.get(address)
        if timers is None:
            self._pending[address] = handle
        elif isinstance(timers, _Keyed):
            self._pending[address] = {timers.key: timers, key: handle}
        else:
            timers[key] = handle

    def cancel(self, address: str, key: Hashable) -> bool:
        found = self._take(address, key)
        if found is None:
            return False
        found.handle.cancel()
        return True

    def cancel_all(self, address: str) -> None:
        timers = self._pending.pop(address, None)
        for keyed in ((timers,) if isinstance(timers, _Keyed) else (timers or {}).values()):
            keyed.handle.cancel()

    def close(self) -> None:
        for address in list(self._pending):
            self.cancel_all(address)

    def _take(self, address: str, key: Hashable) -> _Keyed | None:
        timers = self._pending.get(address)
        if timers is None:
            return None
        if isinstance(timers, _Keyed):
            if timers.key != key:
                return None
            del self._pending[address]
            return timers
        found = timers.pop(key, None)
        if len(timers) == 1:
            [self._pending[address]] = timers.values()
        return found

    def _due(self, address: str, key: Hashable, message: Any, context: Context | None) -> None:
        self._take(address, key)
        self._fire(address, message, context)


class _Keyed:
    __slots__ = ("key", "handle")

    def __init__(self, key: Hashable, handle: asyncio.TimerHandle) -> None:
        self.key, self.handle = key, handle
