"""Hand memory back after start-up: the heap the initial lists used, and the collector's work.

After the caches are synced most objects live as long as the process: `gc.freeze()` moves them
out of the collector's generations, so later collections do not walk (and dirty the pages of)
every cached object. glibc keeps freed heap for reuse; `malloc_trim(0)` returns it to the system.
The operator settles twice per term: when the caches are synced, and again once start-up's work is
done (no actor at work for a few seconds), so what the actors' start-up built is frozen too.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import gc
import logging
import sys
import time

log = logging.getLogger(__name__)


class StartupFreezer:
    """Until the first start-up is quiet, freeze what is there every `every` watch events, and after each of
    the collector's full passes: the first lists fill the caches, then (at a first start) every exporter's
    Online write comes back as an event while the actors build their state.

    The collector's full pass walks every tracked object, holding the interpreter lock throughout (the
    probes' thread waits too): over a 10,000-exporter cache, a few tenths of a second, and start-up makes
    several as the heap grows. Frozen objects are skipped by it (refcounting still frees them), so each
    pass walks only what came since the last freeze. Counting events is not enough: when the topology is
    told `Synced` it starts an actor per object in one turn, with no event in between, and at 20k exporters
    four full passes in a row walked the growing heap for 85-195 ms each (a `gc.callbacks` probe). So a full
    pass's survivors are frozen too (`start`): its garbage is already gone, and the next pass walks only
    what is newer. What is frozen is never collected as a cycle, so the freezer also stops, quiet or not: a
    cluster too busy ever to be quiet must not freeze its garbage for good. Counted events stop being frozen
    `for_seconds` after it began (an event's moment may hold garbage not yet collected); a full pass's
    survivors, which hold none, `passes_for_seconds` after: a first start at 50k exporters on a loaded
    machine took 8 minutes to settle, and once nothing was frozen any more its full passes grew back to
    0.86 s of CPU each over what the condition writes had replaced.
    """

    __slots__ = ("every", "seen", "until", "passes_until", "_watching")

    def __init__(self, every: int = 2000, for_seconds: float = 300.0, passes_for_seconds: float = 1800.0) -> None:
        self.every = every
        self.seen = 0
        now = time.monotonic()
        self.until = now + for_seconds
        self.passes_until = now + passes_for_seconds
        self._watching = False

    def note(self) -> None:
        self.seen += 1
        if self.seen % self.every == 0 and time.monotonic() < self.until:
            gc.freeze()

    def start(self) -> None:
        """Freeze what is there (the imported modules' objects, alive for good, which every full pass would walk),
        then the survivors of every full pass from now until `stop` or the deadline."""
        if not self._watching and time.monotonic() < self.passes_until:
            gc.freeze()
            gc.callbacks.append(self._after_pass)
            self._watching = True

    def stop(self) -> None:
        if self._watching:
            self._watching = False
            gc.callbacks.remove(self._after_pass)

    def _after_pass(self, phase: str, info: dict[str, int]) -> None:
        if phase == "stop" and info["generation"] == 2 and time.monotonic() < self.passes_until:
            gc.freeze()  # not `stop` here: the collector is iterating its callbacks


def settle_after_start() -> bool:
    """Freeze what start-up built and trim the C heap; True if glibc's `malloc_trim` ran."""
    gc.freeze()
    trimmed = malloc_trim()
    # No count of what was frozen: `gc.get_freeze_count()` walks every frozen object holding the interpreter
    # lock (0.16-0.24 s at a 50k-exporter restart, py-spy --native), and the probes' thread waits for it.
    log.info("start-up memory settled%s", ": freed heap returned" if trimmed else "")
    return trimmed


def malloc_trim() -> bool:
    """glibc only (musl and macOS have no `malloc_trim`); False where it is not available."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
        trim = libc.malloc_trim
    except (OSError, AttributeError):
        return False
    trim.argtypes = [ctypes.c_size_t]
    trim.restype = ctypes.c_int
    trim(0)
    return True
