"""The render queue's Prometheus metrics: how long each tenant's template work waited for a render thread.

The key is the namespace whose work it is (a claim's, a bound handle's claim's, the
operator namespace for pools and unbound handles; for the webhook, the reviewed
object's). Its values are bounded by the cluster's namespaces, which an administrator
makes, not by anything a tenant can create inside one. The webhook's port is reachable
by more than the API server, though, and a forged review may name any namespace: past
`MAX_NAMESPACES` distinct values, the rest are counted under `OTHER`.
"""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Gauge, Histogram

from lessor.templates.budget import FairQueue

# A render takes milliseconds; waiting behind spinning templates is counted in seconds (the limit is 2 s).
_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0)
MAX_NAMESPACES = 1000
OTHER = "_other"


class RenderQueueMetrics:
    """Observes `queue` (the render threads `offload` uses) until `close`."""

    def __init__(self, registry: CollectorRegistry, queue: FairQueue) -> None:
        self._queue = queue
        self._waited = Histogram(
            "lessor_render_queue_seconds", "Time template work waited for a render thread, by the namespace "
            "whose work it is", ["namespace"], buckets=_BUCKETS, registry=registry)
        Gauge("lessor_render_queue_waiting", "Template work waiting for a render thread (all namespaces)",
              registry=registry).set_function(lambda: sum(queue.waiting().values()))
        self._seen: set[str] = set()
        queue.observers.append(self._observe)

    def _observe(self, key: str, seconds: float) -> None:
        if key not in self._seen:
            if len(self._seen) >= MAX_NAMESPACES:
                key = OTHER
            else:
                self._seen.add(key)
        self._waited.labels(key).observe(seconds)

    def close(self) -> None:
        if self._observe in self._queue.observers:
            self._queue.observers.remove(self._observe)
