"""metav1.Condition dicts: building, and merging that keeps lastTransitionTime while the status holds."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lessor.actors.conditions import (
    MAX_MESSAGE,
    find_condition,
    merge_condition,
    new_condition,
    remove_condition,
    same_conditions,
)
from lessor.actors.leasing.spec import ConditionType, Reason

T0 = datetime(2030, 1, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
LATER = T0 + timedelta(minutes=5)


def test_new_condition_has_every_metav1_field() -> None:
    condition = new_condition("Ready", True, "Ready", "granted e1", now=T0, observed_generation=4)
    assert condition == {
        "type": "Ready", "status": "True", "reason": "Ready", "message": "granted e1",
        "lastTransitionTime": "2030-01-01T12:00:00Z", "observedGeneration": 4,
    }


def test_status_strings_and_enums_are_accepted_as_plain_strings() -> None:
    condition = new_condition(ConditionType.PENDING, "Unknown", Reason.NOT_AVAILABLE, now=T0)
    assert condition["type"] == "Pending" and type(condition["type"]) is str
    assert condition["reason"] == "NotAvailable" and type(condition["reason"]) is str
    assert condition["status"] == "Unknown" and condition["message"] == ""
    assert "observedGeneration" not in condition
    assert new_condition("Bound", False, "Waiting", now=T0)["status"] == "False"


@pytest.mark.parametrize(("args", "problem"), [
    (("ready now", True, "Ready"), "type"),
    (("Ready", "yes", "Ready"), "status"),
    (("Ready", True, "not camel"), "reason"),
    (("Ready", True, ""), "reason"),
    (("Ready", True, "Trailing,"), "reason"),
])
def test_what_the_schema_would_refuse_is_refused(args: tuple, problem: str) -> None:
    with pytest.raises(ValueError, match=problem):
        new_condition(*args, now=T0)


@pytest.mark.parametrize("generation", [-1, True, "3"])
def test_observed_generation_must_be_a_non_negative_integer(generation: object) -> None:
    with pytest.raises(ValueError, match="observedGeneration"):
        new_condition("Ready", True, "Ready", now=T0, observed_generation=generation)  # type: ignore[arg-type]


def test_reasons_as_the_schema_allows() -> None:
    for reason in ("A", "NotAvailable", "Some_Thing:Else,More"):
        assert new_condition("Ready", True, reason, now=T0)["reason"] == reason
    assert new_condition("example.com/Ready", True, "R", now=T0)["type"] == "example.com/Ready"


def test_a_long_message_is_cut_to_the_schema_limit() -> None:
    message = new_condition("Ready", True, "Ready", "x" * (MAX_MESSAGE + 10), now=T0)["message"]
    assert len(message) == MAX_MESSAGE and message.endswith("…")


def test_merge_keeps_the_transition_time_while_the_status_holds() -> None:
    old = [new_condition("Pending", True, "Offline", "e1 offline", now=T0, observed_generation=1)]
    merged = merge_condition(old, new_condition("Pending", True, "NotAvailable", "e1 leased", now=LATER,
                                                observed_generation=2))
    assert merged == [{"type": "Pending", "status": "True", "reason": "NotAvailable", "message": "e1 leased",
                       "lastTransitionTime": "2030-01-01T12:00:00Z", "observedGeneration": 2}]


def test_merge_moves_the_transition_time_when_the_status_changes() -> None:
    old = [new_condition("Pending", True, "Offline", now=T0)]
    merged = merge_condition(old, new_condition("Pending", False, "Granted", now=LATER))
    assert merged[0]["lastTransitionTime"] == "2030-01-01T12:05:00Z" and merged[0]["status"] == "False"


def test_merge_appends_new_types_and_keeps_the_order_of_others() -> None:
    old = [new_condition("A", True, "R", now=T0), new_condition("B", True, "R", now=T0)]
    merged = merge_condition(old, new_condition("A", False, "R", now=LATER))
    merged = merge_condition(merged, new_condition("C", True, "R", now=LATER))
    assert [c["type"] for c in merged] == ["A", "B", "C"]


def test_merge_does_not_modify_its_input() -> None:
    old = [new_condition("A", True, "R", "one", now=T0)]
    before = copy.deepcopy(old)
    merged = merge_condition(old, new_condition("A", True, "S", "two", now=LATER))
    assert old == before
    merged[0]["message"] = "changed"
    assert old == before


def test_merge_into_nothing_and_duplicates() -> None:
    assert merge_condition(None, new_condition("A", True, "R", now=T0)) == [new_condition("A", True, "R", now=T0)]
    doubled = [new_condition("A", True, "R", now=T0), new_condition("A", False, "R", now=T0)]
    assert len(merge_condition(doubled, new_condition("A", True, "R", now=LATER))) == 1


def test_a_condition_without_a_transition_time_gets_one() -> None:
    merged = merge_condition([{"type": "A", "status": "True"}], new_condition("A", True, "R", now=LATER))
    assert merged[0]["lastTransitionTime"] == "2030-01-01T12:05:00Z"


def set_condition(conditions: list | None, type_: str, status: bool | str, reason: str, message: str = "", *,
                  now: datetime, observed_generation: int | None = None) -> list:
    """What the actors write: a new condition merged into the old ones."""
    return merge_condition(conditions, new_condition(type_, status, reason, message, now=now,
                                                     observed_generation=observed_generation))


def status_of(conditions: list, type_: str) -> str | None:
    condition = find_condition(conditions, type_)
    return None if condition is None else condition["status"]


def test_merge_find_remove_same() -> None:
    conditions = set_condition(None, "Ready", True, "Ready", "ok", now=T0, observed_generation=1)
    conditions = set_condition(conditions, "Pending", False, "Granted", now=T0)
    assert find_condition(conditions, "Ready") is not None and find_condition(conditions, "Nope") is None
    assert (status_of(conditions, "Ready"), status_of(conditions, "Pending"), status_of(conditions, "Nope")) == (
        "True", "False", None)
    assert [c["type"] for c in remove_condition(conditions, "Ready")] == ["Pending"]
    assert same_conditions(conditions, list(reversed(conditions)))
    assert not same_conditions(conditions, set_condition(conditions, "Ready", True, "Ready", "other", now=T0))
    again = set_condition(conditions, "Ready", True, "Ready", "ok", now=LATER, observed_generation=1)
    assert same_conditions(conditions, again)  # nothing changed: the status write can be skipped


_updates = st.lists(st.tuples(st.sampled_from(["A", "B", "C"]), st.sampled_from(["True", "False", "Unknown"]),
                              st.sampled_from(["R1", "R2"])), max_size=25)


@given(_updates)
def test_property_one_condition_per_type_with_the_time_of_its_last_status_change(updates: list) -> None:
    conditions: list = []
    changed: dict[str, tuple[str, str]] = {}
    for step, (type_, status, reason) in enumerate(updates):
        now = T0 + timedelta(seconds=step)
        stamp = now.replace(microsecond=0).strftime("%Y-%m-%dT%H:%M:%SZ")
        if type_ not in changed or changed[type_][0] != status:
            changed[type_] = (status, stamp)
        conditions = set_condition(conditions, type_, status, reason, now=now)
    assert sorted(c["type"] for c in conditions) == sorted(changed)
    for condition in conditions:
        assert (condition["status"], condition["lastTransitionTime"]) == changed[condition["type"]]
