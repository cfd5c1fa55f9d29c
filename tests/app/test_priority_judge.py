"""The judge of `lessor bench leases`' release phase: what it calls a priority inversion, and what not."""

from __future__ import annotations

from typing import Any

from lessor.tools.bench.priority import Terms, judge

TERMS = {"gold": Terms("g0", 30, False), "silver": Terms("g0", 20, False), "spot": Terms("g0", 10, True),
         "other-gold": Terms("g1", 30, False)}


def lease(ready: bool | None, ended: bool = False) -> dict[str, Any]:
    conditions = [] if ready is None else [{"type": "Ready", "status": "True" if ready else "False"}]
    return {"status": {"conditions": conditions, **({"ended": True} if ended else {})}}


def test_a_silver_regrant_while_a_gold_lease_of_its_group_waits_is_an_inversion() -> None:
    final = {"gold": lease(False), "silver": lease(True)}
    verdict = judge(final, {"silver": 10.0}, 5.0, TERMS.__getitem__, {"g0": 1})
    assert verdict["priority_inversions"] == 1
    assert "silver (priority 20) granted while gold (priority 30) still waits" in verdict["examples"]


def test_grants_before_the_release_and_waiters_of_other_groups_are_not_inversions() -> None:
    final = {"gold": lease(True), "silver": lease(True), "other-gold": lease(False)}
    verdict = judge(final, {"gold": 1.0, "silver": 10.0}, 5.0, TERMS.__getitem__, {"g0": 2, "g1": 0})
    assert verdict["priority_inversions"] == 0
    assert verdict["regrants"] == 1


def test_a_settled_storm_shows_no_lease_without_status_no_free_exporter_beside_a_waiter_and_no_spot_over_one() -> None:
    final = {"gold": lease(False), "spot": lease(True), "silver": lease(None)}
    verdict = judge(final, {"spot": 1.0}, 5.0, TERMS.__getitem__, {"g0": 2})
    assert verdict["leases_without_status"] == 1
    assert verdict["groups_with_spot_holding_over_a_waiter"] == 1
    assert verdict["groups_with_a_free_exporter_and_a_waiter"] == 1
    ended = judge({"gold": lease(False, ended=True), "spot": lease(True)}, {"spot": 1.0}, 5.0,
                  TERMS.__getitem__, {"g0": 1})
    assert ended["groups_with_spot_holding_over_a_waiter"] == 0  # an ended lease waits for nothing
