"""A provider whose templates keep running out of time is held back, and for longer each time (issue 23)."""

from __future__ import annotations

import time

import pytest

from lessor.actors.context import Context
from lessor.actors.provisioning import throttle
from lessor.actors.provisioning.claim_spec import resolve_claim
from lessor.actors.provisioning.throttle import THROTTLE, THROTTLED, Throttle
from lessor.templates.budget import out_of_time
from tests.provisioning.test_spec import NOW, claim, env, providers

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


def test_each_operator_holds_back_with_its_own_throttle() -> None:
    """Two operators in one process (the tests run several) share no throttle: one's held provider is not held
    for the other's claims, and the pure `resolve_claim` holds back only with the throttle it is given."""
    first, second = Context(api=None), Context(api=None)  # type: ignore[arg-type]  # no API is asked
    assert first.slots[THROTTLE] is first.slots[THROTTLE] is not second.slots[THROTTLE]
    for _ in range(throttle.STRIKES):
        first.slots[THROTTLE].note("env-configmap", "spec.default.data.spin", SPUN)
    body = claim(env({"data": {"size": "small"}}))

    held = resolve_claim(body, providers(), now=NOW, throttle=first.slots[THROTTLE])
    assert [error.reason for error in held.all_errors] == [THROTTLED]
    assert resolve_claim(body, providers(), now=NOW, throttle=second.slots[THROTTLE]).valid
    assert resolve_claim(body, providers(), now=NOW).valid
