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
    def __init__(self, fire: Fire) -> None:
        self._fire = fire
        self._pending: dict[str, dict[Hashable, asyncio.TimerHandle]] = {}

    def schedule(self, address: str, key: Hashable, message: Any, delay: float, context: Context | None) -> None:
        """Arm `key` for `address`, replacing any timer already armed under that key."""
        timers = self._pending.setdefault(address, {})
        previous = timers.pop(key, None)
        if previous is not None:
            previous.cancel()
        # An empty contextvars context: the delivery is not part of whatever
        # the scheduler was doing when it armed the timer.
        timers[key] = asyncio.get_running_loop().call_later(
            max(delay, 0.0), self._due, address, key, message, context, context=contextvars.Context()
        )

    def cancel(self, address: str, key: Hashable) -> bool:
        timers = self._pending.get(address)
        handle = timers.pop(key, None) if timers else None
        if handle is None:
            return False
        handle.cancel()
        if not timers:
            del self._pending[address]
        return True

    def cancel_all(self, address: str) -> None:
        for handle in self._pending.pop(address, {}).values():
            handle.cancel()

    def close(self) -> None:
        for address in list(self._pending):
            self.cancel_all(address)

    def _due(self, address: str, key: Hashable, message: Any, context: Context | None) -> None:
        timers = self._pending[address]
        del timers[key]
        if not timers:
            del self._pending[address]
        self._fire(address, message, context)
