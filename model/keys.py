"""Object keys and actor addresses.

An actor of a lessor object lives at `prefix/namespace/name` (`lease/lab/l1`); `address` builds one and
`split_address` takes one apart, and nothing else spells the format.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any, NamedTuple

from .kinds import BY_NAME, Kind, kind_name


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


def key_of(obj: Mapping[str, Any]) -> ObjectKey:
    """The key of an API object; raises ValueError when it has no kind or name."""
    metadata = obj.get("metadata") or {}
    kind, name = obj.get("kind"), metadata.get("name")
    if not kind or not name:
        raise ValueError(f"object without kind or metadata.name: {kind!r} {name!r}")
    return ObjectKey(kind_name(obj.get("apiVersion") or "", kind), metadata.get("namespace") or "", name)


def reference_key(reference: Mapping[str, Any]) -> ObjectKey:
    """The key of the object a reference (`apiVersion`, `kind`, `namespace`, `name`) names; parts missing are ""."""
    api_version, kind = str(reference.get("apiVersion") or ""), str(reference.get("kind") or "")
    return ObjectKey(kind_name(api_version, kind), str(reference.get("namespace") or ""),
                     str(reference.get("name") or ""))


def actor_address(kind: Kind, namespace: str, name: str) -> str:
    """The address of the actor of a lessor object (`lease/lab/l1`); ValueError for a kind without actors."""
    if kind.prefix is None:
        raise ValueError(f"{kind.kind} objects have no actor")
    return f"{kind.prefix}/{namespace}/{name}"


def address(key: ObjectKey) -> str | None:
    """The address of the key's actor ("exporter/lab/e1"), or None for kinds without actors."""
    kind = BY_NAME.get(key.kind)
    return None if kind is None or kind.prefix is None else actor_address(kind, key.namespace, key.name)


def split_address(address: str) -> tuple[str, str]:
    """`prefix/namespace/name` → (namespace, name). The namespace is interned: every actor keeps it, and a
    cluster has few (one copy each rather than one per actor)."""
    _, namespace, name = address.split("/", 2)
    return sys.intern(namespace), name
