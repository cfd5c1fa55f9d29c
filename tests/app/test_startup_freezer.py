"""While the caches fill, what they hold is frozen every few thousand events, so the collector's full passes
(which hold the interpreter lock, the probes' thread included) walk only what is new; and never for good."""

from __future__ import annotations

import gc

from lessor.memory import StartupFreezer


def test_it_freezes_every_so_many_events_and_stops_at_its_deadline() -> None:
    gc.unfreeze()
    try:
        freezer = StartupFreezer(every=3, for_seconds=60)
        kept = [{"cached": i} for i in range(100)]
        freezer.note()
        freezer.note()
        assert gc.get_freeze_count() == 0
        freezer.note()
        assert gc.get_freeze_count() >= len(kept)
        gc.unfreeze()
        late = StartupFreezer(every=1, for_seconds=0)
        late.note()
        assert gc.get_freeze_count() == 0  # past its deadline: the collector keeps everything new
    finally:
        gc.unfreeze()
