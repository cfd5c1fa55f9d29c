"""Typed changes: what a watch event did, with the version before and after.

Watch events only carry the new version; the topology keeps the previous one,
so a receiver can tell what changed (a label, a reference) without asking the
API server.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from lessor.topology.keys import ObjectKey

JSON = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Change:
    kind: str
    key: ObjectKey
    old: JSON | None
    new: JSON | None

    def versions(self) -> tuple[JSON, ...]:
        """The versions that exist (old, new or both), for rules that hold on either side."""
        return tuple(obj for obj in (self.old, self.new) if obj is not None)


@dataclass(frozen=True, slots=True)
class Created(Change):
    """An object the topology did not know; `old` is None."""


@dataclass(frozen=True, slots=True)
class Updated(Change):
    """A new version of a known object."""


@dataclass(frozen=True, slots=True)
class Deleted(Change):
    """A known object is gone; `old` is its last version the topology saw and `new` is None."""
