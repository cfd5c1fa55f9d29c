"""One copy of each equal string value in the cached objects.

JSON decoding makes a new string for every value, even where a thousand cached objects hold the same one
(apiVersion, kind, namespace, label values, condition types and reasons, timestamps to the second): at
20,000 exporters these copies were about a third of the informer's heap. `share` swaps each for the one
copy kept in a table of its own, not `sys.intern`'s: Python 3.12 makes interned strings immortal, and
values such as heartbeat timestamps keep changing, so every one ever seen would stay. The table drops the
strings only it still holds whenever it has doubled since the last time, so it never holds many more than
the cached objects do.
"""

from __future__ import annotations

import sys
from typing import Any

UNIQUE_METADATA = frozenset({"name", "uid", "resourceVersion"})
"""Metadata values no two objects share: kept as decoded (a table entry would cost more than it saves)."""


def _lone(table: dict[str, str], refs: int) -> list[str]:
    """The strings that `table` alone refers to, `refs` being the count such a string shows here."""
    return [s for s in table if sys.getrefcount(s) == refs]


def _lone_refs() -> int | None:
    """What `sys.getrefcount` says in `_lone` of a string only the table holds (it varies with the version);
    None where no count tells (an interpreter whose refcounts mean something else): then nothing is shared,
    as a table that could not be pruned would only grow."""
    probe: dict[str, str] = {}
    fresh = "".join(("lessor", "-", "probe"))
    probe[fresh] = fresh
    del fresh
    return next((refs for refs in range(1, 16) if _lone(probe, refs)), None)


class Strings:
    """The table: each string value once. Not thread-safe (the event loop's thread uses it)."""

    __slots__ = ("_table", "_prune_at", "_min", "_alone")

    def __init__(self, min_size: int = 4096) -> None:
        self._table: dict[str, str] = {}
        self._min = self._prune_at = min_size
        self._alone = _lone_refs()

    def __len__(self) -> int:
        return len(self._table)

    def share(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` (a decoded object), in place, with its string values swapped for the table's; returned."""
        if self._alone is None:
            return obj
        for key, value in obj.items():
            if key == "metadata" and type(value) is dict:
                self._mapping(value, UNIQUE_METADATA)
            else:
                obj[key] = self._value(value)
        if len(self._table) >= self._prune_at:
            self.prune()
        return obj

    def prune(self) -> None:
        """Drop the strings no object holds any more."""
        if self._alone is None:
            return
        for lone in _lone(self._table, self._alone):
            del self._table[lone]
        self._prune_at = max(self._min, 2 * len(self._table))

    def _value(self, value: Any) -> Any:
        """`value`, shared: the table's copy of a string; a dict or a list shared in place."""
        kind = type(value)
        if kind is str:
            return self._table.setdefault(value, value)
        if kind is dict:
            self._mapping(value)
        elif kind is list:
            for i, item in enumerate(value):
                value[i] = self._value(item)
        return value

    def _mapping(self, mapping: dict[str, Any], unique: frozenset[str] = frozenset()) -> None:
        for key, value in mapping.items():
            if key not in unique:
                mapping[key] = self._value(value)


STRINGS = Strings()
"""The process's table: the informers' objects and the answers to the actors' writes share it."""
