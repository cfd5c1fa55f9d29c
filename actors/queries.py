"""Questions actors ask the topology (the app's topology actor answers them by message)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lessor.mailbox import Actor
from lessor.model.kinds import PROVIDER

from .access_policy import PolicySet
from .provider import Provider, provider_from

TOPOLOGY = "topology"
"""The topology actor's address."""

Object = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class GetObject:
    """→ the cached object, or None."""

    kind: str
    namespace: str
    name: str


@dataclass(frozen=True, slots=True)
class ListObjects:
    """→ tuple of the cached objects of a kind in a namespace."""

    kind: str
    namespace: str


@dataclass(frozen=True, slots=True)
class LeaseWorld:
    """→ `LeaseWorldView`: what a lease needs to resolve its request."""

    namespace: str
    selector: Object | None
    exporter_ref: str | None
    client: str


@dataclass(frozen=True, slots=True)
class LeaseWorldView:
    exporters: tuple[Object, ...]  # the selected (or pinned) exporters
    policies: PolicySet  # the namespace's ExporterAccessPolicies, compiled: shared, never changed by the asker
    client: Object | None
    holders: Mapping[str, Object]  # lease name -> Lease, for the exporters' current holders


@dataclass(frozen=True, slots=True)
class WaitingLeases:
    """→ tuple of names of the live, not yet granted leases that select or pin this exporter."""

    namespace: str
    exporter: str


@dataclass(frozen=True, slots=True)
class ReadyHolders:
    """→ tuple of names of the leases not ended whose status says Ready on this exporter.

    More than the exporter's own `status.leaseRef` only when an eviction's loser had not written
    its end yet as the operator stopped: the exporter ends those before it grants anything."""

    namespace: str
    exporter: str


@dataclass(frozen=True, slots=True)
class PoolHandles:
    """→ tuple of the ResourceHandles whose `spec.resourcePool` names this pool, bound or not."""

    namespace: str
    pool: str


@dataclass(frozen=True, slots=True)
class ClaimHandles:
    """→ tuple of the ResourceHandles whose `spec.resourceClaim` names this claim (one, unless a crash made two)."""

    namespace: str
    claim: str


@dataclass(frozen=True, slots=True)
class HandleResources:
    """→ tuple of the created resources the topology knows for this handle (labelled with it, or referenced)."""

    namespace: str
    handle: str


async def load_providers(actor: Actor, namespace: str) -> dict[str, Provider]:
    """The compiled providers of the operator's namespace, by name, from the topology's cache."""
    objects = await actor.ask(TOPOLOGY, ListObjects(PROVIDER.kind, namespace))
    providers = (provider_from(obj) for obj in objects)
    return {provider.name: provider for provider in providers}
