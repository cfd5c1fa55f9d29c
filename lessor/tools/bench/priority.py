"""Was priority order kept? The judge of a lease storm's release phase.

A storm grants what it can; then some holders release at once, and the
leases still waiting take the freed exporters. Within a group of identical
exporters, a freed exporter must go to the waiting lease of the highest
priority: a lease granted in the release phase while a lease of a higher
priority of the same group still waits at the end is an inversion (the
issue that asked for this counted 242 of 487 regrants going to a silver
lease while a gold one waited). The judge also counts what a settled storm
must not show: a lease with no status, a non-spot lease waiting while a spot
lease holds in its group (it should have evicted it), and a lease waiting
while its group has a free exporter.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from lessor.model.views.leasing import LeaseView


@dataclass(frozen=True, slots=True)
class Terms:
    """What the storm gave a lease: its group of exporters, the priority of its client's policy, spot or not."""

    group: str
    priority: int
    spot: bool


def _ready(lease: Mapping[str, Any]) -> bool:
    return LeaseView.of(lease).is_true("Ready")


def _has_status(lease: Mapping[str, Any]) -> bool:
    return LeaseView.of(lease).condition("Ready") is not None


def judge(final: Mapping[str, Mapping[str, Any]], granted: Mapping[str, float], release_at: float,
          terms_of: Callable[[str], Terms], exporters_per_group: Mapping[str, int]) -> dict[str, Any]:
    """`final`: every lease as last seen, by name; `granted`: when each first reported Ready; `release_at`: when
    the releases were sent. Counts are of leases; the examples name a few, for a look with kubectl."""
    waiting: dict[str, list[str]] = defaultdict(list)
    holding: Counter[str] = Counter()
    spot_holding: Counter[str] = Counter()
    no_status: list[str] = []
    for name, lease in final.items():
        terms = terms_of(name)
        if not _has_status(lease):
            no_status.append(name)
        if LeaseView.of(lease).ended:
            continue
        if _ready(lease):
            holding[terms.group] += 1
            spot_holding[terms.group] += terms.spot
        else:
            waiting[terms.group].append(name)
    regrants = [name for name, at in granted.items() if at >= release_at and name in final]
    inversions = []
    for name in regrants:
        terms = terms_of(name)
        higher = [w for w in waiting[terms.group] if terms_of(w).priority > terms.priority]
        if higher:
            inversions.append(f"{name} (priority {terms.priority}) granted while {higher[0]} "
                              f"(priority {terms_of(higher[0]).priority}) still waits")
    spot_over_waiters = [f"group {g}: {spot_holding[g]} spot holders, non-spot {w[0]} waits"
                         for g, w in sorted(waiting.items())
                         if spot_holding[g] and any(not terms_of(n).spot for n in w)]
    free_while_waiting = [f"group {g}: {exporters_per_group.get(g, 0) - holding[g]} free, {w[0]} waits"
                          for g, w in sorted(waiting.items()) if w and holding[g] < exporters_per_group.get(g, 0)]
    return {
        "regrants": len(regrants),
        "priority_inversions": len(inversions),
        "leases_without_status": len(no_status),
        "groups_with_spot_holding_over_a_waiter": len(spot_over_waiters),
        "groups_with_a_free_exporter_and_a_waiter": len(free_while_waiting),
        "examples": [*inversions[:3], *no_status[:3], *spot_over_waiters[:3], *free_while_waiting[:3]],
    }
