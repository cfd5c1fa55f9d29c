"""What an exporter is at a moment: online, ready for a new lease, and held by which lease.

Pure: the caller passes `now`. What "online", "ready", "enabled" and "held by" mean is the object view's
(`lessor.model.views.leasing.ExporterView`); the lease actor takes an `ExporterState` of each exporter it may
take, for `resolution.resolve`, and both the exporter actor and resolution decide by `may_take`.

`ExporterStates` keeps each exporter's state once per version, for every lease of the process: in a storm
the forty leases waiting on a group of twenty exporters resolve again whenever one of them changes, and
building the twenty states each time was most of that work.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.model.views.leasing import DEFAULT_HEARTBEAT_TIMEOUT, ExporterView, Holder, LeaseView, holder_of

__all__ = ["DEFAULT_HEARTBEAT_TIMEOUT", "ExporterState", "ExporterStates", "Holder", "may_take"]

KEPT = 16_384
"""Exporters whose state `ExporterStates` keeps (the oldest kept goes first): as many as the topology keeps views."""


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


@dataclass(frozen=True, slots=True)
class _Kept:
    exporter: Mapping[str, Any]  # the exporter's version the state was built from
    holder: Mapping[str, Any] | None  # and its holding lease's, when that lease is known
    timeout: timedelta
    expiry: datetime | None  # the state is online before this time, offline from it; None: whatever the time
    state: ExporterState


class ExporterStates:
    """Each exporter's `ExporterState`, built once per version of it and of its holding lease, and shared.

    Exactly what `ExporterState.of` answers at every `now`: the time enters a state only through `online`,
    true before the heartbeat's expiry (`lastSeen` + the timeout) and false from it, so a kept state serves
    every `now` on its side of the expiry, and the other side builds it again. Versions are compared by
    identity: the topology's views share each version's one body, and a new version has a new one.
    """

    __slots__ = ("_kept",)

    def __init__(self) -> None:
        self._kept: dict[tuple[str, str], _Kept] = {}

    def of(self, namespace: str, exporter: ExporterView, holders: Mapping[str, LeaseView], *, now: datetime,
           heartbeat_timeout: timedelta) -> ExporterState:
        """`ExporterState.of(exporter, now=now, ...)` with its holder's terms read from `holders` (the leases
        by name; the one `status.leaseRef` names, unless it is unknown)."""
        key = (namespace, exporter.name)
        kept = self._kept.get(key)
        if kept is not None and kept.exporter is exporter.body and kept.timeout == heartbeat_timeout:
            holder = kept.state.holder
            found = holders.get(holder.lease) if holder is not None else None
            if ((found.body if found is not None else None) is kept.holder
                    and (kept.expiry is None or (now < kept.expiry) is kept.state.online)):
                return kept.state
        ref = exporter.held_by
        found = holders.get(ref) if ref is not None else None
        state = ExporterState.of(exporter, now=now, heartbeat_timeout=heartbeat_timeout,
                                 holder=None if ref is None else holder_of(ref, found))
        last_seen = exporter.last_seen
        expiry = None if last_seen is None or exporter.says_offline else last_seen + heartbeat_timeout
        if kept is None and len(self._kept) >= KEPT:
            del self._kept[next(iter(self._kept))]
        self._kept[key] = _Kept(exporter.body, found.body if found is not None else None, heartbeat_timeout,
                                expiry, state)
        return state
