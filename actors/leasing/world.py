"""The question a lease asks the topology: its world, in one answer.

In the leasing domain (not with the shared queries) because the answer carries the namespace's compiled
`PolicySet`, which the topology keeps per namespace and hands to every lease as is.
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
