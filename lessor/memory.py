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

log = logging.getLogger(__name__)


def settle_after_start() -> bool:
    """Freeze what start-up built and trim the C heap; True if glibc's `malloc_trim` ran."""
    gc.freeze()
    trimmed = malloc_trim()
    log.info("start-up memory settled: %d objects frozen%s", gc.get_freeze_count(),
             ", freed heap returned" if trimmed else "")
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
