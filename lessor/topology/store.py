"""The last seen version of every object, by key and by (kind, namespace); and the views of the last ones
asked for, so that the many leases that ask about one exporter share one view of it."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Iterator, Set
from typing import TypeVar

from lessor.model.views import View
from lessor.topology.changes import JSON
from lessor.topology.keys import ObjectKey

_NONE: frozenset[ObjectKey] = frozenset()
V = TypeVar("V", bound=View)

VIEWS_KEPT = 16_384
"""Views kept (about 0.4 KB each), the least recently asked for dropped first: the exporters of the leases at
work, not the whole cluster."""


class ObjectStore:
    __slots__ = ("_objects", "_members", "_views")

    def __init__(self) -> None:
        self._objects: dict[ObjectKey, JSON] = {}
        self._members: dict[str, dict[str, set[ObjectKey]]] = {}
        self._views: OrderedDict[ObjectKey, View] = OrderedDict()

    def get(self, key: ObjectKey) -> JSON | None:
        return self._objects.get(key)

    def view(self, key: ObjectKey, kind: type[V]) -> V | None:
        """The object through its kind's view, built once per version while it is asked for."""
        obj = self._objects.get(key)
        if obj is None:
            return None
        view = self._views.get(key)
        if isinstance(view, kind) and view.body is obj:
            self._views.move_to_end(key)
            return view
        fresh = self._views[key] = kind.of(obj)
        self._views.move_to_end(key)
        if len(self._views) > VIEWS_KEPT:
            self._views.popitem(last=False)
        return fresh

    def __getitem__(self, key: ObjectKey) -> JSON:
        return self._objects[key]

    def put(self, key: ObjectKey, obj: JSON) -> None:
        if key not in self._objects:
            self._members.setdefault(key.kind, {}).setdefault(key.namespace, set()).add(key)
        self._objects[key] = obj
        self._views.pop(key, None)

    def pop(self, key: ObjectKey) -> None:
        del self._objects[key]
        self._views.pop(key, None)
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

    def in_order(self) -> list[ObjectKey]:
        """Every key: kind by kind and namespace by namespace (each sorted), and within one, in the order the
        objects came (a listing's is by name). Not `sorted(keys)`: sorting 120,000 keys is one call that holds
        the interpreter lock for 0.3-1 s (the probes' thread waits throughout); this is a loop, which lets it go."""
        groups: dict[tuple[str, str], list[ObjectKey]] = {}
        for key in self._objects:
            group = groups.get((key.kind, key.namespace))
            if group is None:
                group = groups[(key.kind, key.namespace)] = []
            group.append(key)
        return [key for _, group in sorted(groups.items()) for key in group]

    def __contains__(self, key: object) -> bool:
        return key in self._objects

    def __len__(self) -> int:
        return len(self._objects)
