"""metav1.Condition dicts: building one, and merging it into a `status.conditions` list.

Generic: leases, claims, pools and exporters all use it. A condition keeps its
`lastTransitionTime` while its status stays the same, however often its
reason or message change, as Kubernetes' `meta.SetStatusCondition` does.
Nothing here reads the clock: callers pass `now`.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from datetime import datetime
from typing import Any

from lessor.model.times import format_time

TRUE = "True"
FALSE = "False"
UNKNOWN = "Unknown"
STATUSES = frozenset({TRUE, FALSE, UNKNOWN})

# Condition types several kinds share (DESIGN.md); the lease's own are `leasing.spec.ConditionType`.
READY = "Ready"
VALID = "Valid"
BOUND = "Bound"

# The validation metav1.Condition carries in every CRD that uses it.
_TYPE = re.compile(
    r"([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])"
)
_REASON = re.compile(r"[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?")
MAX_TYPE = 316
MAX_REASON = 1024
MAX_MESSAGE = 32768

Condition = dict[str, Any]


def status_of(value: bool | str) -> str:
    """`True`/`False` for a bool; a status string is checked and returned."""
    if isinstance(value, bool):
        return TRUE if value else FALSE
    if value not in STATUSES:
        raise ValueError(f"condition status must be True, False or Unknown, not {value!r}")
    return value


def new_condition(
    type: str, status: bool | str, reason: str, message: str = "", *,
    now: datetime, observed_generation: int | None = None,
) -> Condition:
    """A metav1.Condition dict; `lastTransitionTime` is `now` to the second, as the API server stores it.

    ValueError for a type or reason the CRD schema would refuse (a bug in the
    caller, not bad user input); a message longer than the schema allows is cut.
    """
    type, reason, message = str(type), str(reason), str(message)
    if len(type) > MAX_TYPE or not _TYPE.fullmatch(type):
        raise ValueError(f"invalid condition type {type!r}")
    if len(reason) > MAX_REASON or not _REASON.fullmatch(reason):
        raise ValueError(f"invalid condition reason {reason!r}: CamelCase, e.g. NotAvailable")
    if len(message) > MAX_MESSAGE:
        message = message[: MAX_MESSAGE - 1] + "…"
    condition: Condition = {
        "type": type,
        "status": status_of(status),
        "reason": reason,
        "message": message,
        "lastTransitionTime": format_time(now),
    }
    if observed_generation is not None:
        if isinstance(observed_generation, bool) or not isinstance(observed_generation, int) \
                or observed_generation < 0:
            raise ValueError(f"observedGeneration must be an integer >= 0, not {observed_generation!r}")
        condition["observedGeneration"] = observed_generation
    return condition


def merge_condition(conditions: Iterable[Mapping[str, Any]] | None, new: Mapping[str, Any]) -> list[Condition]:
    """A new list with `new` in place of the condition of its type (appended if there is none).

    When the status does not change, the old `lastTransitionTime` is kept;
    everything else comes from `new`. Other conditions keep their order; a
    duplicate of `new`'s type (a list the schema should not allow) is dropped.
    The input is not modified.
    """
    merged: list[Condition] = []
    placed = False
    for condition in conditions or ():
        if condition.get("type") != new["type"]:
            merged.append(dict(condition))
            continue
        if placed:
            continue
        entry = dict(new)
        if condition.get("status") == new["status"] and condition.get("lastTransitionTime"):
            entry["lastTransitionTime"] = condition["lastTransitionTime"]
        merged.append(entry)
        placed = True
    if not placed:
        merged.append(dict(new))
    return merged


def remove_condition(conditions: Iterable[Mapping[str, Any]] | None, type: str) -> list[Condition]:
    return [dict(condition) for condition in conditions or () if condition.get("type") != type]


def find_condition(conditions: Iterable[Mapping[str, Any]] | None, type: str) -> Mapping[str, Any] | None:
    for condition in conditions or ():
        if condition.get("type") == type:
            return condition
    return None


def same_conditions(a: Sequence[Mapping[str, Any]] | None, b: Sequence[Mapping[str, Any]] | None) -> bool:
    """Equal as the API server would store them (order of types aside): a status write can be skipped."""
    def keyed(conditions: Sequence[Mapping[str, Any]] | None) -> dict[Any, Mapping[str, Any]]:
        return {condition.get("type"): dict(condition) for condition in conditions or ()}
    return keyed(a) == keyed(b)
