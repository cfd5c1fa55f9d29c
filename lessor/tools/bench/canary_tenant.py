"""The canary tenant of `lessor bench leases`: another namespace's user, in a process of its own.

Issue 23 asks whether one tenant's storm slows another tenant's single lease. That other tenant has a client
of its own (its own `kubectl`, its own connections), so the canary must not share the bench's: in the bench's
process its requests queued behind the storm's creates in the bench's own connection pool, and its watch events
waited for a loop that was sending the storm, which timed the bench as much as lessor.

Run as `python -m lessor.tools.bench.canary_tenant KUBECONFIG NAMESPACE SLOT`: it connects and starts its watch,
prints `ready`, waits for a line on stdin, creates its lease selecting exporter `SLOT`, polls and watches until
the lease is Ready, and prints one JSON line of times in seconds from sending the create. From the same moment
until the lease is Ready it times the API server's share of that path alone, again and again (`api_floor`, the
median), which tells lessor's part from the machine's.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from lessor.gateway import Gateway, Informer
from lessor.gateway.informer import WatchEvent
from lessor.gateway.resources import CONFIGMAP, LEASE
from lessor.model.views.leasing import LeaseView
from lessor.model.views.meta import Meta

API = "lessor.dev/v1alpha1"


async def lease_to_ready(kube: Gateway, namespace: str, slot: str, synced: asyncio.Barrier,
                         go: asyncio.Event) -> dict[str, float]:
    """Create lease `slot` for client `canary` and time it to Ready: `seconds` as a poll reads it, `watched` as a
    watch of the namespace delivers it (as `kubectl wait` sees it), `create_seconds` the create request alone."""
    ready: asyncio.Future[float] = asyncio.get_running_loop().create_future()

    def seen(event: WatchEvent) -> None:
        if (not ready.done() and event.type != "DELETED" and Meta.of(event.object).name == slot
                and LeaseView.of(event.object).is_true("Ready")):
            ready.set_result(time.perf_counter())

    informer = Informer(kube, LEASE, seen, namespace=namespace)
    watch = asyncio.create_task(informer.run())
    try:
        await informer.synced.wait()
        await synced.wait()
        await go.wait()
        started = time.perf_counter()
        await kube.create(LEASE, namespace, {"apiVersion": API, "kind": "Lease", "metadata": {"name": slot}, "spec": {
            "clientRef": {"name": "canary"}, "selector": {"matchLabels": {"slot": slot}}, "duration": "1h"}})
        answered = time.perf_counter()
        while True:
            lease = await kube.get(LEASE, namespace, slot)
            if LeaseView.of(lease).is_true("Ready"):
                polled = time.perf_counter()
                break
            await asyncio.sleep(0.05)
        watched = await asyncio.wait_for(ready, 60)
    finally:
        watch.cancel()
    return {"seconds": polled - started, "create_seconds": answered - started, "watched_seconds": watched - started}


async def api_floor(kube: Gateway, namespace: str, prefix: str, synced: asyncio.Barrier, go: asyncio.Event,
                    until: asyncio.Event) -> list[float]:
    """The API server's share of a grant, without lessor: a create, then two writes one after the other (the
    exporter's commit and the lease's Ready are two), until a watch delivers the second. Sent again and again
    from `go` until `until` is set (the lease is Ready), so it samples the API server over the lease's whole
    way rather than at its start. On ConfigMaps, which lessor does not watch here, so nothing else is written
    or woken: no operator can be faster than this."""
    delivered: dict[str, asyncio.Future[float]] = {}

    def seen(event: WatchEvent) -> None:
        waiting = delivered.get(Meta.of(event.object).name)
        if waiting is not None and not waiting.done() and (event.object.get("data") or {}).get("step") == "2":
            waiting.set_result(time.perf_counter())

    informer = Informer(kube, CONFIGMAP, seen, namespace=namespace)
    watch = asyncio.create_task(informer.run())
    rounds: list[float] = []
    try:
        await informer.synced.wait()
        await synced.wait()
        await go.wait()
        while not until.is_set() or not rounds:
            name = f"{prefix}-{len(rounds)}"
            delivered[name] = asyncio.get_running_loop().create_future()
            started = time.perf_counter()
            await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": name}, "data": {"step": "0"}})
            for step in ("1", "2"):
                await kube.merge_patch(CONFIGMAP, namespace, name, {"data": {"step": step}})
            rounds.append(await asyncio.wait_for(delivered[name], 60) - started)
    finally:
        watch.cancel()
    return rounds


async def _main(kubeconfig: str, namespace: str, slot: str) -> None:
    """Both paths start at the same moment, so they see the same storm."""
    synced, go = asyncio.Barrier(3), asyncio.Event()
    loop = asyncio.get_running_loop()

    def told() -> None:  # once: a reader left on a readable stdin would spin this process's loop
        loop.remove_reader(sys.stdin.fileno())
        sys.stdin.readline()
        go.set()

    loop.add_reader(sys.stdin.fileno(), told)
    async with await Gateway.connect(kubeconfig) as kube:
        ready = asyncio.Event()
        lease = asyncio.create_task(lease_to_ready(kube, namespace, slot, synced, go))
        lease.add_done_callback(lambda _: ready.set())
        floor = asyncio.create_task(api_floor(kube, namespace, f"floor-{slot}", synced, go, ready))
        await synced.wait()
        print("ready", flush=True)
        times = {**await lease, "api_floor_seconds": statistics.median(await floor)}
    print(json.dumps(times), flush=True)


@dataclass(frozen=True)
class CanaryTimes:
    seconds: float
    """From sending the create until a poll reads the lease Ready."""
    create_seconds: float
    """The create request alone: the API server's answer, before lessor can know of the lease."""
    watched_seconds: float
    """From sending the create until a watch of the canary's namespace delivers the lease Ready: as `kubectl wait`
    sees it, without the poll's own request (which waits at the API server behind the storm's) in the time."""
    api_floor_seconds: float
    """The same path's API requests without lessor, sent over the same time (`api_floor`)."""


async def canary_lease(kubeconfig: Path, namespace: str, slot: str,
                       after: Callable[[], bool] = lambda: True) -> CanaryTimes:
    """The canary tenant's lease for exporter `slot` in `namespace` (client `canary`), sent once `after()` holds,
    by a process of its own (this module: its own connections and loop, as another tenant's client has), and
    timed to Ready."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "lessor.tools.bench.canary_tenant", str(kubeconfig), namespace, slot,
        stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, cwd=kubeconfig.parent)  # not a source tree
    assert proc.stdin is not None and proc.stdout is not None
    try:
        if (await proc.stdout.readline()).strip() != b"ready":
            raise RuntimeError(f"the canary tenant ({slot}) exited before its watch started: see its stderr above")
        while not after():
            await asyncio.sleep(0.05)
        proc.stdin.write(b"go\n")
        await proc.stdin.drain()
        line = await proc.stdout.readline()
        if not line:
            raise RuntimeError(f"the canary tenant ({slot}) exited without its times: see its stderr above")
        times = json.loads(line)
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        await proc.wait()
    return CanaryTimes(times["seconds"], times["create_seconds"], times["watched_seconds"],
                       times["api_floor_seconds"])


if __name__ == "__main__":
    if len(sys.argv) != 4:
        sys.exit("usage: python -m lessor.tools.bench.canary_tenant KUBECONFIG NAMESPACE SLOT")
    asyncio.run(_main(*sys.argv[1:]))
