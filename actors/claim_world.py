"""Small readers shared by the claim, pool and handle actors: providers, references, versions, times."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lessor.mailbox import Actor
from lessor.templates import parse_timestamp

from .api import HANDLE, Kind
from .provider import Provider, provider_from
from .queries import TOPOLOGY, ListObjects

PROVIDER_KIND = "ResourceProvider"
POOL_KIND = "ResourcePool"
HANDLE_KIND = HANDLE.kind
CLAIM_KIND = "ResourceClaim"
_LESSOR_GROUP = "lessor.dev"
_LESSOR_KINDS = frozenset({"Exporter", "Client", "ExporterAccessPolicy", "Lease", PROVIDER_KIND, POOL_KIND,
                           HANDLE_KIND, CLAIM_KIND})


async def load_providers(actor: Actor, namespace: str) -> dict[str, Provider]:
    """The compiled providers of the operator's namespace, by name, from the topology's cache."""
    objects = await actor.ask(TOPOLOGY, ListObjects(PROVIDER_KIND, namespace))
    providers = (provider_from(obj) for obj in objects)
    return {provider.name: provider for provider in providers}


def claim_of(handle: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(namespace, name) of the claim a handle is bound to; None while unbound."""
    ref = ((handle or {}).get("spec") or {}).get("resourceClaim") or {}
    name, namespace = ref.get("name"), ref.get("namespace")
    return (namespace, name) if isinstance(name, str) and name and isinstance(namespace, str) else None


def name_of(obj: Mapping[str, Any]) -> str:
    return str((obj.get("metadata") or {}).get("name") or "")


def deleting(obj: Mapping[str, Any] | None) -> bool:
    return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))


def version(obj: Mapping[str, Any] | None) -> int:
    try:
        return int(((obj or {}).get("metadata") or {}).get("resourceVersion") or 0)
    except ValueError:
        return 0


def newer(obj: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    """Snapshots from the topology can trail an actor's own writes: keep the higher resourceVersion."""
    return than is None or version(obj) >= version(than)


def generation(obj: Mapping[str, Any] | None) -> int | None:
    value = ((obj or {}).get("metadata") or {}).get("generation")
    return value if isinstance(value, int) else None


def created_at(obj: Mapping[str, Any]) -> datetime | None:
    return timestamp((obj.get("metadata") or {}).get("creationTimestamp"))


def timestamp(value: Any) -> datetime | None:
    try:
        return parse_timestamp(value) if isinstance(value, str) else None
    except ValueError:
        return None


def resource_kind(reference: Mapping[str, Any]) -> Kind:
    return Kind(str(reference.get("apiVersion") or ""), str(reference.get("kind") or ""))


def observed_kind(reference: Mapping[str, Any]) -> str:
    """How the topology names a created resource's kind (`v1/ConfigMap`), in `Observed` and `GetObject`.

    The same rule as `lessor.topology.keys.kind_name`: bare for lessor.dev kinds, else apiVersion/kind.
    """
    api_version, kind = str(reference.get("apiVersion") or ""), str(reference.get("kind") or "")
    if not api_version or (kind in _LESSOR_KINDS and api_version.partition("/")[0] == _LESSOR_GROUP):
        return kind
    return f"{api_version}/{kind}"


def resource_key(reference: Mapping[str, Any]) -> tuple[str, str, str]:
    """(observed kind, namespace, name) of a created resource, as its `Observed` messages carry it."""
    return observed_kind(reference), str(reference.get("namespace") or ""), str(reference.get("name") or "")


def reference_of(obj: Mapping[str, Any]) -> dict[str, str]:
    metadata = obj.get("metadata") or {}
    return {"apiVersion": str(obj.get("apiVersion") or ""), "kind": str(obj.get("kind") or ""),
            "name": str(metadata.get("name") or ""), "namespace": str(metadata.get("namespace") or "")}
