"""One copy of each equal value in the cached objects: strings, and the dicts and lists below an object's top.

JSON decoding makes a new string for every value, even where a thousand cached objects hold the same one
(apiVersion, kind, namespace, label values, condition types and reasons, timestamps to the second): at
20,000 exporters these copies were about a third of the informer's heap. `share` swaps each for the one
copy kept in a table of its own, not `sys.intern`'s: Python 3.12 makes interned strings immortal, and
values such as heartbeat timestamps keep changing, so every one ever seen would stay. The table drops the
strings only it still holds whenever it has doubled since the last time, so it never holds many more than
the cached objects do.

The same goes for the nested dicts and lists (labels, spec, status, each condition): equal across many exporters,
they were most of a cached exporter's bytes once its strings were shared. A value shared by many objects must
never be written through one of them, so a shared one is a `SharedDict` or `SharedList`, which refuse every
change (TypeError); a copy (`dict(value)`, `copy.deepcopy`) is a plain, writable one. An object's top and its
`metadata` stay its own, plain dicts (no two objects share a name).
"""

from __future__ import annotations

import copy
import sys
from typing import Any, NoReturn

import orjson

UNIQUE_METADATA = frozenset({"name", "uid", "resourceVersion"})
"""Metadata values no two objects share: kept as decoded (a table entry would cost more than it saves)."""


def _refuse(*_: Any, **__: Any) -> NoReturn:
    raise TypeError("a cached object's nested values are shared with other objects: "
                    "change a copy (dict(value), list(value), copy.deepcopy)")


class SharedDict(dict[str, Any]):
    """A dict that the cached objects share: read-only; a copy of it is a plain dict."""

    __slots__ = ()
    __setitem__ = __delitem__ = __ior__ = setdefault = update = pop = popitem = clear = _refuse

    def __copy__(self) -> dict[str, Any]:
        return dict(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> dict[str, Any]:
        return {key: copy.deepcopy(value, memo) for key, value in self.items()}

    def __reduce__(self) -> tuple[Any, ...]:
        return dict, (dict(self),)


class SharedList(list[Any]):
    """A list that the cached objects share: read-only; a copy of it is a plain list."""

    __slots__ = ()
    __setitem__ = __delitem__ = __iadd__ = __imul__ = append = extend = insert = pop = remove = clear = sort = \
        reverse = _refuse

    def __copy__(self) -> list[Any]:
        return list(self)

    def __deepcopy__(self, memo: dict[int, Any]) -> list[Any]:
        return [copy.deepcopy(value, memo) for value in self]

    def __reduce__(self) -> tuple[Any, ...]:
        return list, (list(self),)


def _child(value: Any) -> list[int]:
    """A shared dict or list inside another's key: by identity (the table's entry holds it alive, so no other
    value has its id meanwhile). As a one-item list: no list but these ones is left in a key, all being shared."""
    return [id(value)]


def _key(value: dict[str, Any] | list[Any]) -> str:
    """Equal for equal values (true, 1 and 1.0 apart), the shared ones inside compared by identity. A str, not
    orjson's bytes, which keep the 4 KiB buffer they were written in."""
    return orjson.dumps(value, default=_child, option=orjson.OPT_PASSTHROUGH_SUBCLASS).decode()


def _lone(table: dict[Any, Any], refs: int) -> list[Any]:
    """The keys of the values that `table` alone refers to, `refs` being the count such a value shows here."""
    return [key for key, value in table.items() if sys.getrefcount(value) == refs]


def _lone_refs() -> int | None:
    """What `sys.getrefcount` says in `_lone` of a string only the table holds (it varies with the version);
    None where no count tells (an interpreter whose refcounts mean something else): then nothing is shared,
    as a table that could not be pruned would only grow."""
    probe: dict[str, Any] = {}
    fresh = "".join(("lessor", "-", "probe"))
    probe[fresh] = fresh
    del fresh
    return next((refs for refs in range(1, 16) if _lone(probe, refs)), None)


def _lone_value_refs() -> int | None:
    """As `_lone_refs`, for the table of dicts and lists, whose keys are not their values."""
    probe: dict[Any, Any] = {"probe": SharedList()}
    return next((refs for refs in range(1, 16) if _lone(probe, refs)), None)


class Strings:
    """The table: each string value once, each nested dict or list once. Not thread-safe (the event loop's
    thread uses it)."""

    __slots__ = ("_table", "_values", "_prune_at", "_min", "_alone", "_alone_value")

    def __init__(self, min_size: int = 4096) -> None:
        self._table: dict[str, str] = {}
        self._values: dict[str, SharedDict | SharedList] = {}
        self._min = self._prune_at = min_size
        self._alone = _lone_refs()
        self._alone_value = _lone_value_refs()
        if self._alone_value is None:
            self._alone = None

    def __len__(self) -> int:
        return len(self._table)

    @property
    def values(self) -> int:
        """How many dicts and lists the table holds."""
        return len(self._values)

    def share(self, obj: dict[str, Any]) -> dict[str, Any]:
        """`obj` (a decoded object), in place, with its string values swapped for the table's; returned."""
        if self._alone is None:
            return obj
        for key, value in obj.items():
            if key == "metadata" and type(value) is dict:
                self._mapping(value, UNIQUE_METADATA)
            else:
                obj[key] = self._value(value)
        if len(self._table) + len(self._values) >= self._prune_at:
            self.prune()
        return obj

    def prune(self) -> None:
        """Drop the values no object holds any more: the dicts and lists first, which hold strings."""
        if self._alone is None or self._alone_value is None:
            return
        for lone in _lone(self._values, self._alone_value):
            del self._values[lone]
        for lone in _lone(self._table, self._alone):
            del self._table[lone]
        self._prune_at = max(self._min, 2 * (len(self._table) + len(self._values)))

    def _value(self, value: Any) -> Any:
        """`value`, shared: the table's copy of a string, of a dict, of a list (its items shared first)."""
        kind = type(value)
        if kind is str:
            return self._table.setdefault(value, value)
        if kind is dict:
            self._mapping(value)
            key = _key(value)
            found = self._values.get(key)
            if found is None:
                found = self._values[key] = SharedDict(value)
            return found
        if kind is list:
            for i, item in enumerate(value):
                value[i] = self._value(item)
            key = _key(value)
            found = self._values.get(key)
            if found is None:
                found = self._values[key] = SharedList(value)
            return found
        return value

    def _mapping(self, mapping: dict[str, Any], unique: frozenset[str] = frozenset()) -> None:
        for key, value in mapping.items():
            if key not in unique:
                mapping[key] = self._value(value)


STRINGS = Strings()
"""The process's table: the informers' objects and the answers to the actors' writes share it.

Process-wide on purpose, the one piece of module-level state the gateway keeps (issue 39): its whole worth
is one copy of each equal value per process, and two operators in one process (the tests run several) cannot
pass anything through it. It holds values, not decisions: what `share` gives back is equal to what it was
given, and the shared dicts and lists refuse every change, so no operator can see another's writes. It is
bounded: the strings only the table still holds are dropped whenever it has doubled, so it never holds many
more than the cached objects of the process do."""
