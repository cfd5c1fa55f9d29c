"""Restart policy: exponential backoff with jitter inside an OTP-style restart-intensity limit."""

from __future__ import annotations

import random
from collections import deque
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Supervision:
    """How a kind's actors are restarted after they raise or are killed.

    More than `max_restarts` restarts within `within` seconds escalates: the
    actor is stopped for good instead, because a fault that recurs that fast
    will not be cured by trying again.  Each restart first waits
    `backoff * 2**(n-1)` seconds (n = restarts in the window), capped at
    `max_backoff` and shortened by up to `jitter` of itself, so that a fault
    shared by many actors does not bring them all back in lockstep.
    """

    max_restarts: int = 5
    within: float = 60.0
    backoff: float = 0.05
    max_backoff: float = 5.0
    jitter: float = 0.2

    def __post_init__(self) -> None:
        if self.max_restarts < 0 or self.within <= 0:
            raise ValueError("max_restarts must be >= 0 and within > 0")
        if not 0 <= self.backoff <= self.max_backoff:
            raise ValueError("need 0 <= backoff <= max_backoff")
        if not 0 <= self.jitter <= 1:
            raise ValueError("jitter is a fraction in [0, 1]")

    def delay(self, restarts: int, rng: random.Random) -> float:
        """Seconds to wait before the `restarts`-th restart in the current window."""
        base = min(self.max_backoff, self.backoff * 2.0 ** max(restarts - 1, 0))
        return base * (1 - self.jitter * rng.random())

    def record(self, history: deque[float], now: float) -> int | None:
        """Note a failure at `now`; return the restart count within the window, or None to escalate."""
        history.append(now)
        while history and history[0] <= now - self.within:
            history.popleft()
        return None if len(history) > self.max_restarts else len(history)
