"""Dead letters: every message that could not be delivered is counted, logged and kept for inspection."""

from __future__ import annotations

import logging
from collections import Counter, deque
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

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

    def __init__(self, keep: int = 1000) -> None:
        self.total = 0
        self.by_reason: Counter[str] = Counter()
        self.recent: deque[DeadLetter] = deque(maxlen=keep)

    def add(self, letter: DeadLetter) -> None:
        self.total += 1
        self.by_reason[letter.reason] += 1
        self.recent.append(letter)
        log.warning(
            "dead letter to %s (%s) from %s: %r",
            letter.address,
            letter.reason,
            letter.sender or "outside",
            letter.message,
        )
