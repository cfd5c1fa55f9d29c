"""Reference edges by target, so "who points at X, through which field" is one lookup.

Outgoing edges are not stored: they are read again from the object's last
version (`fields.references`), which the topology keeps anyway.
"""

from __future__ import annotations

from collections.abc import Iterable

from lessor.topology.fields import Edge
from lessor.topology.keys import ObjectKey


class EdgeIndex:
    __slots__ = ("_incoming",)

    def __init__(self) -> None:
        self._incoming: dict[ObjectKey, dict[str, set[ObjectKey]]] = {}

    def replace(self, old: Iterable[Edge], new: Iterable[Edge]) -> None:
        """Swap one object's edges: `old` as last indexed, `new` as it now says."""
        old, new = set(old), set(new)
        for edge in old - new:
            by_field = self._incoming[edge.target]
            sources = by_field[edge.field]
            sources.discard(edge.source)
            if not sources:
                del by_field[edge.field]
                if not by_field:
                    del self._incoming[edge.target]
        for edge in new - old:
            self._incoming.setdefault(edge.target, {}).setdefault(edge.field, set()).add(edge.source)

    def sources(self, target: ObjectKey, *fields: str) -> set[ObjectKey]:
        """Who points at `target` through any of `fields`."""
        by_field = self._incoming.get(target)
        if not by_field:
            return set()
        found: set[ObjectKey] = set()
        for field in fields:
            found |= by_field.get(field, set())
        return found

    def targets(self, field: str) -> dict[ObjectKey, set[ObjectKey]]:
        """Every object named through `field`, with who names it."""
        return {target: set(by_field[field]) for target, by_field in self._incoming.items() if field in by_field}

    def incoming(self, target: ObjectKey) -> list[Edge]:
        by_field = self._incoming.get(target, {})
        return [Edge(source, field, target) for field, sources in by_field.items() for source in sources]
