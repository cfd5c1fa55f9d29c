"""What makes the probes honest: a loop-lag watchdog for `/healthz`, an API-reachability check for `/readyz`.

- `/healthz` (liveness) fails while the event loop lags more than its
  threshold: a loop blocked by CPU-bound work (a user's regex, a huge object)
  serves nobody, and only a restart helps. A loop blocked for good cannot
  answer at all, which the kubelet's probe timeout catches.
- `/readyz` fails once the API server has not answered for longer than its
  threshold. Silence on the watches is not evidence (a quiet cluster is
  silent; a stopped API server keeps its connections open), so when nothing
  was heard for a while the checker lists one Exporter: that read needs
  etcd too, so it fails when etcd is down.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

from prometheus_client import CollectorRegistry, Histogram

from lessor.gateway import Gateway
from lessor.gateway.resources import EXPORTER

LAG_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class LoopLag:
    """Sleeps `interval` over and over and measures how late it wakes."""

    def __init__(self, threshold: float, registry: CollectorRegistry | None, *, interval: float = 0.5,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.threshold = threshold
        self.interval = interval
        self._clock = clock
        self._due = clock() + interval
        self.last = 0.0
        self._histogram = Histogram("lessor_event_loop_lag_seconds", "How late the event loop ran a timer "
                                    "(sampled every 0.5s)", buckets=LAG_BUCKETS, registry=registry)

    async def run(self) -> None:
        while True:
            self._due = self._clock() + self.interval
            await asyncio.sleep(self.interval)
            self.last = max(0.0, self._clock() - self._due)
            self._histogram.observe(self.last)

    def lag(self) -> float:
        """The last lag measured, or how overdue the watchdog is now if that is more."""
        return max(self.last, self._clock() - self._due)

    def healthy(self) -> tuple[bool, str]:
        lag = self.lag()
        if lag > self.threshold:
            return False, f"event loop lag {lag:.2f}s exceeds {self.threshold:g}s (--max-loop-lag)"
        return True, "ok"


class ApiReachability:
    """Whether the API server (and etcd behind it) answered within `threshold` seconds."""

    def __init__(self, gateway: Gateway, threshold: float) -> None:
        self.gateway = gateway
        self.threshold = threshold
        self.every = max(0.2, min(10.0, threshold / 3))

    async def run(self) -> None:
        """Ask something of the API server whenever it has been silent for `every` seconds."""
        reach = self.gateway.reachability
        while True:
            await asyncio.sleep(max(0.0, self.every - reach.silent_for()))
            if reach.silent_for() < self.every:
                continue
            try:
                async with asyncio.timeout(self.every):
                    await self.gateway.request("list", EXPORTER.kind, "GET", EXPORTER.path(), params={"limit": 1},
                                               timeout=self.every)
            except TimeoutError:
                reach.failed(f"no answer to a list of {EXPORTER.plural} within {self.every:g}s")
            except Exception:  # noqa: BLE001 - the gateway recorded the failure (or, for a 4xx, the answer)
                pass

    def ready(self) -> tuple[bool, str]:
        silent = self.gateway.reachability.silent_for()
        if silent > self.threshold:
            why = self.gateway.reachability.last_failure or "no answer"
            return False, (f"the API server has not answered for {silent:.0f}s (--api-unreachable-timeout "
                           f"{self.threshold:g}s); last failure: {why}")
        return True, "API server reachable"
