"""One log line per storm of identical failures, not a traceback per actor.

When the API server slows down, thousands of actors of one kind fail the same
way at once. Formatting a traceback for each of them costs more CPU than the
work itself and buries everything else in the log. So the first failure of a
given (kind, exception type, message) is logged with its traceback; the ones
that follow within `interval` seconds are only counted, and the count is
logged in one line when the interval has passed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field

StormKey = tuple[str, str, str]  # (actor kind, exception type, message)


@dataclass(slots=True)
class _Storm:
    window: float  # when the current count began
    last: float  # the latest failure
    suppressed: int = 0
    example: str = ""  # the address of the latest failure counted
    level: int = logging.ERROR  # the level its count is logged at: its first failure's
    flush: asyncio.TimerHandle | None = field(default=None, repr=False)


class FailureLog:
    """Log failures through `logger`: a traceback when a storm begins, then a counted line per `interval`.

    A storm lasts while failures of the same key keep coming less than `interval` apart.
    """

    def __init__(self, logger: logging.Logger, *, interval: float = 10.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self._log = logger
        self._interval = interval
        self._clock = clock
        self._storms: dict[StormKey, _Storm] = {}
        self._pruned_at = clock()

    def failed(self, kind: str, address: str, error: BaseException, what: str, level: int = logging.ERROR,
               traceback: bool = True) -> bool:
        """Log `address what` (with `error`'s traceback unless not `traceback`) if it starts a storm, else count it;
        True if logged."""
        key = (kind, type(error).__qualname__, _without_address(str(error)[:300], address))
        now = self._clock()
        storm = self._storms.get(key)
        if storm is not None and now - storm.last < self._interval:
            storm.last, storm.example = now, address
            storm.suppressed += 1
            if now - storm.window >= self._interval:
                self._summarize(key, storm, now)
            elif storm.flush is None:
                storm.flush = _call_later(storm.window + self._interval - now, self.flush, key)
            return False
        if storm is not None:
            self._summarize(key, storm, now)
        if len(self._storms) >= 1000 and now - self._pruned_at >= self._interval:
            self._forget_quiet(now)
        self._storms[key] = _Storm(window=now, last=now, level=level)
        self._log.log(level, "%s %s", address, what, exc_info=error if traceback else None)
        return True

    def flush(self, key: StormKey | None = None) -> None:
        """Log the count of failures not yet reported (of every storm, or of one); forget quiet storms."""
        now = self._clock()
        for k in [key] if key is not None else list(self._storms):
            if (storm := self._storms.get(k)) is not None:
                self._summarize(k, storm, now)
        self._forget_quiet(now)

    def _forget_quiet(self, now: float) -> None:
        self._pruned_at = now
        for k in [k for k, s in self._storms.items() if now - s.last >= self._interval]:
            self._summarize(k, self._storms.pop(k), now)

    def _summarize(self, key: StormKey, storm: _Storm, now: float) -> None:
        if storm.flush is not None:
            storm.flush.cancel()
            storm.flush = None
        if storm.suppressed:
            kind, error_type, message = key
            self._log.log(storm.level, "%d more %s actors failed with %s: %s (latest: %s)", storm.suppressed, kind,
                          error_type, message or "(no message)", storm.example)
            storm.suppressed = 0
        storm.window = now


def _without_address(message: str, address: str) -> str:
    """The message with the failing actor's own name left out (`exporter/ns/e42`: "ns" and "e42"), so that
    the same failure of many actors (a request for each one's object) is one storm."""
    for part in address.split("/")[1:]:
        if part:
            message = message.replace(part, "…")
    return message


def _call_later(delay: float, callback: Callable[[StormKey], None], key: StormKey) -> asyncio.TimerHandle | None:
    """A timer on the running loop, if there is one (the in-memory tests drive `flush` themselves)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    return loop.call_later(max(delay, 0.0), callback, key)
