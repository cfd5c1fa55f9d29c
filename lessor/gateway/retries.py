"""Which failures of a request are the API server's bad minute rather than an answer, how long to wait before
asking again, and one log line per outage instead of one per failed request.

A restarting kube-apiserver refuses connections, then answers `429 storage is (re)initializing` and `503 ...
before all known HTTP paths have been installed`; API Priority and Fairness answers 429; etcd answers "please try
again". None of these says anything about the request, and each carries (or implies) a short wait. Retried in the
gateway, they cost an actor nothing: it sees a failure only once the bound (`Retries`) is spent.
"""

from __future__ import annotations

import logging
import random
import re
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import aiohttp

log = logging.getLogger("lessor.gateway")

# etcd's and the storage layer's "ask again" answers, sent as a 500 (a 503/504 is retried whatever it says).
_TRY_AGAIN = re.compile(r"please try again|try again later|etcdserver: (leader changed|request timed out|"
                        r"too many requests)|storage is \(re\)initializing", re.IGNORECASE)
RETRIED_STATUSES = frozenset({429, 503, 504})


@dataclass(frozen=True)
class Retries:
    """The bound of a request's retries: at most `attempts` sends, and no wait that would end more than
    `total` seconds after the first send began. Waits grow from `base` by doubling to `ceiling`, jittered
    (× U(0.5, 1)); an answer's Retry-After is waited as asked (× U(1, 1.2), so that many requests throttled
    together do not come back together), at most `retry_after_cap` seconds."""

    attempts: int = 25
    total: float = 30.0
    base: float = 0.1
    ceiling: float = 2.0
    retry_after_cap: float = 10.0

    def delay(self, retry: int, retry_after: float | None) -> float:
        """The wait before retry number `retry` (1 for the first)."""
        if retry_after is not None:
            return min(self.retry_after_cap, retry_after) * random.uniform(1.0, 1.2)
        return float(min(self.ceiling, self.base * 2 ** (retry - 1)) * random.uniform(0.5, 1.0))


NO_RETRIES = Retries(attempts=1, total=0.0)


def answer_reason(status: int, body: Mapping[str, Any] | None) -> str | None:
    """The reason an answer is retried (its code), or None for an answer that is the API server's word."""
    if status in RETRIED_STATUSES:
        return str(status)
    if status == 500 and _TRY_AGAIN.search(str((body or {}).get("message", ""))):
        return "500"
    return None


def failure_reason(err: BaseException) -> str | None:
    """The reason a request that got no answer is retried (`connection`, `timeout`), or None: a TLS
    verification failure or a malformed URL is no outage, and no retry mends it."""
    if isinstance(err, (aiohttp.ClientSSLError, aiohttp.InvalidURL)):
        return None
    if isinstance(err, TimeoutError):
        return "timeout"
    if isinstance(err, (aiohttp.ClientConnectionError, aiohttp.ClientPayloadError, OSError)):
        return "connection"
    return None


def unsent(err: BaseException) -> bool:
    """Whether a failed request surely never reached the API server (no connection was made)."""
    return isinstance(err, aiohttp.ClientConnectorError)


def retry_after(headers: Mapping[str, str], body: Mapping[str, Any] | None) -> float | None:
    """The wait the API server asked for: its Retry-After header (seconds), else the Status's
    `details.retryAfterSeconds`."""
    raw = headers.get("Retry-After")
    if raw is not None:
        try:
            return max(0.0, float(raw))
        except ValueError:
            pass  # an HTTP date: the API server never sends one; back off as for no Retry-After
    details = (body or {}).get("details")
    seconds = details.get("retryAfterSeconds") if isinstance(details, Mapping) else None
    return float(seconds) if isinstance(seconds, (int, float)) and seconds >= 0 else None


@dataclass
class _Outage:
    began: float
    why: str
    retried: int = 0
    last_retry: float = 0.0
    last_said: float = 0.0


class Outages:
    """The log of the API server's bad minutes: one warning when requests of a kind (`connection`, `429`,
    ...) start being retried, one line when they are answered again, with how many were retried, and
    at most one line a `remind_every` seconds in between. An outage of a kind ends at the first answer that
    comes `settle` seconds after that kind's last retry: under steady throttling it stays one outage."""

    def __init__(self, *, settle: float = 2.0, remind_every: float = 60.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._settle = settle
        self._remind_every = remind_every
        self._clock = clock
        self._open: dict[str, _Outage] = {}

    def retried(self, reason: str, why: str) -> None:
        now = self._clock()
        outage = self._open.get(reason)
        if outage is None:
            outage = self._open[reason] = _Outage(began=now, why=why, last_said=now)
            log.warning("API server unavailable (%s: %s); retrying requests", reason, why)
        elif now - outage.last_said >= self._remind_every:
            outage.last_said = now
            log.warning("API server still unavailable after %.0fs (%s: %s): %d requests retried so far",
                        now - outage.began, reason, why, outage.retried + 1)
        outage.retried += 1
        outage.last_retry = now
        outage.why = why

    def answered(self) -> None:
        """An answer that is the API server's word came: end the outages that have settled."""
        if not self._open:
            return
        now = self._clock()
        for reason, outage in list(self._open.items()):
            if now - outage.last_retry >= self._settle:
                del self._open[reason]
                log.warning("API server answering again after %.1fs unavailable (%s: %s): %d requests retried",
                            outage.last_retry - outage.began, reason, outage.why, outage.retried)

    @property
    def open(self) -> dict[str, int]:
        """The outages under way: requests retried so far, by reason."""
        return {reason: outage.retried for reason, outage in self._open.items()}
