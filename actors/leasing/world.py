"""The questions only the leasing domain asks the topology: a lease's world, in one answer; an exporter's
waiting leases and Ready holders.

In the leasing domain (not with the shared queries): the app answers them (lessor/app/topology_questions.py),
and the world carries the namespace's compiled `PolicySet`, which it keeps per namespace and hands to every
lease as is.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from lessor.model.views.leasing import ClientView, ExporterView, LeaseView

from .access_policy import PolicySet

Object = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class LeaseWorld:
    """→ `LeaseWorldView`: what a lease needs to resolve its request."""

    namespace: str
    selector: Object | None
    exporter_ref: str | None
    client: str


@dataclass(frozen=True, slots=True)
class LeaseWorldView:
    """The topology's views (shared by every lease that asks: immutable), built once per object version."""

    exporters: tuple[ExporterView, ...]  # the selected (or pinned) exporters
    policies: PolicySet  # the namespace's ExporterAccessPolicies, compiled: shared, never changed by the asker
    client: ClientView | None
    holders: Mapping[str, LeaseView]  # lease name -> Lease, for the exporters' current holders


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
