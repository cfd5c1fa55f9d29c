"""What travels in a mailbox: the app's message plus what the runtime needs to deliver it."""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Hashable
from typing import Any

from opentelemetry.context import Context

# A coalesced message keeps links to the newest messages it replaced, at most
# this many: a stuck actor fed snapshots does not grow without bound, and each
# link costs the SDK an attribute set when the span starts (in a storm, links
# were a third of the cost of starting spans at 64).
MAX_LINKS = 8


class Envelope:
    """One message in flight.

    Mutable on purpose: coalescing overwrites a waiting envelope in place, so
    the newest message takes the old one's turn without searching the queue.
    `context`, `links` and `id` are filled only while tracing is on; `queued` (a perf_counter
    reading) when the mailbox took it, for the time-in-mailbox histogram.
    """

    __slots__ = ("message", "sender", "reply", "key", "context", "links", "id", "queued")

    def __init__(
        self,
        message: Any,
        sender: str | None,
        reply: asyncio.Future[Any] | None = None,
        key: Hashable | None = None,
        context: Context | None = None,
        links: deque[Context] | None = None,
        id: int = 0,
    ) -> None:
        self.message = message
        self.sender = sender
        self.reply = reply
        self.key = key
        self.context = context
        self.links = links
        self.id = id
        self.queued = 0.0

    def supersede(self, newer: Envelope) -> None:
        """Carry `newer`'s message (a keyed tell) instead; the replaced message's context becomes a link."""
        if self.context is not None:
            if self.links is None:
                self.links = deque(maxlen=MAX_LINKS)
            self.links.append(self.context)
        self.message = newer.message
        self.sender = newer.sender
        self.context = newer.context
        self.id = newer.id
