"""The order in which leases wait for an exporter: highest priority, then oldest, then name.

A small sorted structure that the exporter actor owns privately (it is not
shared, so it is mutable); nothing here does I/O or reads a clock. The key of
a waiter is `(-priority, creation time, name)`: the name makes the order
total, so two leases created in the same second still wait in a fixed order.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timezone

from lessor.mailbox import Cause

Key = tuple[int, datetime, str]


@dataclass(frozen=True, slots=True)
class Waiter:
    """A lease waiting for one exporter, with the terms it would be granted on there."""

    name: str
    priority: int
    created: datetime
    spot: bool = False  # granted with spot access: not part of the order
    cause: Cause | None = field(default=None, compare=False)  # the trace of its Want: the offer goes on in it

    @property
    def key(self) -> Key:
        created = self.created
        if created.tzinfo is None:  # Kubernetes times are UTC; keep naive and aware comparable
            created = created.replace(tzinfo=timezone.utc)
        return (-self.priority, created, self.name)


class WaitQueue:
    """Waiters by key, at most one per lease name; the best waiter first.

    `add` of a name already waiting replaces it (its priority may have
    changed). Adding and removing are O(log n) searches plus a list shift,
    `peek` is O(1). An empty queue holds no containers (every exporter has one, and most are empty).
    """

    __slots__ = ("_keys", "_waiters")

    def __init__(self, waiters: Iterable[Waiter] = ()) -> None:
        self._keys: list[Key] | None = None
        self._waiters: dict[str, Waiter] | None = None
        for waiter in waiters:
            self.add(waiter)

    def add(self, waiter: Waiter) -> None:
        self.remove(waiter.name)  # one place per lease: its priority may have changed
        if self._keys is None or self._waiters is None:
            self._keys, self._waiters = [], {}
        self._waiters[waiter.name] = waiter
        insort(self._keys, waiter.key)

    def remove(self, name: str) -> Waiter | None:
        """Take a waiter out by lease name; None when it was not waiting."""
        if self._keys is None or self._waiters is None:
            return None
        waiter = self._waiters.pop(name, None)
        if waiter is not None:
            del self._keys[bisect_left(self._keys, waiter.key)]
            if not self._keys:
                self._keys = self._waiters = None
        return waiter

    def get(self, name: str) -> Waiter | None:
        """The waiter of lease `name`, left in place; None when it is not waiting."""
        return self._waiters.get(name) if self._waiters is not None else None

    def peek(self) -> Waiter | None:
        """The best waiter, left in place."""
        return self._waiters[self._keys[0][2]] if self._keys and self._waiters else None

    def best(self, eligible: Callable[[Waiter], bool] | None = None) -> Waiter | None:
        """The best waiter that `eligible` accepts (all, by default), left in place.

        When an exporter frees up its actor offers it to `best()`; a filter
        skips waiters that cannot take it now (say, a scheduled lease).
        """
        if eligible is None:
            return self.peek()
        for waiter in self:
            if eligible(waiter):
                return waiter
        return None

    def __contains__(self, name: object) -> bool:
        return self._waiters is not None and name in self._waiters

    def __len__(self) -> int:
        return len(self._keys) if self._keys else 0

    def __bool__(self) -> bool:
        return bool(self._keys)

    def __iter__(self) -> Iterator[Waiter]:
        """Best first (a snapshot: the queue may be changed while iterating)."""
        waiters = self._waiters
        if not self._keys or waiters is None:
            return iter(())
        return iter([waiters[key[2]] for key in self._keys])

    def __repr__(self) -> str:
        return f"WaitQueue({[waiter.name for waiter in self]!r})"
