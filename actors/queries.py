"""Questions actors ask the topology (the app's topology actor answers them by message).

The ones that only one domain asks live in that domain (a lease's world: `leasing/world.py`)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

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
class GetObjects:
    """→ tuple of the cached objects (None for each unknown), in the order of `names`: one question, not one
    per name (a waiting lease looks at its free candidates at each grace)."""

    kind: str
    namespace: str
    names: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ListObjects:
    """→ tuple of the cached objects of a kind in a namespace."""

    kind: str
    namespace: str


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
class FreeHandles:
    """→ tuple of the ResourceHandles with neither `spec.resourceClaim` nor `spec.resourcePool` whose resources
    use this provider: the free-standing handles a claim may bind."""

    namespace: str
    provider: str


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
