"""The cost of the operator as the cluster grows: start-up, memory, a lease burst, shutdown.

For each size N: a fresh control plane, one namespace, N exporters (Available), N/10 clients
and N/10 policies in groups of 20 exporters (each group has two clients and two policies that
admit them to it). `lessor run` starts as its own process and is measured from the outside:
its API requests by verb until it settles (every mailbox empty, no request for a second), its
worst `/healthz` latency meanwhile (polled every 50 ms by a thread), actor restarts, RSS, then a burst of
leases (create to Ready, CPU and writes per lease) and how long SIGTERM takes, when quiet and
(a second start) two seconds after ready, while the actors start; then a restart as after a rollout
(nothing left to write): its time to settle and RSS. RSS is read once the operator has settled its
memory (a few seconds without work after start-up). The empty
operator's RSS and the API server's ceiling are measured once, in the same run; the bytes each
cached exporter costs (raw, as the informer keeps it, in the topology) are measured here.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import gc
import re
import signal
import subprocess
import tempfile
import time
import tracemalloc
from pathlib import Path
from typing import Any

from lessor.tools.bench.apiserver import gateway_throughput, measure_ceiling
from lessor.tools.bench.probing import ProbePoller
from lessor.tools.bench.common import (
    WRITE_VERBS,
    api_requests,
    available_exporters,
    event_requests,
    gather_limited,
    machine,
    metrics_text,
    percentile,
    process_stats,
    ready_at,
    request_deltas,
    say,
    start_operator,
    wait_http,
)
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway, Informer
from lessor.gateway.informer import slim
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, POLICY
from lessor.app.install import install
from lessor.app.operator import QUIET_SECONDS
from lessor.topology import Topology

API = "lessor.dev/v1alpha1"
NS = "scale"
GROUP = 20  # exporters per group; each group has two clients and two policies


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--sizes", default="1000,10000",
                        help="comma-separated exporter counts, e.g. 1000,10000,20000,50000 (default: %(default)s)")
    parser.add_argument("--burst", type=int, default=200, help="leases created at once after start (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="give up on a start or a burst after this many seconds (default: %(default)s)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    if any(n < GROUP for n in sizes):
        raise ValueError(f"--sizes: each size must be at least {GROUP} exporters")
    rows, baseline, ceiling, throughput = [], None, None, None
    for n in sizes:
        with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
            async with ControlPlane(Path(tmp) / "cp", ensure_binaries(say), controller_manager=False,
                                    progress=say) as cp:
                async with await Gateway.connect(str(cp.kubeconfig)) as kube:
                    await install(kube, "lessor-system", progress=say)
                    if baseline is None:
                        say("the empty operator first")
                        baseline = await _empty_operator(cp.kubeconfig, Path(tmp))
                    await _lab(kube, n)
                    per_object = await _bytes_per_exporter(kube)
                    row = await _start_and_burst(kube, cp.kubeconfig, Path(tmp), n, args)
                    row["bytes_per_exporter"] = per_object
                    row["sigterm_mid_start_seconds"] = await _sigterm_mid_start(cp.kubeconfig, Path(tmp))
                    row["restart"] = await _restart(cp.kubeconfig, Path(tmp), args)
                    if baseline is not None:
                        row["rss_per_exporter_bytes"] = round((row["rss_after_start_bytes"] - baseline) / n)
                        row["restart"]["rss_per_exporter_bytes"] = round(
                            (row["restart"]["rss_after_start_bytes"] - baseline) / n)
                    rows.append(row)
                    say(f"N={n}: settled in {row['start']['settled_seconds']} s, "
                        f"RSS {row['rss_after_start_bytes'] / 2**20:.0f} MiB")
                    if n == sizes[-1]:  # last, once the operators have stopped: its writes stay out of
                        # every measured start
                        say("the API server's ceiling and the gateway's throughput, with the operator stopped")
                        ceiling = await measure_ceiling(kube, seconds=3, watch_samples=50)
                        throughput = await gateway_throughput(kube, seconds=3)
    return {
        "benchmark": "scale",
        "date": dt.datetime.now(dt.UTC).strftime("%Y-%m-%d"),
        "machine": machine(),
        "setup": {"namespace": 1, "clients": "N/10", "policies": "N/10", "group": GROUP, "burst": args.burst},
        "empty_operator_rss_bytes": baseline,
        "rows": rows,
        "apiserver_ceiling": ceiling,
        "gateway_throughput": throughput,
    }


# --- the cluster -------------------------------------------------------------------------------

async def _lab(kube: Gateway, n: int) -> None:
    say(f"creating {n} exporters, {n // 10} clients and {n // 10} policies")
    await available_exporters(kube, NS, {f"e{i:06d}": {"board": "rpi", "group": f"g{i // GROUP}"} for i in range(n)})
    await gather_limited([kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {
        "name": f"c{i:06d}", "labels": {"group": f"g{i // 2}"}}}) for i in range(n // 10)], limit=32,
        what="clients created")
    await gather_limited([kube.create(POLICY, NS, {
        "apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": f"p{i:06d}"},
        "spec": {"exporterSelector": {"matchLabels": {"group": f"g{i // 2}"}}, "policies": [{
            "priority": 10 + i % 2, "maximumDuration": "8h",
            "from": [{"clientSelector": {"matchLabels": {"group": f"g{i // 2}"}}}]}]}})
        for i in range(n // 10)], limit=32, what="policies created")


async def _bytes_per_exporter(kube: Gateway) -> dict[str, int]:
    """Bytes of Python heap per exporter: as listed, as the informer keeps it, and in the topology."""
    items, _ = await kube.list(EXPORTER, NS)
    del items
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        items, _ = await kube.list(EXPORTER, NS)
        raw = tracemalloc.get_traced_memory()[0] - base
        for obj in items:
            slim(obj)
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - base
        topology = Topology()
        for obj in items:
            topology.apply("ADDED", obj)
        in_topology = tracemalloc.get_traced_memory()[0] - base - kept
    finally:
        tracemalloc.stop()
    count = max(len(items), 1)
    return {"listed": raw // count, "informer": kept // count, "topology": in_topology // count}


# --- the operator ------------------------------------------------------------------------------

async def _empty_operator(kubeconfig: Path, tmp: Path) -> int:
    health, metrics = free_port(), free_port()
    proc = start_operator(kubeconfig, tmp, health, metrics)
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
        return await _settled_rss(proc)
    finally:
        await _sigterm(proc)


async def _sigterm(proc: subprocess.Popen[bytes], grace: float = 30) -> float | None:
    """Seconds from SIGTERM to exit; None (and a SIGKILL) past the grace period."""
    started = time.monotonic()
    proc.send_signal(signal.SIGTERM)
    try:
        await asyncio.to_thread(proc.wait, grace)
    except subprocess.TimeoutExpired:
        proc.kill()
        await asyncio.to_thread(proc.wait)
        return None
    return round(time.monotonic() - started, 2)


async def _settled_rss(proc: subprocess.Popen[bytes]) -> int:
    """RSS once the operator has settled its memory after start-up (it does so after QUIET_SECONDS of
    no actor at work; the settling above waits for only one second without requests)."""
    await asyncio.sleep(QUIET_SECONDS + 1.5)
    return process_stats(proc.pid)[0]


async def _restart(kubeconfig: Path, tmp: Path, args: argparse.Namespace) -> dict[str, Any]:
    """The operator started again on the same cluster, as after a rollout: nothing is left to write, so
    this is the start most pods see. Seconds to settle and RSS after."""
    health, metrics = free_port(), free_port()
    started = time.monotonic()
    proc = start_operator(kubeconfig, tmp, health, metrics, "--exporter-heartbeat-timeout", "1h")
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc, timeout=args.timeout)
        settled = await _settled(metrics, started, args.timeout)
        restarts = _sum_metric(metrics_text(metrics), "lessor_actor_restarts_total")
        rss = await _settled_rss(proc)
    finally:
        await _sigterm(proc)
    return {"settled_seconds": settled, "actor_restarts": int(restarts), "rss_after_start_bytes": rss}


async def _sigterm_mid_start(kubeconfig: Path, tmp: Path, after: float = 2.0) -> float | None:
    """A second start, SIGTERMed `after` seconds past ready, while its actors still start up."""
    health, metrics = free_port(), free_port()
    proc = start_operator(kubeconfig, tmp, health, metrics, "--exporter-heartbeat-timeout", "1h")
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
        await asyncio.sleep(after)
    except BaseException:
        await _sigterm(proc)
        raise
    return await _sigterm(proc)


def _sum_metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


async def _settled(metrics: int, started: float, timeout: float) -> float:
    """Seconds from `started` until every mailbox is empty and no API request was made for a second."""
    deadline = time.monotonic() + timeout
    last: tuple[float, float] | None = None
    while time.monotonic() < deadline:
        try:
            text = metrics_text(metrics)
        except OSError:
            await asyncio.sleep(0.5)
            continue
        depth = _sum_metric(text, "lessor_mailbox_depth")
        requests = _sum_metric(text, "lessor_api_requests_total")
        now = time.monotonic()
        if depth == 0 and last is not None and last[1] == requests:
            return round(last[0] - started, 2)
        last = (now, requests) if last is None or last[1] != requests or depth else last
        await asyncio.sleep(1.0)
    raise TimeoutError("the operator did not settle")


async def _start_and_burst(kube: Gateway, kubeconfig: Path, tmp: Path, n: int,
                           args: argparse.Namespace) -> dict[str, Any]:
    health, metrics = free_port(), free_port()
    started = time.monotonic()
    proc = start_operator(kubeconfig, tmp, health, metrics, "--exporter-heartbeat-timeout", "1h")
    # Every 50 ms from a thread of the bench's own: `_settled` below reads /metrics with a blocking call, which
    # the busy operator's loop answers late, and a probe polled by the bench's loop would wait for that too.
    probe = ProbePoller(health, "/healthz", every=0.05, timeout=60, from_first_answer=True).start()
    sigterm: float | None = None
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc, timeout=args.timeout)
        ready = round(time.monotonic() - started, 2)
        settled = await _settled(metrics, started, args.timeout)
        probe.stop()
        text = metrics_text(metrics)
        start_requests = api_requests(metrics)
        by_verb: dict[str, float] = {}
        for (verb, _), value in start_requests.items():
            by_verb[verb] = by_verb.get(verb, 0) + value
        restarts = _sum_metric(text, "lessor_actor_restarts_total")
        rss = await _settled_rss(proc)
        burst = await _burst(kube, proc, metrics, n, args)
        sigterm = await _sigterm(proc)
    finally:
        probe.stop()
        if proc.poll() is None:
            await _sigterm(proc)
    return {
        "exporters": n,
        "start": {
            "ready_seconds": ready,
            "settled_seconds": settled,
            "requests_by_verb": {k: int(v) for k, v in sorted(by_verb.items())},
            "requests_by_verb_and_kind": {f"{v} {k}": int(c) for (v, k), c in sorted(start_requests.items())},
            "worst_healthz_seconds": round(probe.worst, 3),
            "healthz_samples": len(probe.latencies),
            "healthz_failures": probe.failures,
            "actor_restarts": int(restarts),
        },
        "rss_after_start_bytes": rss,
        "burst": burst,
        "sigterm_to_exit_seconds": sigterm,
    }


async def _burst(kube: Gateway, proc: subprocess.Popen[bytes], metrics: int, n: int,
                 args: argparse.Namespace) -> dict[str, Any]:
    """`args.burst` leases at once, each on its own group where there are enough groups."""
    groups = n // GROUP
    created: dict[str, float] = {}
    granted: dict[str, float] = {}
    informer = Informer(kube, LEASE, ready_at(granted), namespace=NS)
    watch = asyncio.create_task(informer.run())
    await informer.synced.wait()
    before = api_requests(metrics)
    restarts_before = _sum_metric(metrics_text(metrics), "lessor_actor_restarts_total")
    _, cpu_before = process_stats(proc.pid)

    async def lease(i: int) -> None:
        name = f"l{i:05d}"
        group = i % groups
        created[name] = time.perf_counter()
        await kube.create(LEASE, NS, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
            "clientRef": {"name": f"c{2 * group + (i // groups) % 2:06d}"},
            "selector": {"matchLabels": {"group": f"g{group}"}}, "duration": "1h"}})

    say(f"a burst of {args.burst} leases")
    await gather_limited([lease(i) for i in range(args.burst)], limit=32)
    expected = min(args.burst, n)
    deadline = time.monotonic() + args.timeout
    while len(granted) < expected and time.monotonic() < deadline:
        await asyncio.sleep(0.25)
    await asyncio.sleep(1)
    _, cpu_after = process_stats(proc.pid)
    requests, _ = event_requests(request_deltas(before, api_requests(metrics)))
    restarts = _sum_metric(metrics_text(metrics), "lessor_actor_restarts_total") - restarts_before
    watch.cancel()
    latencies = [granted[k] - created[k] for k in granted if k in created]
    writes = sum(v for k, v in requests.items() if k.split()[0] in WRITE_VERBS)
    count = max(len(granted), 1)
    return {
        "leases": args.burst,
        "granted": len(granted),
        "create_to_ready_seconds": {"p50": round(percentile(latencies, 50), 3),
                                    "p99": round(percentile(latencies, 99), 3)},
        "operator_cpu_seconds_per_lease": round((cpu_after - cpu_before) / count, 4),
        "api_writes_per_granted_lease": round(writes / count, 3),
        "api_writes_by_verb_and_kind_per_granted_lease": {
            k: round(v / count, 3) for k, v in sorted(requests.items()) if k.split()[0] in WRITE_VERBS},
        "actor_restarts": int(restarts),
    }
