"""The physical limit: how fast this machine's API server takes writes and delivers watch events.

The operator's own benchmarks are judged as a ratio against these figures,
measured in the same run, because the API server is the floor under every
lease and claim.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import time
import uuid
from typing import Any

import aiohttp
import orjson

from lessor.tools.bench.common import STARTUP_SECONDS, add_cluster_arguments, cluster, machine, percentile, say
from lessor.gateway import Gateway, Informer, WatchEvent
from lessor.gateway.client import tls_context
from lessor.gateway.resources import EXPORTER, NAMESPACE

WRITERS = (1, 8, 64)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each write phase (default: %(default)s)")
    parser.add_argument("--watch-samples", type=int, default=200, help="watch latency samples (default: %(default)s)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with cluster(args) as gateway:
        ceiling = await measure_ceiling(gateway, seconds=args.seconds, watch_samples=args.watch_samples)
        say("gateway against a raw aiohttp loop: GETs of one object")
        throughput = await gateway_throughput(gateway, seconds=min(args.seconds, 3.0))
    started = {"controlplane_start_to_ready_seconds": STARTUP_SECONDS[-1]} if STARTUP_SECONDS else {}
    return {"benchmark": "apiserver", "machine": machine(), **started, **ceiling, "gateway_throughput": throughput}


async def gateway_throughput(gateway: Gateway, *, seconds: float = 3.0, concurrency: int = 16) -> dict[str, Any]:
    """GETs per second of one object through the gateway (counting, metrics, tracing, its session) and
    through a bare aiohttp session with the same TLS settings and headers, alternating, in the same run
    (the best of three rounds each): the ratio is what the gateway's own path costs."""
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    await gateway.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        await _exporter(gateway, namespace, "e0")
        path = EXPORTER.path(namespace, "e0")
        url, headers = gateway.url(path), await gateway.headers()
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=tls_context(gateway.configuration),
                                                                        limit=concurrency)) as raw:
            async def raw_get() -> None:
                async with raw.get(url, headers=headers) as resp:
                    orjson.loads(await resp.read())

            async def gateway_get() -> None:
                await gateway.get(EXPORTER, namespace, "e0")

            samples: dict[str, list[float]] = {"raw_aiohttp": [], "gateway": []}
            await _rate(raw_get, 0.5, concurrency)  # warm both: connections open, code paths hot
            await _rate(gateway_get, 0.5, concurrency)
            for _ in range(3):  # alternating, so that other load on the machine falls on both alike
                for name, get in (("raw_aiohttp", raw_get), ("gateway", gateway_get)):
                    samples[name].append(await _rate(get, seconds / 3, concurrency))
            rates = {name: round(max(values), 1) for name, values in samples.items()}
    finally:
        await _remove(gateway, namespace)
    return {"gets_per_second": rates, "concurrency": concurrency,
            "gateway_to_raw": round(rates["gateway"] / max(rates["raw_aiohttp"], 1e-9), 3)}


async def _rate(request: Any, seconds: float, concurrency: int) -> float:
    deadline = time.monotonic() + seconds
    count = 0

    async def worker() -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await request()
            count += 1

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return count / (time.monotonic() - started)


async def measure_ceiling(gateway: Gateway, *, seconds: float = 5.0, watch_samples: int = 200) -> dict[str, Any]:
    """Write ceiling of the API server behind `gateway`, in a namespace of its own."""
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    await gateway.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    try:
        names = [f"e{i}" for i in range(max(WRITERS))]
        await _gather_limited([_exporter(gateway, namespace, n) for n in names], 16)
        patches = {}
        for writers in WRITERS:
            say(f"status patches with {writers} concurrent writer(s) for {seconds:.0f}s")
            patches[str(writers)] = round(await _patch_rate(gateway, namespace, names[:writers], seconds), 1)
        creates = {}
        for writers in (8, 64):
            say(f"creates with {writers} concurrent writers for {seconds:.0f}s")
            creates[str(writers)] = round(await _create_rate(gateway, namespace, writers, seconds), 1)
        say(f"watch delivery latency over {watch_samples} status patches")
        latency = await _watch_latency(gateway, namespace, names[0], watch_samples)
    finally:
        await _remove(gateway, namespace)
    return {
        "status_patches_per_second": patches,
        "creates_per_second": creates,
        "watch_latency_ms": latency,
        "notes": "etcd runs with --unsafe-no-fsync on loopback; each write phase uses its own objects",
    }


async def _remove(gateway: Gateway, namespace: str) -> None:
    """Delete the measurement's Exporters, then its namespace. Deleting the namespace alone leaves them to a
    namespace controller, which the benches' control planes do not run: an operator started later would list
    thousands of them and write each one's `Online` (they were the most of a `bench leases` start-up's writes)."""
    try:
        await gateway.request("deletecollection", EXPORTER.kind, "DELETE", EXPORTER.path(namespace), timeout=300)
        # DeleteCollection is not atomic (the API server may stop part-way, e.g. at its request timeout): what
        # is left goes one by one
        left, _ = await gateway.list(EXPORTER, namespace)
        await _gather_limited([gateway.delete(EXPORTER, namespace, e["metadata"]["name"]) for e in left], 16)
    finally:
        await gateway.delete(NAMESPACE, None, namespace)


async def _exporter(gateway: Gateway, namespace: str, name: str) -> None:
    await gateway.create(EXPORTER, namespace, {
        "apiVersion": EXPORTER.api_version, "kind": "Exporter", "metadata": {"name": name, "labels": {"bench": "1"}},
    })


async def _gather_limited(coros: list[Any], limit: int) -> None:
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> None:
        async with gate:
            await coro

    await asyncio.gather(*(one(c) for c in coros))


def _now() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


async def _patch_rate(gateway: Gateway, namespace: str, names: list[str], seconds: float) -> float:
    deadline = time.monotonic() + seconds
    count = 0

    async def writer(name: str) -> None:
        nonlocal count
        while time.monotonic() < deadline:
            await gateway.patch_status(EXPORTER, namespace, name, {"lastSeen": _now(), "exporterStatus": "Available"})
            count += 1

    started = time.monotonic()
    await asyncio.gather(*(writer(n) for n in names))
    return count / (time.monotonic() - started)


async def _create_rate(gateway: Gateway, namespace: str, writers: int, seconds: float) -> float:
    deadline = time.monotonic() + seconds
    count = 0
    prefix = uuid.uuid4().hex[:6]

    async def writer(w: int) -> None:
        nonlocal count
        i = 0
        while time.monotonic() < deadline:
            await _exporter(gateway, namespace, f"c{prefix}-{w}-{i}")
            i += 1
            count += 1

    started = time.monotonic()
    await asyncio.gather(*(writer(w) for w in range(writers)))
    return count / (time.monotonic() - started)


async def _watch_latency(gateway: Gateway, namespace: str, name: str, samples: int) -> dict[str, float]:
    arrived: dict[str, float] = {}
    waiting: dict[str, asyncio.Event] = {}

    def on_event(event: WatchEvent) -> None:
        nonce = event.object.get("status", {}).get("exporterStatus", "")
        if nonce in waiting:
            arrived[nonce] = time.perf_counter()
            waiting[nonce].set()

    informer = Informer(gateway, EXPORTER, on_event, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        latencies = []
        for i in range(samples):
            nonce = f"bench-{i}"
            waiting[nonce] = asyncio.Event()
            sent = time.perf_counter()
            await gateway.patch_status(EXPORTER, namespace, name, {"exporterStatus": nonce})
            await asyncio.wait_for(waiting[nonce].wait(), 10)
            latencies.append((arrived[nonce] - sent) * 1000)
    finally:
        task.cancel()
    return {"p50": round(percentile(latencies, 50), 2), "p99": round(percentile(latencies, 99), 2),
            "samples": len(latencies)}
