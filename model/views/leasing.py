"""The views of the leasing kinds: Exporter, Lease, Client, ExporterAccessPolicy.

What an exporter's or a lease's fields mean is said here once: a lease has "ended" when `status.ended` is
true (the `lessor.dev/lease-ended` label is only its index for `kubectl -l`, written after it), an exporter is
"held by" the lease its `status.leaseRef.name` names, "enabled" unless `spec.enabled` is false, "online"
while its agent's heartbeat is fresh and it does not say Offline, "ready" for a new lease while its agent
says so. The actors, the topology, the webhook and the gRPC service read these properties, not the body.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from ..fields import Body, mapping_at, timestamp
from .conditions import StatusView
from .meta import ref_name, strings, text

READY = "Ready"
DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=60)
READY_STATUSES = frozenset({"Available", "Unspecified", ""})
"""`status.exporterStatus` values that mean ready for a new lease (absent counts as empty)."""
OFFLINE = "Offline"


def _ended(status: Mapping[str, Any]) -> bool:
    return status.get("ended") is True


@dataclass(frozen=True, slots=True)
class ExporterView(StatusView):
    """An Exporter: a device its agent serves, leased to one lease at a time."""

    @property
    def enabled(self) -> bool:
        """Leasable by leases that do not `allowDisabled`: unless `spec.enabled` is false."""
        return self.spec.get("enabled") is not False

    @property
    def held_by(self) -> str | None:
        """The lease that holds it: `status.leaseRef.name` (the exporter actor's commit point)."""
        return ref_name(self.status.get("leaseRef"))

    @property
    def agent_status(self) -> str:
        """`status.exporterStatus` as its agent reports it (Available, LeaseReady, Offline...); "" when none."""
        return text(self.status.get("exporterStatus")) or ""

    @property
    def status_message(self) -> str:
        return text(self.status.get("statusMessage")) or ""

    @property
    def last_seen(self) -> datetime | None:
        """The agent's last heartbeat (`status.lastSeen`); None when never written or unreadable."""
        return timestamp(self.status.get("lastSeen"))

    @property
    def seen(self) -> bool:
        """Whether its agent has written `lastSeen` at least once."""
        return self.last_seen is not None

    @property
    def ready(self) -> bool:
        """Ready for a new lease: `Available`, `Unspecified` or no status; anything else (hooks running,
        Offline) not."""
        return self.agent_status in READY_STATUSES

    @property
    def says_offline(self) -> bool:
        return self.agent_status == OFFLINE

    def online(self, now: datetime, timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT) -> bool:
        """Online while the heartbeat is newer than `timeout` and the agent does not say `Offline`.

        A `lastSeen` ahead of `now` (clock skew) counts as fresh; no `lastSeen` as never seen.
        """
        last_seen = self.last_seen
        if last_seen is None or self.says_offline:
            return False
        return now - last_seen < timeout

    @property
    def devices(self) -> tuple[Any, ...]:
        """`status.devices`, as its agent reported them."""
        devices = self.status.get("devices")
        return tuple(devices) if isinstance(devices, list) else ()

    @property
    def credential(self) -> str | None:
        """The Secret named by `status.credential.name` (its gRPC token)."""
        return ref_name(self.status.get("credential"))

    @property
    def endpoint(self) -> str | None:
        return text(self.status.get("endpoint"))


@dataclass(frozen=True, slots=True)
class LeaseView(StatusView):
    """A Lease: a client's request for one exporter, and what it was granted."""

    # --- spec ---

    @property
    def client(self) -> str | None:
        """The Client asking: `spec.clientRef.name`."""
        return ref_name(self.spec.get("clientRef"))

    @property
    def selector(self) -> Any:
        """`spec.selector` as written (parsed, with its errors, by `model.selectors`); None when absent."""
        return self.spec.get("selector")

    @property
    def requested_exporter(self) -> str | None:
        """The exporter asked for by name: `spec.exporterRef.name`."""
        return ref_name(self.spec.get("exporterRef"))

    @property
    def release(self) -> bool:
        """Whether the client gave the lease back (`spec.release`)."""
        return self.spec.get("release") is True

    @property
    def allow_disabled(self) -> bool:
        return self.spec.get("allowDisabled") is True

    @property
    def tags(self) -> Mapping[str, str]:
        """`spec.tags` (immutable; copied onto the lease as labels)."""
        return strings(self.spec.get("tags"))

    @property
    def duration_text(self) -> str | None:
        """`spec.duration` as written (a Go duration, parsed with its errors by `leasing.spec`)."""
        return text(self.spec.get("duration"))

    @property
    def begin_requested(self) -> datetime | None:
        """`spec.beginTime`, when readable."""
        return timestamp(self.spec.get("beginTime"))

    @property
    def end_requested(self) -> datetime | None:
        """`spec.endTime`, when readable."""
        return timestamp(self.spec.get("endTime"))

    # --- status ---

    @property
    def ended(self) -> bool:
        """Ended, for good: `status.ended` is true. The `lessor.dev/lease-ended` label follows it; by itself it
        ends nothing."""
        return _ended(self.status)

    @staticmethod
    def ended_body(body: Body | None) -> bool:
        """`ended`, without building the view: for the topology, which asks it of every lease event."""
        return _ended(mapping_at(body, "status"))

    @property
    def exporter(self) -> str | None:
        """The exporter it was granted: `status.exporterRef.name`."""
        return ref_name(self.status.get("exporterRef"))

    @property
    def begin(self) -> datetime | None:
        """When it was granted (`status.beginTime`)."""
        return timestamp(self.status.get("beginTime"))

    @property
    def end(self) -> datetime | None:
        """When it ends or ended (`status.endTime`)."""
        return timestamp(self.status.get("endTime"))

    @property
    def end_text(self) -> str | None:
        """`status.endTime` as written (compared before a write, to skip an unchanged one)."""
        return text(self.status.get("endTime"))

    @property
    def priority(self) -> int:
        """The priority it was granted with (`status.priority`); 0 when unknown."""
        try:
            return int(self.status.get("priority") or 0)
        except (TypeError, ValueError):
            return 0

    @property
    def spot(self) -> bool:
        """Whether it was granted as spot access (`status.spotAccess`): a non-spot lease may evict it."""
        return self.status.get("spotAccess") is True

    @property
    def ready(self) -> bool:
        """Its `Ready` condition is True (granted, and not ended since)."""
        return self.is_true(READY)

    def ready_on(self, exporter: str) -> bool:
        """Whether it shows Ready on `exporter`: not ended, granted that exporter, Ready."""
        return not self.ended and self.exporter == exporter and self.ready


@dataclass(frozen=True, slots=True)
class ClientView(StatusView):
    """A Client: who may ask for leases (its labels are what policies select)."""

    @property
    def labels(self) -> Mapping[str, str]:
        return self.meta.labels

    @property
    def credential(self) -> str | None:
        """The Secret named by `status.credential.name` (its gRPC token)."""
        return ref_name(self.status.get("credential"))

    @property
    def endpoint(self) -> str | None:
        return text(self.status.get("endpoint"))


@dataclass(frozen=True, slots=True)
class PolicyView(StatusView):
    """An ExporterAccessPolicy: which clients may lease which exporters, at what priority."""

    @property
    def exporter_selector(self) -> Any:
        """`spec.exporterSelector` as written (compiled by `leasing.access_policy`); None when absent."""
        return self.spec.get("exporterSelector")

    @property
    def rules(self) -> tuple[Any, ...]:
        """`spec.policies`, each as written (a malformed one is the compiler's to report, by its index)."""
        rules = self.spec.get("policies")
        return tuple(rules) if isinstance(rules, list) else ()

    @property
    def client_selectors(self) -> tuple[tuple[str, Any], ...]:
        """Each `spec.policies[i].from[j].clientSelector`, with the field that spells it."""
        return tuple(
            (f"spec.policies[{i}].from[{j}].clientSelector", source.get("clientSelector"))
            for i, rule in enumerate(self.rules) if isinstance(rule, Mapping)
            for j, source in enumerate(_list(rule.get("from"))) if isinstance(source, Mapping)
        )


def _list(value: Any) -> tuple[Any, ...]:
    return tuple(value) if isinstance(value, list) else ()


@dataclass(frozen=True, slots=True)
class Holder:
    """The lease that holds an exporter now, with the priority and spot flag it was granted with."""

    lease: str
    priority: int = 0
    spot: bool = False


def holder_of(lease: str, view: LeaseView | None) -> Holder:
    """The holder `lease` is, with the terms its status records (priority 0 and not spot when unknown, so a
    holder whose terms are unknown is never evicted)."""
    if view is None:
        return Holder(lease)
    return Holder(lease, view.priority, view.spot)

