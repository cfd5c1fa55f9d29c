"""Dead letters: every message that could not be delivered is counted, logged and kept for inspection."""

from __future__ import annotations

import logging
import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

LOGGED_CHARS = 500
"""Of a dead letter's message, what a log line shows; the rest is cut, with its size (a message may carry a
whole object: one was a 244 KB line)."""


def shown(value: Any, limit: int = LOGGED_CHARS) -> str:
    """`repr(value)`, cut to `limit` characters with the size of what was left out."""
    text = repr(value)
    if len(text) <= limit:
        return text
    return f"{text[:limit]}... ({len(text) - limit:,} more characters)"

# Why a message was not delivered (the `reason` label of the dead-letter metric).
UNREGISTERED = "unregistered"  # no kind registered for the address
STOPPED = "stopped"  # the actor stopped with the message still waiting, or while stopping
ESCALATED = "escalated"  # the address was closed for good by supervision
MAILBOX_FULL = "mailbox-full"  # refused by a bounded mailbox (the sender also got MailboxFull)
SHUTDOWN = "shutdown"  # the system was shutting down


@dataclass(frozen=True, slots=True)
class DeadLetter:
    address: str
    message: Any
    reason: str
    sender: str | None


class DeadLetters:
    """The running total, a count per reason, and the most recent letters (a bounded window)."""

    def __init__(self, keep: int = 1000, *, log_every: float = 10.0, clock: Callable[[], float] = time.monotonic) -> None:
        self.total = 0
        self.by_reason: Counter[str] = Counter()
        self.recent: deque[DeadLetter] = deque(maxlen=keep)
        self._log_every = log_every
        self._clock = clock
        self._logged_at: dict[str, float] = {}
        self._unlogged: Counter[str] = Counter()

    def add(self, letter: DeadLetter) -> None:
        """Count and keep every letter; log one per reason every `log_every` seconds with the count of
        the others (a shutdown with 20k waiting messages is one line, not 20k object dumps)."""
        self.total += 1
        self.by_reason[letter.reason] += 1
        self.recent.append(letter)
        now = self._clock()
        last = self._logged_at.get(letter.reason)
        if last is not None and now - last < self._log_every:
            self._unlogged[letter.reason] += 1
            return
        self._logged_at[letter.reason] = now
        more = self._unlogged.pop(letter.reason, 0)
        log.warning(
            "dead letter to %s (%s) from %s: %s%s",
            letter.address,
            letter.reason,
            letter.sender or "outside",
            shown(letter.message),
            f" ({more} more {letter.reason} dead letters before it not logged)" if more else "",
        )

    def flush(self) -> None:
        """Log the count of letters not logged yet."""
        for reason, count in self._unlogged.items():
            log.warning("%d more dead letters (%s) not logged", count, reason)
        self._unlogged.clear()
