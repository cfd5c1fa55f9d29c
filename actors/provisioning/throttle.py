"""Providers whose templates keep running out of time are held back for a while (issue 23).

A template that spins costs a render thread its whole time limit (2 s) each
time a claim is judged, and a claim can be re-judged as often as its owner
patches it. The fair render queue keeps that from slowing other namespaces;
this keeps it from costing the cluster without end: once a provider's
templates (its `default` or a `validation.checks[]` entry, as a claim is
resolved) run out of time `STRIKES` times within `WINDOW` seconds, its
templates are not run for `PAUSE` seconds (doubled for each hold in the last
`MEMORY` seconds, at most `MAX_PAUSE`). Meanwhile the claims that use it say
`Valid=False`, reason `ProviderThrottled`, and the provider says
`Throttled=True`, reason `TemplateTimeLimit`, naming the template and what it
cost, with an Event.

One per operator, thread-safe: claims are resolved in render threads, by the
operator and its webhook alike, and both count. The operator's Context owns it
(`THROTTLE`, a slot of `Context.slots`) and hands the same one to the webhook;
the pure `resolve_claim` takes it as an argument (none: nothing is held back
or counted, as for the porting tools).
"""

from __future__ import annotations

import threading
import time
from collections import deque
from dataclasses import dataclass, field

from lessor.templates.budget import MAX_SECONDS, out_of_time

from ..context import Slot

STRIKES = 3
WINDOW = 60.0
PAUSE = 60.0
MAX_PAUSE = 600.0
MEMORY = 1800.0
THROTTLED = "ProviderThrottled"
"""The reason a claim's resource gets while its provider is held back."""


@dataclass(frozen=True)
class Hold:
    """A provider held back: which template ran out of time, how often, and until when (monotonic seconds)."""

    provider: str
    template: str
    times: int
    seconds: float
    until: float

    @property
    def remaining(self) -> float:
        return max(0.0, self.until - time.monotonic())

    @property
    def message(self) -> str:
        return (f"ResourceProvider {self.provider} is throttled for {self.seconds:g} s: its template {self.template} "
                f"ran out of time {self.times} times within {WINDOW:g} s, each costing a render thread "
                f"{MAX_SECONDS:g} s ({self.times * MAX_SECONDS:g} s in all); its templates are not run until then")


@dataclass
class _Record:
    strikes: deque[float] = field(default_factory=deque)
    holds: deque[float] = field(default_factory=deque)
    hold: Hold | None = None


class Throttle:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: dict[str, _Record] = {}
        self._news: list[Hold] = []

    def holding(self, provider: str) -> Hold | None:
        """The provider's hold, while it lasts."""
        with self._lock:
            record = self._records.get(provider)
            if record is None or record.hold is None or record.hold.until <= time.monotonic():
                return None
            return record.hold

    def note(self, provider: str, template: str, message: str) -> None:
        """A template of `provider` failed with `message`; counted only when it ran out of time."""
        if out_of_time() not in message:
            return
        now = time.monotonic()
        with self._lock:
            record = self._records.setdefault(provider, _Record())
            if record.hold is not None and record.hold.until > now:
                return  # already held (work that started before the hold)
            record.strikes.append(now)
            while record.strikes and record.strikes[0] < now - WINDOW:
                record.strikes.popleft()
            if len(record.strikes) < STRIKES:
                return
            while record.holds and record.holds[0] < now - MEMORY:
                record.holds.popleft()
            seconds = min(MAX_PAUSE, PAUSE * 2 ** len(record.holds))
            record.hold = Hold(provider, template, len(record.strikes), seconds, now + seconds)
            record.holds.append(now)
            record.strikes.clear()
            self._news.append(record.hold)

    def news(self) -> list[Hold]:
        """Holds begun since the last call: for an actor to announce, each once."""
        with self._lock:
            news, self._news = self._news, []
            return news


THROTTLE: Slot[Throttle] = Slot("provisioning.throttle", Throttle)
"""The operator's throttle, kept in its Context (`ctx.slots[THROTTLE]`)."""
