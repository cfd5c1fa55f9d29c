"""While the caches fill, what they hold is frozen every few thousand events, so the collector's full passes
(which hold the interpreter lock, the probes' thread included) walk only what is new; and never for good."""

from __future__ import annotations

import gc

from lessor.health.memory import StartupFreezer


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


def test_started_it_freezes_what_survives_each_full_pass_until_stopped_or_past_its_deadline() -> None:
    """A full pass with no event since the last freeze (the topology starting every actor in one turn) walks
    the new objects once: the survivors are frozen, so the next pass skips them."""
    gc.unfreeze()
    freezer = StartupFreezer(every=10**9, for_seconds=0, passes_for_seconds=60)  # counted events: past its deadline
    freezer.start()
    try:
        assert gc.get_freeze_count() > 0  # what was there: the imported modules
        gc.unfreeze()
        kept = [{"actor": i} for i in range(100)]
        gc.collect(1)
        assert gc.get_freeze_count() == 0  # a young pass freezes nothing: its generation's garbage may be older
        gc.collect()
        assert gc.get_freeze_count() >= len(kept)
        freezer.stop()
        gc.unfreeze()
        gc.collect()
        assert gc.get_freeze_count() == 0
        late = StartupFreezer(every=10**9, for_seconds=0, passes_for_seconds=0)
        late.start()
        try:
            gc.collect()
            assert gc.get_freeze_count() == 0  # past its deadline
        finally:
            late.stop()
    finally:
        freezer.stop()
        gc.unfreeze()
