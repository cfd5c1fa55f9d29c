"""The questions only the provisioning domain asks the topology, about handles: answered by the app
(lessor/app/topology_questions.py) from the topology's edges, each a tuple of objects."""

from __future__ import annotations

from dataclasses import dataclass


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
