"""How many long-lived streams (`Status`, `Listen`) one caller may hold open at once on this replica.

A stream costs the server a task and its buffers for as long as it is open, so one Exporter's token opening
thousands of them would make the server hold thousands: each caller (one authenticated Client or Exporter) holds
at most `STREAMS_PER_CALLER`, and is answered RESOURCE_EXHAUSTED beyond them, while every other caller is
untouched. Counted only after authentication: a caller without a valid token holds no stream at all.
"""

from __future__ import annotations

import collections
import contextlib
from collections.abc import Iterator

import grpc

from .guard import Refusal
from .tokens import KINDS, Subject

STREAMS_PER_CALLER = 16
"""Long-lived streams one Client or Exporter may hold at once: an agent keeps two (Status and Listen), and a
restarted one may briefly hold its old pair too until those connections end."""


class StreamQuota:
    """The open long-lived streams of each caller, bounded by `limit`."""

    def __init__(self, limit: int = STREAMS_PER_CALLER) -> None:
        self.limit = limit
        self._held: collections.Counter[tuple[str, str, str]] = collections.Counter()

    def held(self, subject: Subject) -> int:
        return self._held[(subject.kind, subject.namespace, subject.name)]

    @contextlib.contextmanager
    def holding(self, subject: Subject, method: str) -> Iterator[None]:
        """One more stream of `subject` while the context is open; RESOURCE_EXHAUSTED past the limit."""
        key = (subject.kind, subject.namespace, subject.name)
        if self._held[key] >= self.limit:
            raise Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED,
                          f"{KINDS[subject.kind]} {subject.namespace}/{subject.name} already holds {self.limit} open "
                          f"streams (Status, Listen) on this lessor replica, the most one caller may hold: close "
                          f"the ones it no longer reads before opening {method} again (an agent needs one of each)")
        self._held[key] += 1
        try:
            yield
        finally:
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]
