"""Metrics about the objects lessor manages, read from the informer caches when scraped.

Like kube-state-metrics: leases and claims by state and reason, pools' available and ready
handles. Nothing is counted on the hot path; a scrape walks the caches once. The grant latency
is the exception: it is observed when a lease's watch event first shows it Ready. Also the
standard process and Python runtime collectors, which a custom registry does not get by itself.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, GCCollector, Histogram, PlatformCollector, ProcessCollector
from prometheus_client.core import GaugeMetricFamily, Metric

from lessor.gateway.informer import WatchEvent
from lessor.model.fields import timestamp
from lessor.model.views import View
from lessor.model.views.conditions import StatusView
from lessor.model.views.leasing import READY, LeaseView

# Seconds from a lease's creation to its Ready condition (timestamps have one-second resolution).
GRANT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 300.0, 900.0, 3600.0, 4 * 3600.0)

Objects = Callable[[str], Iterable[Mapping[str, Any]]]
"""The cached objects of a kind."""


def runtime_collectors(registry: CollectorRegistry) -> None:
    """process_* (CPU, memory, file descriptors, start time) and python_* (GC, version)."""
    ProcessCollector(registry=registry)
    PlatformCollector(registry=registry)
    GCCollector(registry=registry)


class StateMetrics:
    """Register on `registry`; call `observe` with every watch event."""

    def __init__(self, objects: Objects, registry: CollectorRegistry) -> None:
        self._objects = objects
        self._granted: set[str] = set()  # uids of leases already seen Ready, so each counts once
        self._grant = Histogram(
            "lessor_lease_grant_seconds", "Seconds from a lease's creation to its Ready condition "
            "(granted an exporter), observed when the operator sees it", buckets=GRANT_BUCKETS, registry=registry)
        registry.register(self)

    def observe(self, event: WatchEvent) -> None:
        if event.object.get("kind") != "Lease":
            return
        lease = LeaseView.of(event.object)
        uid = lease.meta.uid
        if event.type == "DELETED" or lease.ended:
            self._granted.discard(uid)
            return
        ready = lease.condition(READY)
        if uid in self._granted or ready is None or not ready.true:
            return
        self._granted.add(uid)
        if event.type != "MODIFIED":
            return  # granted before this operator started watching: not a grant it saw
        created = lease.meta.created
        granted = timestamp(ready.last_transition)
        if created is not None and granted is not None:
            self._grant.observe(max(0.0, (granted - created).total_seconds()))

    def describe(self) -> Iterator[Metric]:
        return iter(_families())

    def collect(self) -> Iterator[Metric]:
        leases, claims, handles = _families()
        for (state, reason), count in Counter(_lease_state(o) for o in self._objects("Lease")).items():
            leases.add_metric([state, reason], count)
        for (state, reason), count in Counter(_claim_state(o) for o in self._objects("ResourceClaim")).items():
            claims.add_metric([state, reason], count)
        for pool in map(View.of, self._objects("ResourcePool")):
            counts = pool.status.get("resourceHandleCount") or {}
            for state in ("available", "ready"):
                handles.add_metric([pool.namespace, pool.name, state], float(counts.get(state) or 0))
            handles.add_metric([pool.namespace, pool.name, "min_available"],
                               float(pool.spec.get("minAvailable") or 0))
        yield from (leases, claims, handles)


def _families() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    return (
        GaugeMetricFamily("lessor_leases", "Leases by state (ready, waiting, ended) and the reason of their "
                          "Ready condition (empty: not decided yet)", labels=["state", "reason"]),
        GaugeMetricFamily("lessor_resource_claims", "ResourceClaims by state (ready, bound, unbound) and the "
                          "reason of their Ready condition", labels=["state", "reason"]),
        GaugeMetricFamily("lessor_pool_handles", "A ResourcePool's handles: available (unbound) and ready, "
                          "and the pool's minAvailable", labels=["namespace", "pool", "state"]),
    )


def _lease_state(obj: Mapping[str, Any]) -> tuple[str, str]:
    lease = LeaseView.of(obj)
    ready = lease.condition(READY)
    reason = ready.reason if ready is not None else ""
    if lease.ended:
        return "ended", reason
    return ("ready" if ready is not None and ready.true else "waiting"), reason


def _claim_state(obj: Mapping[str, Any]) -> tuple[str, str]:
    claim = StatusView.of(obj)
    ready = claim.condition(READY)
    reason = ready.reason if ready is not None else ""
    if ready is not None and ready.true:
        return "ready", reason
    return ("bound" if claim.is_true("Bound") else "unbound"), reason
