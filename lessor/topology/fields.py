"""What an object points at, read from its JSON: references by name, and label selectors.

Each edge is named after the field that makes it, so a reader of the graph can
find it in the manifest. The readers here report what the object says; the
topology decides which objects take part in the graph (`is_inert`).
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from lessor.model.fields import is_mapping
from lessor.model.selectors import Selector, SelectorError, parse_selector
from lessor.topology.keys import (
    CLAIM,
    CLIENT,
    EXPORTER,
    HANDLE,
    LEASE,
    POLICY,
    POOL,
    PROVIDER,
    SCALING,
    ObjectKey,
    kind_name,
)

from lessor.model.labels import HANDLE_NAME, HANDLE_NAMESPACE
from lessor.model.views.leasing import LeaseView, PolicyView

SPEC_EXPORTER_REF = "spec.exporterRef"
STATUS_EXPORTER_REF = "status.exporterRef"
LEASE_REF = "status.leaseRef"
CLIENT_REF = "spec.clientRef"
CLAIM_HANDLE = "status.resourceHandle"
HANDLE_CLAIM = "spec.resourceClaim"
HANDLE_POOL = "spec.resourcePool"
PROVIDER_REF = "spec.resources[].provider"
FREE_HANDLE_PROVIDER = "spec.resources[].provider (free-standing)"
"""Of a handle with neither claim nor pool: the providers a claim may find it by (and bind it itself)."""
SPEC_REFERENCE = "spec.resources[].reference"
STATUS_REFERENCE = "status.resources[].reference"
LEASE_SELECTOR = "spec.selector"
EXPORTER_SELECTOR = "spec.exporterSelector"


@dataclass(frozen=True, slots=True)
class Edge:
    source: ObjectKey
    field: str
    target: ObjectKey


def labels_of(obj: Mapping[str, Any] | None) -> Mapping[str, str]:
    """`metadata.labels`, read raw, without a view: see `_references`."""
    if obj is None:
        return {}
    return (obj.get("metadata") or {}).get("labels") or {}


def is_inert(key: ObjectKey, obj: Mapping[str, Any]) -> bool:
    """True for ended leases (`LeaseView.ended`: `status.ended`, as for their actors; the ended label alone
    ends nothing): they stay in the topology as objects but take part in no edge, index or route to others,
    so history does not slow down the live leases."""
    return key.kind == LEASE and LeaseView.ended_body(obj)


def references(key: ObjectKey, obj: Mapping[str, Any], operator_namespace: str) -> tuple[Edge, ...]:
    """The edges that `obj` makes by naming other objects, without duplicates."""
    edges = dict.fromkeys(_references(key, obj, operator_namespace))
    return tuple(edges)


def _references(key: ObjectKey, obj: Mapping[str, Any], operator_namespace: str) -> Iterator[Edge]:
    # Raw reads, not a view nor even `mapping_at`: this runs several times for every event, heartbeats included,
    # and either made routing a heartbeat 40 % slower (`lessor bench topology`). The API server has checked the
    # shapes; the edges are named after the fields they read.
    spec, status = obj.get("spec") or {}, obj.get("status") or {}
    namespace = key.namespace
    if key.kind == LEASE:
        yield from _named(key, SPEC_EXPORTER_REF, EXPORTER, spec.get("exporterRef"), namespace)
        yield from _named(key, STATUS_EXPORTER_REF, EXPORTER, status.get("exporterRef"), namespace)
        yield from _named(key, CLIENT_REF, CLIENT, spec.get("clientRef"), namespace)
    elif key.kind == EXPORTER:
        yield from _named(key, LEASE_REF, LEASE, status.get("leaseRef"), namespace)
    elif key.kind == CLAIM:
        yield from _named(key, CLAIM_HANDLE, HANDLE, status.get("resourceHandle"), operator_namespace)
        # The providers it names (in the operator's namespace): bound or not, it hears of their changes.
        for resource in _dicts(spec.get("resources")):
            yield from _named(key, PROVIDER_REF, PROVIDER, _name_only(resource.get("provider")), operator_namespace)
        yield from _named(key, PROVIDER_REF, PROVIDER, _name_only(spec.get("provider")), operator_namespace)
    elif key.kind == HANDLE:
        yield from _named(key, HANDLE_CLAIM, CLAIM, spec.get("resourceClaim"), namespace)
        yield from _named(key, HANDLE_POOL, POOL, spec.get("resourcePool"), namespace)
        free_standing = not spec.get("resourceClaim") and not spec.get("resourcePool")
        for resource in _dicts(spec.get("resources")):
            yield from _named(key, PROVIDER_REF, PROVIDER, resource.get("provider"), namespace)
            if free_standing:
                yield from _named(key, FREE_HANDLE_PROVIDER, PROVIDER, resource.get("provider"), namespace)
            yield from _reference(key, SPEC_REFERENCE, resource.get("reference"))
        for resource in _dicts(status.get("resources")):
            yield from _reference(key, STATUS_REFERENCE, resource.get("reference"))
    elif key.kind == POOL:
        for resource in _dicts(spec.get("resources")):
            yield from _named(key, PROVIDER_REF, PROVIDER, resource.get("provider"), namespace)
        yield from _named(key, PROVIDER_REF, PROVIDER, spec.get("provider"), namespace)  # provider mode
    elif key.kind == SCALING:
        yield from _named(key, HANDLE_POOL, POOL, spec.get("resourcePool"), namespace)
    handle = handle_of_resource(obj, operator_namespace)
    if handle is not None:
        yield Edge(key, HANDLE_NAME, handle)


def handle_of_resource(obj: Mapping[str, Any], operator_namespace: str) -> ObjectKey | None:
    """The handle a created resource belongs to, from its labels, else its annotations."""
    metadata = obj.get("metadata") or {}  # raw: see `_references`
    for marks in (metadata.get("labels") or {}, metadata.get("annotations") or {}):
        name = marks.get(HANDLE_NAME)
        if isinstance(name, str) and name:
            return ObjectKey(HANDLE, marks.get(HANDLE_NAMESPACE) or operator_namespace, name)
    return None


def exporter_selectors(key: ObjectKey, obj: Mapping[str, Any]) -> tuple[tuple[str, Selector], ...]:
    """The selectors over exporters that `obj` holds, by field; invalid ones select nothing."""
    if key.kind == LEASE:
        return _compiled([(LEASE_SELECTOR, LeaseView.of(obj).selector)])
    if key.kind == POLICY:
        return _compiled([(EXPORTER_SELECTOR, PolicyView.of(obj).exporter_selector)])
    return ()


def client_selectors(key: ObjectKey, obj: Mapping[str, Any]) -> tuple[tuple[str, Selector], ...]:
    """The selectors over clients in a policy's `spec.policies[].from[]`, by field."""
    if key.kind != POLICY:
        return ()
    return _compiled(list(PolicyView.of(obj).client_selectors))


def _compiled(raw: list[tuple[str, Any]]) -> tuple[tuple[str, Selector], ...]:
    compiled = []
    for field, selector in raw:
        try:
            parsed = parse_selector(selector, field)
        except SelectorError:
            continue  # the owner's actor reports it; here it simply selects nothing
        if not parsed.nothing:
            compiled.append((field, parsed))
    return tuple(compiled)


def _named(source: ObjectKey, field: str, kind: str, ref: Any, namespace: str) -> Iterator[Edge]:
    if is_mapping(ref):
        name = ref.get("name")
        if isinstance(name, str) and name:
            yield Edge(source, field, ObjectKey(kind, ref.get("namespace") or namespace, name))


def _name_only(ref: Any) -> Any:
    """A claim's provider reference, whose name only counts: providers live in the operator's namespace."""
    return {"name": ref.get("name")} if is_mapping(ref) else None


def _reference(source: ObjectKey, field: str, ref: Any) -> Iterator[Edge]:
    if is_mapping(ref):
        kind, name = ref.get("kind"), ref.get("name")
        if isinstance(kind, str) and kind and isinstance(name, str) and name:
            target = ObjectKey(kind_name(ref.get("apiVersion") or "", kind), ref.get("namespace") or "", name)
            yield Edge(source, field, target)


def _dicts(value: Any) -> list[Mapping[str, Any]]:
    return [item for item in value if is_mapping(item)] if isinstance(value, list) else []
