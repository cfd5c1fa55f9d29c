"""ResourcePoolScaling: a pool's one-off scale-up at a given time, decided by the pool's actor.

A scaling asks its pool for `spec.count` handles beyond `minAvailable`, at
`spec.at` (or at once). The pool creates them as it creates any handle
(within `maxUnready`), each labelled with the scaling's name, and counts
them in the scaling's `status.count`. What was created is never created
again: the count is the larger of the status and the live labelled
handles, so a handle created just before a crash, whose count was not yet
written, is still counted. A labelled handle the pool deletes as unhealthy
is taken off the count, so it is replaced (as Poolboy does). Labelled
handles are extra: they count as available, but are never deleted as a
surplus over `minAvailable`.

A scaling that names a pool not there yet waits for it: when the pool's
actor starts, it reads the scalings that name it, whatever came first (the
fallback Poolboy's #155 got wrong).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.views.provisioning import HandleView, ScalingView
from lessor.templates import format_timestamp, parse_timestamp

WAITING, SCALING, DONE = "waiting", "scaling", "done"


@dataclass(frozen=True)
class Scaling:
    """One ResourcePoolScaling, read for its pool; `created` is what status and live handles say was made."""

    name: str
    count: int
    at: datetime | None
    created: int
    status: Mapping[str, Any]

    def state(self, now: datetime) -> str:
        if self.at is not None and self.at > now:
            return WAITING
        return SCALING if self.created < self.count else DONE

    def missing(self, now: datetime) -> int:
        """How many handles to create now."""
        return max(0, self.count - self.created) if self.state(now) == SCALING else 0


def scalings_for(pool: str, objects: Iterable[Mapping[str, Any]],
                 handles: Iterable[Mapping[str, Any]]) -> list[Scaling]:
    """The live scalings that name `pool`, oldest first, each with what was created for it."""
    live: dict[str, int] = {}
    for handle in handles:
        label = scaling_of(handle)
        if label:
            live[label] = live.get(label, 0) + 1
    found = []
    for obj in objects:
        view = ScalingView.of(obj)
        if view.meta.deleting or view.pool != pool:
            continue
        spec, status = view.spec, view.status
        count = spec.get("count")
        if not isinstance(count, int) or isinstance(count, bool) or count < 0:
            continue  # the CRD keeps it a non-negative integer
        try:
            at = parse_timestamp(spec["at"]) if spec.get("at") is not None else None
        except (TypeError, ValueError):
            continue  # the CRD's pattern keeps it a time
        counted = status.get("count")
        counted = counted if isinstance(counted, int) and not isinstance(counted, bool) else 0
        name = view.name
        found.append(Scaling(name, count, at, max(counted, live.get(name, 0)), status))
    return sorted(found, key=lambda s: (s.at.timestamp() if s.at is not None else 0.0, s.name))


def scaling_of(handle: Mapping[str, Any]) -> str | None:
    """The scaling a handle was created for (its label), if any."""
    return HandleView.scaling_of(handle)


def next_at(scalings: Iterable[Scaling], now: datetime) -> datetime | None:
    """When the next waiting scaling is due (the pool's actor sets a timer for it)."""
    times = [s.at for s in scalings if s.at is not None and s.at > now]
    return min(times) if times else None


def status_of(scaling: Scaling, now: datetime, *, created: int | None = None, message: str = "") -> dict[str, Any]:
    """`status` for a scaling: count, state and what the pool does for it."""
    made = scaling.created if created is None else created
    state = Scaling(scaling.name, scaling.count, scaling.at, made, scaling.status).state(now)
    if not message:
        at = format_timestamp(scaling.at) if scaling.at is not None else "once"
        message = {WAITING: f"the pool creates {scaling.count} handles at {at}",
                   SCALING: f"{made} of {scaling.count} handles created",
                   DONE: f"{made} of {scaling.count} handles created"}[state]
    return {"count": made, "state": state, "message": message}
