"""`status.conditions`, typed, for the views of every kind that has them.

General, not leasing's: provisioning's views may subclass `StatusView` too. A condition that is not a mapping
is left out; a field of one that is not a string reads as empty.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from .meta import View, text

TRUE = "True"


@dataclass(frozen=True, slots=True)
class Condition:
    """One metav1.Condition as read (the dicts that are written are `lessor.actors.conditions`')."""

    type: str
    status: str
    reason: str = ""
    message: str = ""
    observed_generation: int | None = None
    last_transition: str = ""

    @classmethod
    def of(cls, value: Mapping[str, Any]) -> Condition:
        generation = value.get("observedGeneration")
        return cls(text(value.get("type")) or "", text(value.get("status")) or "", text(value.get("reason")) or "",
                   text(value.get("message")) or "",
                   generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
                   text(value.get("lastTransitionTime")) or "")

    @property
    def true(self) -> bool:
        return self.status == TRUE


def condition_dicts(status: Mapping[str, Any]) -> tuple[Mapping[str, Any], ...]:
    """The entries of `status.conditions` that are mappings, as they are (to merge into and write back)."""
    raw = status.get("conditions")
    return tuple(c for c in raw if isinstance(c, Mapping)) if isinstance(raw, list) else ()


def find_condition(status: Mapping[str, Any], type: str) -> Condition | None:
    """The first condition of `type` in a `status`, or None (for a reader that builds no view)."""
    for raw in condition_dicts(status):
        if raw.get("type") == type:
            return Condition.of(raw)
    return None


@dataclass(frozen=True, slots=True)
class StatusView(View):
    """A view whose kind has `status.conditions`."""

    @property
    def conditions(self) -> tuple[Condition, ...]:
        return tuple(Condition.of(c) for c in condition_dicts(self.status))

    @property
    def condition_dicts(self) -> tuple[Mapping[str, Any], ...]:
        """The conditions as written, for `merge_condition` and a status write."""
        return condition_dicts(self.status)

    def condition(self, type: str) -> Condition | None:
        """The first condition of `type`, or None."""
        return find_condition(self.status, type)

    def is_true(self, type: str) -> bool:
        """Whether the condition `type` is there and True."""
        found = self.condition(type)
        return found is not None and found.true
