"""What an exporter is at a moment: online, ready for a new lease, and held by which lease.

Pure: the caller passes `now`. The exporter actor reads liveness for its
`Online` condition and for when it may offer itself; the lease actor builds
an `ExporterView` of each exporter it may take, for `resolution.resolve`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.model.fields import Holder, lease_ref, timestamp

__all__ = [
    "DEFAULT_HEARTBEAT_TIMEOUT",
    "READY_STATUSES",
    "ExporterView",
    "Holder",
    "exporter_online",
    "exporter_ready",
    "may_take",
]

DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=60)
READY_STATUSES = frozenset({"Available", "Unspecified", ""})
"""`status.exporterStatus` values that mean ready for a new lease (absent counts as empty)."""


def exporter_ready(exporter_status: str | None) -> bool:
    """`Available`, `Unspecified` or empty (or absent) mean ready; anything else (hooks running, Offline) not."""
    return (exporter_status or "") in READY_STATUSES


def exporter_online(
    last_seen: datetime | None, exporter_status: str | None, *, now: datetime,
    timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT,
) -> bool:
    """Online while the heartbeat is newer than `timeout` and the agent does not say `Offline`.

    A `lastSeen` ahead of `now` (clock skew) counts as fresh; no `lastSeen` as never seen.
    """
    if last_seen is None or exporter_status == "Offline":
        return False
    return now - last_seen < timeout


def may_take(*, enabled: bool, allow_disabled: bool, holder: Holder | None, spot: bool) -> bool:
    """Whether a lease may have the exporter now, given its terms there: the exporter is enabled (or the
    lease allows disabled ones), and free, or held by a spot lease that this lease's non-spot approval
    evicts. The one rule: the exporter actor offers by it, the lease's resolution orders candidates by it."""
    return (enabled or allow_disabled) and (holder is None or (holder.spot and not spot))


@dataclass(frozen=True, slots=True)
class ExporterView:
    """What resolution needs to know of one exporter."""

    name: str
    labels: Mapping[str, str]
    enabled: bool = True
    online: bool = True
    ready: bool = True
    holder: Holder | None = None
    seen: bool = True  # its agent has written `lastSeen` at least once

    @classmethod
    def from_object(
        cls, exporter: Mapping[str, Any], *, now: datetime,
        heartbeat_timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT, holder: Holder | None = None,
    ) -> ExporterView:
        """A view of an Exporter object at `now`.

        `holder` comes from the holding Lease's status; without it, a
        `status.leaseRef.name` is taken as a non-spot holder at priority 0,
        so a holder whose terms are unknown is never evicted.
        """
        metadata = exporter.get("metadata") or {}
        spec = exporter.get("spec") or {}
        status = exporter.get("status") or {}
        exporter_status = status.get("exporterStatus")
        exporter_status = exporter_status if isinstance(exporter_status, str) else ""
        last_seen = timestamp(status.get("lastSeen"))
        if holder is None:
            name = lease_ref(exporter)
            holder = Holder(name) if name else None
        return cls(
            name=metadata.get("name", ""),
            labels=metadata.get("labels") or {},
            enabled=spec.get("enabled") is not False,
            online=exporter_online(last_seen, exporter_status, now=now, timeout=heartbeat_timeout),
            ready=exporter_ready(exporter_status),
            holder=holder,
            seen=last_seen is not None,
        )
