"""A claim storm against the real control plane, judged against the API server's own ceiling.

One ResourceProvider of ConfigMaps, one ResourcePool keeping 100 handles
ready, then 500 claims at once for the pool's template: the first ones take
the pool's handles, the rest get handles of their own while the pool
replenishes. The operator runs as its own process (`lessor run`), so its
RSS, CPU time and API requests are its own.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import tempfile
import time
from pathlib import Path
from typing import Any

from lessor.tools.bench.apiserver import measure_ceiling
from lessor.tools.bench.common import (
    WRITE_VERBS,
    api_requests,
    event_counters,
    event_requests,
    events_report,
    events_written,
    gather_limited,
    machine,
    percentile,
    process_stats,
    request_deltas,
    say,
    start_operator,
    stop_operator,
    wait_http,
)
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway, Informer, WatchEvent
from lessor.gateway.resources import CLAIM, CONFIGMAP, HANDLE, NAMESPACE, POOL, PROVIDER
from lessor.app.install import install
from lessor.model.fields import mapping_at
from lessor.model.labels import HANDLE_NAME
from lessor.model.views.meta import Meta
from lessor.model.views.provisioning import ClaimView, PoolView

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
NS = "storm"
TEMPLATE = {"data": {"size": "small"}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--claims", type=int, default=500, help="default: %(default)s")
    parser.add_argument("--min-available", type=int, default=100, help="the pool's minAvailable (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="give up after this many seconds (default: %(default)s)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        async with ControlPlane(Path(tmp) / "cp", ensure_binaries(say), controller_manager=False, progress=say) as cp:
            async with await Gateway.connect(str(cp.kubeconfig)) as kube:
                await install(kube, OPS, progress=say)
                await _lab(kube, args)
                storm = await _storm(kube, cp.kubeconfig, Path(tmp), args)
                # Measured after the storm, with the operator stopped: its thousands of writes stay out
                # of the storm's.
                say("measuring the API server's ceiling")
                ceiling = await measure_ceiling(kube, seconds=3, watch_samples=50)
    allowed = ceiling["status_patches_per_second"]["8"] / max(storm["api_writes_per_claim"], 1e-9)
    return {
        "benchmark": "claims",
        "machine": machine(),
        "setup": {"claims": args.claims, "pool_min_available": args.min_available, "providers": 1,
                  "resource": "ConfigMap"},
        **storm,
        "apiserver_ceiling": ceiling,
        "ratio_to_ceiling": round(storm["claims_bound_per_second"] / allowed, 3),
        "ratio_explained": "bound/s divided by (status patches/s at 8 writers / API writes per claim)",
    }


async def _lab(kube: Gateway, args: argparse.Namespace) -> None:
    say(f"creating a provider and a pool of {args.min_available}")
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": "env"},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": OPS}},
                                               "matchIgnore": ["/data/owner"]}})
    await kube.create(POOL, OPS, {"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": "envs"},
                                  "spec": {"minAvailable": args.min_available,
                                           "resources": [{"provider": {"name": "env"}, "template": TEMPLATE}]}})


async def _pool_ready(kube: Gateway, count: int, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        pool = await kube.get(POOL, OPS, "envs")
        if mapping_at(PoolView.of(pool).status, "resourceHandleCount").get("ready") == count:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError(f"the pool did not get {count} ready handles")


async def _storm(kube: Gateway, kubeconfig: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    health, metrics = free_port(), free_port()
    proc = start_operator(kubeconfig, tmp, health, metrics)
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
        await _pool_ready(kube, args.min_available)  # provisioning the pool is set-up, not the storm
        before, events_before = api_requests(metrics), event_counters(metrics)
        rss_before, cpu_before = process_stats(proc.pid)

        created: dict[str, float] = {}
        bound: dict[str, float] = {}
        ready: dict[str, float] = {}

        def on_event(event: WatchEvent) -> None:
            claim = ClaimView.of(event.object)
            if claim.is_true("Bound"):
                bound.setdefault(claim.name, time.perf_counter())
            if claim.is_true("Ready"):
                ready.setdefault(claim.name, time.perf_counter())

        seen = _Writes()

        def on_claim(event: WatchEvent) -> None:
            seen.on_event("ResourceClaim", event)
            on_event(event)

        informer = Informer(kube, CLAIM, on_claim, namespace=NS)
        others = [Informer(kube, HANDLE, functools.partial(seen.on_event, "ResourceHandle"), namespace=OPS),
                  Informer(kube, CONFIGMAP, functools.partial(seen.on_event, "ConfigMap"), namespace=OPS,
                           label_selector=HANDLE_NAME)]
        watch = asyncio.gather(*(i.run() for i in (informer, *others)))
        for each in (informer, *others):
            await each.synced.wait()
        seen.counting = True
        say(f"creating {args.claims} claims at once")
        started = time.perf_counter()

        async def claim(i: int) -> None:
            name = f"c{i:05d}"
            created[name] = time.perf_counter()
            await kube.create(CLAIM, NS, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                          "spec": {"resources": [{"provider": {"name": "env"}, "template": {
                                              "data": {**TEMPLATE["data"], "owner": name}}}]}})

        await gather_limited([claim(i) for i in range(args.claims)], limit=32)
        created_by = time.perf_counter()
        deadline = time.monotonic() + args.timeout
        last = -1
        while len(ready) < args.claims and time.monotonic() < deadline:
            if len(ready) != last:
                say(f"{len(bound)} bound, {len(ready)} ready of {args.claims}")
                last = len(ready)
            await asyncio.sleep(1)
        await _pool_ready(kube, args.min_available)  # replenishing is part of the cost of the storm
        settled = time.perf_counter()
        await asyncio.sleep(2)
        after = api_requests(metrics)
        seen.counting = False
        rss, cpu_after = process_stats(proc.pid)
        lag = await events_written(metrics)  # Events wait behind the work's writes: counted once written
        events_after = event_counters(metrics)
        _, event_writes = event_requests(request_deltas(before, api_requests(metrics)))
        watch.cancel()
    finally:
        await stop_operator(proc)
    latencies = [(ready[n] - created[n]) * 1000 for n in ready if n in created]
    requests, _ = event_requests(request_deltas(before, after))
    writes = sum(v for k, v in requests.items() if k.split()[0] in WRITE_VERBS)
    count = max(len(bound), 1)
    done = max(bound.values(), default=time.perf_counter())
    return {
        "claims_bound": len(bound),
        "claims_ready": len(ready),
        "claims_bound_per_second": round(len(bound) / max(done - started, 1e-9), 1),
        "create_seconds": round(created_by - started, 2),
        "create_to_ready_ms": {"p50": round(percentile(latencies, 50), 1), "p99": round(percentile(latencies, 99), 1)},
        "storm_to_pool_replenished_seconds": round(settled - started, 2),
        "api_requests_per_claim": {k: round(v / count, 3) for k, v in sorted(requests.items())},
        "api_writes_per_claim": round(writes / count, 3),
        "writes_per_claim_seen": {k: round(v / count, 3) for k, v in sorted(seen.counts.items())},
        "writes_seen_explained": "each write as its watch event shows it: create, or patch with the fields it changed "
                                 "(metadata.managedFields alone: a field hand-over); Events apart",
        "list_calls_during_storm": sum(v for k, v in requests.items() if k.startswith("list ")),
        "events": {**events_report(event_writes, events_before, events_after, count, lag),
                   "unit": "claim", "explained": "Event writes are not in the API writes above"},
        "operator_rss_bytes": {"before_storm": rss_before, "after_storm": rss},
        "operator_cpu_seconds": round(cpu_after - cpu_before, 2),
    }




class _Writes:
    """Every write of the operator to the storm's claims, handles and their ConfigMaps, told from its watch
    event: which object, and which fields it changed. A watch shows every write that changed something, in
    order; a write that changed nothing shows only in `api_requests_per_claim`. The claims' creates are the
    benchmark's own, not counted."""

    def __init__(self) -> None:
        self.last: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.counts: dict[str, int] = {}
        self.counting = False

    def on_event(self, kind: str, event: WatchEvent) -> None:
        obj = event.object
        meta = Meta.of(obj)
        key = (kind, meta.namespace, meta.name)
        before = self.last.get(key)
        if event.type == "DELETED":
            self.last.pop(key, None)
            what = f"delete {key[0]}"
        else:
            self.last[key] = obj
            if before is None:
                what = f"create {key[0]}"
            else:
                what = f"patch {key[0]} " + (",".join(sorted(_changed(before, obj))) or "metadata.managedFields")
        if self.counting and (event.type != "ADDED" or before is None) and what != "create ResourceClaim":
            self.counts[what] = self.counts.get(what, 0) + 1


def _changed(before: Any, after: Any, path: str = "", depth: int = 0) -> set[str]:
    """The paths (two levels deep, list items as `[]` one level further) at which two objects differ."""
    if before == after:
        return set()
    if isinstance(before, dict) and isinstance(after, dict) and depth < 2:
        found: set[str] = set()
        for k in before.keys() | after.keys():
            if k in ("resourceVersion", "generation", "managedFields"):
                continue
            found |= _changed(before.get(k), after.get(k), f"{path}.{k}" if path else k, depth + 1)
        return found
    if isinstance(before, list) and isinstance(after, list) and len(before) == len(after) and depth < 3 \
            and all(isinstance(x, dict) for x in before + after):
        found = set()
        for a, b in zip(before, after):
            for k in a.keys() | b.keys():
                if a.get(k) != b.get(k):
                    found.add(f"{path}[].{k}")
        return found
    return {path}
