"""The topology: every watched object, its indexes and its edges, fed by watch events.

`apply` turns a watch event into a typed change and updates the indexes;
`route` says which actors the change concerns; the query methods answer
actors' questions ("which exporters match this selector, under which
policies") from the indexes, without listing the cluster.

Objects are the JSON dicts the API returns; the topology keeps them as given
and never changes them, and callers must not change them either.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from lessor.model.selectors import Selector
from lessor.model.views import View
from lessor.topology import dot, routing
from lessor.topology.changes import JSON, Change, Created, Deleted, Updated
from lessor.topology.edge_index import EdgeIndex
from lessor.topology.fields import (
    HANDLE_POOL,
    SPEC_REFERENCE,
    STATUS_REFERENCE,
    Edge,
    client_selectors,
    exporter_selectors,
    handle_of_resource,
    is_inert,
    labels_of,
    references,
)
from lessor.topology.keys import CLIENT, EXPORTER, LEASE, LESSOR_KINDS, POLICY, ObjectKey, key_of
from lessor.topology.label_index import LabelIndex
from lessor.topology.selector_index import FieldSelectors, SelectorIndex
from lessor.topology.store import ObjectStore
from lessor.model.labels import HANDLE_NAME

V = TypeVar("V", bound=View)

ADDED, MODIFIED, DELETED = "ADDED", "MODIFIED", "DELETED"


class Topology:
    """The graph of one operator. Not shared: one owner (the topology actor) feeds and asks it,
    so it needs no locks."""

    def __init__(self, operator_namespace: str = "lessor-system") -> None:
        self.operator_namespace = operator_namespace
        self._store = ObjectStore()
        self._labels = {EXPORTER: LabelIndex(), CLIENT: LabelIndex()}
        # Selectors are filed under the requirement that lets the fewest objects through.
        self._lease_selectors = SelectorIndex(self._labels[EXPORTER].weigh)
        self._policy_exporter_selectors = SelectorIndex(self._labels[EXPORTER].weigh)
        self._policy_client_selectors = SelectorIndex(self._labels[CLIENT].weigh)
        self._edges = EdgeIndex()

    # -- feeding -----------------------------------------------------------

    def apply(self, event_type: str, obj: JSON) -> Change | None:
        """Record a watch event; None when it changes nothing the topology tracks.

        A relist may repeat ADDED for a known object (an update, or nothing when
        its resourceVersion is the one already seen) and DELETED for an unknown
        one (ignored). Objects of other kinds are tracked only from the moment
        they carry the handle label.
        """
        key = key_of(obj)
        old = self._store.get(key)
        if event_type == DELETED:
            if old is None:
                return None
            self._reindex(key, old, None)
            self._store.pop(key)
            return Deleted(key.kind, key, old, None)
        if event_type not in (ADDED, MODIFIED):
            raise ValueError(f"unknown watch event type {event_type!r}")
        change: Change
        if old is None:
            if key.kind not in LESSOR_KINDS and handle_of_resource(obj, self.operator_namespace) is None:
                return None
            change = Created(key.kind, key, None, obj)
        elif _same_version(old, obj):
            return None
        else:
            change = Updated(key.kind, key, old, obj)
        self._store.put(key, obj)
        self._reindex(key, old, obj)
        return change

    def route(self, change: Change) -> frozenset[str]:
        """The addresses of the actors `change` concerns (see `routing`)."""
        return routing.route(self, change)

    def _reindex(self, key: ObjectKey, old: JSON | None, new: JSON | None) -> None:
        labels = self._labels.get(key.kind)
        if labels is not None:
            labels.update(key, labels_of(old), labels_of(new))
        old_edges, new_edges = self._references(key, old), self._references(key, new)
        if old_edges != new_edges:
            self._edges.replace(old_edges, new_edges)
        if key.kind == LEASE:
            self._lease_selectors.replace(key, self._selectors(key, new, exporter_selectors))
        elif key.kind == POLICY:
            self._policy_exporter_selectors.replace(key, self._selectors(key, new, exporter_selectors))
            self._policy_client_selectors.replace(key, self._selectors(key, new, client_selectors))

    @staticmethod
    def _selectors(
        key: ObjectKey, obj: JSON | None, read: Callable[[ObjectKey, JSON], FieldSelectors]
    ) -> FieldSelectors:
        if obj is None or is_inert(key, obj):
            return ()
        return read(key, obj)

    def _references(self, key: ObjectKey, obj: JSON | None) -> tuple[Edge, ...]:
        if obj is None or is_inert(key, obj):
            return ()
        return references(key, obj, self.operator_namespace)

    # -- objects -----------------------------------------------------------

    def get(self, key: ObjectKey) -> JSON | None:
        return self._store.get(key)

    def view(self, key: ObjectKey, kind: type[V]) -> V | None:
        """`get`, through the kind's view: built once per version while asked for (see `ObjectStore.view`)."""
        return self._store.view(key, kind)

    def __contains__(self, key: object) -> bool:
        return key in self._store

    def __len__(self) -> int:
        return len(self._store)

    def keys(self, kind: str | None = None, namespace: str | None = None) -> set[ObjectKey]:
        """The keys of the objects of `kind` in `namespace` (None: any)."""
        return set(self._store.keys(kind, namespace))

    def in_order(self) -> list[ObjectKey]:
        """Every key, in a stable order without sorting them all (`ObjectStore.in_order`)."""
        return self._store.in_order()

    # -- selector queries --------------------------------------------------

    def select(self, kind: str, namespace: str, selector: Selector) -> set[ObjectKey]:
        """The objects of `kind` (Exporter or Client) in `namespace` that `selector` matches."""
        index = self._labels.get(kind)
        if index is None:
            raise ValueError(f"{kind} objects are not indexed by label; only {sorted(self._labels)} are")
        return index.select(namespace, selector, self._store.members(kind, namespace))

    def exporters(self, namespace: str, selector: Selector) -> set[ObjectKey]:
        return self.select(EXPORTER, namespace, selector)

    def clients(self, namespace: str, selector: Selector) -> set[ObjectKey]:
        return self.select(CLIENT, namespace, selector)

    def policies_for_exporter(self, namespace: str, labels: Mapping[str, str]) -> set[ObjectKey]:
        """The policies of `namespace` whose exporterSelector matches an exporter with `labels`."""
        return self._policy_exporter_selectors.owners_matching(namespace, labels)

    def leases_selecting(self, namespace: str, labels: Mapping[str, str]) -> set[ObjectKey]:
        """The live leases of `namespace` whose spec.selector matches an exporter with `labels`."""
        return self._lease_selectors.owners_matching(namespace, labels)

    # -- reference queries -------------------------------------------------

    def referrers(self, target: ObjectKey, *fields: str) -> set[ObjectKey]:
        """The objects that name `target` in any of `fields` (the constants of
        `lessor.topology.fields`), e.g. `referrers(client, CLIENT_REF)`: the live leases of a client."""
        return self._edges.sources(target, *fields)

    def dangling(self, field: str) -> dict[ObjectKey, set[ObjectKey]]:
        """The objects named through `field` that the topology does not hold (deleted, or never
        created), each with the objects that name it: what a restart finds changed while it was down."""
        return {target: sources for target, sources in self._edges.targets(field).items()
                if target not in self._store}

    def handles_of_pool(self, pool: ObjectKey) -> set[ObjectKey]:
        return self.referrers(pool, HANDLE_POOL)

    def resources_of_handle(self, handle: ObjectKey) -> set[ObjectKey]:
        """What was created for `handle`: objects labelled with it, and those its resources reference."""
        found = self.referrers(handle, HANDLE_NAME)
        found.update(
            edge.target
            for edge in self._references(handle, self._store.get(handle))
            if edge.field in (SPEC_REFERENCE, STATUS_REFERENCE)
        )
        return found

    # -- edges -------------------------------------------------------------

    def edges_from(self, key: ObjectKey) -> list[Edge]:
        """Every edge out of `key`: references it makes and objects its selectors match."""
        obj = self._store.get(key)
        edges = list(self._references(key, obj))
        namespace = key.namespace
        for index in (self._lease_selectors, self._policy_exporter_selectors):
            for field, selector in index.selectors(key):
                edges.extend(Edge(key, field, target) for target in self.exporters(namespace, selector))
        for field, selector in self._policy_client_selectors.selectors(key):
            edges.extend(Edge(key, field, target) for target in self.clients(namespace, selector))
        return edges

    def edges_to(self, key: ObjectKey) -> list[Edge]:
        """Every edge into `key`: references to it and, for exporters and clients, the selectors
        that match it."""
        edges = self._edges.incoming(key)
        obj = self._store.get(key)
        if obj is None:
            return edges
        labels = labels_of(obj)
        indexes: tuple[SelectorIndex, ...]
        if key.kind == EXPORTER:
            indexes = (self._lease_selectors, self._policy_exporter_selectors)
        elif key.kind == CLIENT:
            indexes = (self._policy_client_selectors,)
        else:
            indexes = ()
        for index in indexes:
            edges.extend(Edge(owner, field, key) for owner, field in index.matching(key.namespace, labels))
        return edges

    def to_dot(self) -> str:
        """The graph in Graphviz DOT, one cluster per namespace."""
        return dot.render(self)


def _same_version(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    # raw: every event comes here (see `fields._references`)
    version = (old.get("metadata") or {}).get("resourceVersion")
    return bool(version) and version == (new.get("metadata") or {}).get("resourceVersion")
