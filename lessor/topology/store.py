"""The last seen version of every object, by key and by (kind, namespace)."""

from __future__ import annotations

from collections.abc import Iterator, Set

from lessor.topology.changes import JSON
from lessor.topology.keys import ObjectKey

_NONE: frozenset[ObjectKey] = frozenset()


class ObjectStore:
    __slots__ = ("_objects", "_members")

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, JSON] = {}
        self._members: dict[str, dict[str, set[ObjectKey]]] = {}

    def get(self, key: ObjectKey) -> JSON | None:
        return self._objects.get(key)

    def __getitem__(self, key: ObjectKey) -> JSON:
        return self._objects[key]

    def put(self, key: ObjectKey, obj: JSON) -> None:
        if key not in self._objects:
            self._members.setdefault(key.kind, {}).setdefault(key.namespace, set()).add(key)
        self._objects[key] = obj

    def pop(self, key: ObjectKey) -> None:
        del self._objects[key]
        namespaces = self._members[key.kind]
        members = namespaces[key.namespace]
        members.discard(key)
        if not members:
            del namespaces[key.namespace]
            if not namespaces:
                del self._members[key.kind]

    def members(self, kind: str, namespace: str) -> Set[ObjectKey]:
        """The live set of `kind` objects in `namespace`: read it, never keep or change it."""
        return self._members.get(kind, {}).get(namespace, _NONE)

    def keys(self, kind: str | None = None, namespace: str | None = None) -> Iterator[ObjectKey]:
        kinds = list(self._members.values()) if kind is None else [self._members.get(kind, {})]
        for namespaces in kinds:
            if namespace is None:
                for members in namespaces.values():
                    yield from members
            else:
                yield from namespaces.get(namespace, ())

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)
