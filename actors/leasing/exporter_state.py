"""What an exporter is at a moment: online, ready for a new lease, and held by which lease.

Pure: the caller passes `now`. What "online", "ready", "enabled" and "held by" mean is the object view's
(`lessor.model.views.leasing.ExporterView`); the lease actor takes an `ExporterState` of each exporter it may
take, for `resolution.resolve`, and both the exporter actor and resolution decide by `may_take`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta

from lessor.model.views.leasing import DEFAULT_HEARTBEAT_TIMEOUT, ExporterView, Holder

__all__ = ["DEFAULT_HEARTBEAT_TIMEOUT", "ExporterState", "Holder", "may_take"]


def may_take(*, enabled: bool, allow_disabled: bool, holder: Holder | None, spot: bool) -> bool:
    """Whether a lease may have the exporter now, given its terms there: the exporter is enabled (or the
    lease allows disabled ones), and free, or held by a spot lease that this lease's non-spot approval
    evicts. The one rule: the exporter actor offers by it, the lease's resolution orders candidates by it."""
    return (enabled or allow_disabled) and (holder is None or (holder.spot and not spot))


@dataclass(frozen=True, slots=True)
class ExporterState:
    """What resolution needs to know of one exporter at a moment."""

    name: str
    labels: Mapping[str, str]
    enabled: bool = True
    online: bool = True
    ready: bool = True
    holder: Holder | None = None
    seen: bool = True  # its agent has written `lastSeen` at least once

    @classmethod
    def of(
        cls, exporter: ExporterView, *, now: datetime,
        heartbeat_timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT, holder: Holder | None = None,
    ) -> ExporterState:
        """The exporter as it is at `now`.

        `holder` comes from the holding Lease's status; without it, the lease its `status.leaseRef.name`
        names is taken as a non-spot holder at priority 0, so a holder whose terms are unknown is never
        evicted.
        """
        if holder is None and (name := exporter.held_by) is not None:
            holder = Holder(name)
        return cls(
            name=exporter.name,
            labels=exporter.meta.labels,
            enabled=exporter.enabled,
            online=exporter.online(now, heartbeat_timeout),
            ready=exporter.ready,
            holder=holder,
            seen=exporter.seen,
        )
