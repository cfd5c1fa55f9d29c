"""A provider whose templates keep running out of time is held back, and for longer each time (issue 23)."""

from __future__ import annotations

import time

import pytest

from lessor.actors.provisioning import throttle
from lessor.actors.provisioning.throttle import Throttle
from lessor.templates.budget import out_of_time

SPUN = f"/data/spin: {out_of_time()}"


def test_three_time_outs_within_the_window_hold_the_provider_and_are_announced_once() -> None:
    held = Throttle()
    held.note("spin", "spec.default.data.spin", "check 'x' failed")  # not a time-out: not counted
    held.note("spin", "spec.default.data.spin", SPUN)
    held.note("spin", "spec.default.data.spin", SPUN)
    assert held.holding("spin") is None and held.news() == []

    held.note("spin", "spec.default.data.spin", SPUN)
    hold = held.holding("spin")

    assert hold is not None and 59 < hold.remaining <= 60
    assert hold.message == ("ResourceProvider spin is throttled for 60 s: its template spec.default.data.spin ran "
                            "out of time 3 times within 60 s, each costing a render thread 2 s (6 s in all); its "
                            "templates are not run until then")
    assert held.news() == [hold] and held.news() == []
    assert held.holding("other") is None


def test_a_provider_held_again_soon_is_held_twice_as_long(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(throttle, "PAUSE", 0.05)
    held = Throttle()
    for _ in range(3):
        held.note("spin", "spec.validation.checks[slow]", SPUN)
    first = held.holding("spin")
    assert first is not None and first.seconds == 0.05
    time.sleep(0.06)
    assert held.holding("spin") is None  # the hold ended: its templates run again

    for _ in range(3):
        held.note("spin", "spec.validation.checks[slow]", SPUN)
    again = held.holding("spin")
    assert again is not None and again.seconds == 0.1
