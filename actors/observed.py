"""The message the topology sends an actor when an object it cares about changes."""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True, slots=True)
class Observed:
    """The newest version of one object (`object` None once it is deleted).

    Sent with `coalesce=message.coalesce_key`, so an actor that falls behind
    handles the latest snapshot of each object, not a backlog of stale ones.
    """

    kind: str
    namespace: str
    name: str
    object: Mapping[str, Any] | None

    @property
    def coalesce_key(self) -> Hashable:
        return ("observed", self.kind, self.namespace, self.name)
