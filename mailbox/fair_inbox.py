"""A mailbox that takes its senders' tenants in turn, for an actor that serves them all (the topology).

One FIFO queue serves whoever queued most: while one tenant's storm fills it with
thousands of messages, another tenant's single question waits behind all of them.
Here each message goes to its tenant's line (`fair_key(message)`, a plain hashable:
the mailbox knows no more of tenants than that), the lines take turns, and order
is kept within a line. A message with no tenant (None) is a barrier: it is handled
after everything queued before it and before anything queued after it, so a
"that was everything" message (the end of a start-up listing) still means it.
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Callable, Hashable, Iterator
from typing import Any

from .envelope import Envelope
from .lanes import Meter, Serving

FairKey = Callable[[Any], Hashable | None]


class FairInbox:
    """The deque operations a cell uses (append, popleft, [0], len, iteration), with lines taken in turn."""

    __slots__ = ("_key", "_lines", "_turns", "_barriers", "_count", "_seq", "serving")

    def __init__(self, key: FairKey, meter_of: Callable[[Hashable], Meter | None] | None = None) -> None:
        self._key = key
        # What the loop's fast lane reads for the task that serves this inbox (`lanes.Serving`), given
        # each tenant's meter (`Turns.known`).
        self.serving = Serving(self.tenants, meter_of) if meter_of is not None else None
        self._lines: dict[Hashable, deque[tuple[int, Envelope]]] = {}
        self._turns: deque[Hashable] = deque()  # tenants with waiting messages, next first
        self._barriers: deque[tuple[int, Envelope]] = deque()
        self._count = 0
        self._seq = itertools.count()

    def append(self, envelope: Envelope) -> None:
        entry = (next(self._seq), envelope)
        tenant = self._key(envelope.message)
        if tenant is None:
            self._barriers.append(entry)
        else:
            line = self._lines.get(tenant)
            if line is None:
                line = self._lines[tenant] = deque()
                self._turns.append(tenant)
            line.append(entry)
            if self.serving is not None:
                self.serving.arrived(tenant)
        self._count += 1

    def popleft(self) -> Envelope:
        tenant = self._next()
        self._count -= 1
        if tenant is None:
            return self._barriers.popleft()[1]
        line = self._lines[tenant]
        if self._turns[0] == tenant:
            self._turns.popleft()
        else:  # the tenants before it wait behind a barrier
            self._turns.remove(tenant)
        _, envelope = line.popleft()
        if line:
            self._turns.append(tenant)  # its next message waits for one of every other tenant's
        else:
            del self._lines[tenant]
        return envelope

    def __getitem__(self, index: int) -> Envelope:
        if index != 0:
            raise IndexError("only the next message can be looked at")
        tenant = self._next()
        return (self._barriers[0] if tenant is None else self._lines[tenant][0])[1]

    def _next(self) -> Hashable | None:
        """Whose message comes next: the first tenant in turn whose next message came before the first
        waiting barrier; None for the barrier itself. Raises IndexError when empty, as a deque does."""
        if not self._count:
            raise IndexError("pop from an empty inbox")
        fence = self._barriers[0][0] if self._barriers else None
        for tenant in self._turns:
            if fence is None or self._lines[tenant][0][0] < fence:
                return tenant
        return None

    def tenants(self) -> Iterator[Hashable]:
        """The tenants with a message waiting, in the order their turns come (barriers aside)."""
        return iter(self._turns)

    def __len__(self) -> int:
        return self._count

    def __bool__(self) -> bool:
        return self._count > 0

    def __iter__(self) -> Iterator[Envelope]:
        """Every waiting message, in the order they were queued (for dead letters at a stop)."""
        entries = [*self._barriers, *(entry for line in self._lines.values() for entry in line)]
        return (envelope for _, envelope in sorted(entries, key=lambda entry: entry[0]))
