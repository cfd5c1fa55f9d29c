"""How the topology names objects, and the actor address each object has."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple

GROUP = "lessor.dev"

EXPORTER = "Exporter"
CLIENT = "Client"
POLICY = "ExporterAccessPolicy"
LEASE = "Lease"
PROVIDER = "ResourceProvider"
POOL = "ResourcePool"
HANDLE = "ResourceHandle"
CLAIM = "ResourceClaim"

LESSOR_KINDS = frozenset({EXPORTER, CLIENT, POLICY, LEASE, PROVIDER, POOL, HANDLE, CLAIM})

# Kinds that have an actor of their own, and the prefix of its address.
ACTOR_PREFIXES: Mapping[str, str] = {
    EXPORTER: "exporter",
    LEASE: "lease",
    POOL: "pool",
    HANDLE: "handle",
    CLAIM: "claim",
}


class ObjectKey(NamedTuple):
    """(kind, namespace, name); namespace is "" for cluster-scoped objects.

    lessor.dev kinds use the bare kind; any other kind is "apiVersion/Kind"
    (e.g. "v1/ConfigMap"), because a created resource may be of any group.
    """

    kind: str
    namespace: str
    name: str

    def __str__(self) -> str:
        return f"{self.kind}/{self.namespace}/{self.name}" if self.namespace else f"{self.kind}/{self.name}"


def kind_name(api_version: str, kind: str) -> str:
    """The topology's name for a kind: bare for lessor.dev kinds (or when apiVersion is unknown),
    prefixed by apiVersion otherwise."""
    if not api_version or (kind in LESSOR_KINDS and api_version.partition("/")[0] == GROUP):
        return kind
    return f"{api_version}/{kind}"


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """The key of an API object; raises ValueError when it has no kind or name."""
    metadata = obj.get("metadata") or {}
    kind, name = obj.get("kind"), metadata.get("name")
    if not kind or not name:
        raise ValueError(f"object without kind or metadata.name: {kind!r} {name!r}")
    return ObjectKey(kind_name(obj.get("apiVersion") or "", kind), metadata.get("namespace") or "", name)


def address(key: ObjectKey) -> str | None:
    """The address of the key's actor ("exporter/lab/e1"), or None for kinds without actors."""
    prefix = ACTOR_PREFIXES.get(key.kind)
    return None if prefix is None else f"{prefix}/{key.namespace}/{key.name}"
