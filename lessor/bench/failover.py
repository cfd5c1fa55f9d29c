"""Fail-over: replicas of `lessor run` during a steady lease workload, the leader SIGKILLed (then
SIGTERMed) again and again; seconds from the signal to the new leader's first write.

"The new leader's first write" is the first change of a Lease's status (only the operator writes
status) whose resourceVersion is newer than the coordination Lease write by which another
replica took over. Both come from one etcd, so their resourceVersions are ordered.
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import random
import re
import signal
import subprocess
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lessor.bench.common import machine, percentile, say, start_operator, wait_http
from lessor.controlplane import ControlPlane, ensure_binaries
from lessor.controlplane.processes import free_port
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY
from lessor.install import install
from lessor.leader import COORDINATION_LEASE, LEASE_NAME

API = "lessor.dev/v1alpha1"
NS = "failover"
OPS = "lessor-system"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kills", type=int, default=10, help="SIGKILLs, and as many SIGTERMs (default: %(default)s)")
    parser.add_argument("--replicas", type=int, default=2, help="default: %(default)s")
    parser.add_argument("--lease-duration", default="15s", help="--leader-elect-lease-duration (default: %(default)s)")
    parser.add_argument("--renew-deadline", default="10s", help="--leader-elect-renew-deadline (default: %(default)s)")
    parser.add_argument("--retry-period", default="2s", help="--leader-elect-retry-period (default: %(default)s)")
    parser.add_argument("--exporters", type=int, default=20, help="default: %(default)s")
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    health: int
    metrics: int


@dataclass
class Replicas:
    """`lessor run` processes against one control plane; each logs to its own folder under `tmp`."""

    kubeconfig: Path
    tmp: Path
    election: tuple[str, ...] = ()
    """Extra `lessor run` flags, e.g. shorter `--leader-elect-*` durations."""
    members: list[Replica] = field(default_factory=list)
    started: int = 0

    def start(self) -> Replica:
        self.started += 1
        folder = self.tmp / f"replica-{self.started}"
        folder.mkdir(parents=True, exist_ok=True)
        health, metrics = free_port(), free_port()
        member = Replica(start_operator(self.kubeconfig, folder, health, metrics, *self.election), health, metrics)
        self.members.append(member)
        return member

    async def ready(self, member: Replica) -> None:
        await wait_http(f"http://127.0.0.1:{member.health}/readyz", member.proc)

    async def leader(self, timeout: float = 120) -> Replica:
        """The member whose /metrics says `lessor_leader 1`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in list(self.members):
                if member.proc.poll() is None and await asyncio.to_thread(_is_leader, member.metrics):
                    return member
            await asyncio.sleep(0.05)
        raise TimeoutError("no replica became the leader")

    def signal(self, member: Replica, sig: signal.Signals) -> None:
        member.proc.send_signal(sig)
        self.members.remove(member)

    async def reap(self, member: Replica) -> None:
        await asyncio.to_thread(member.proc.wait, 30)

    async def stop(self) -> None:
        for member in self.members:
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGTERM)
        for member in self.members:
            try:
                await asyncio.to_thread(member.proc.wait, 30)
            except subprocess.TimeoutExpired:
                member.proc.kill()
        self.members.clear()


def _is_leader(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=2) as resp:
            return re.search(rb"^lessor_leader 1(\.0)?$", resp.read(), re.MULTILINE) is not None
    except OSError:
        return False


# --- the steady workload and what it lets us see -------------------------------------------------


class Writes:
    """Lease status changes and leader changes, seen by watching, with their resourceVersions."""

    def __init__(self, kube: Gateway) -> None:
        self.kube = kube
        self.status: list[tuple[int, float]] = []  # (resourceVersion, seen at)
        self.holders: list[tuple[int, float, str]] = []  # (resourceVersion, seen at, holder)
        self._last_status: dict[str, Any] = {}

    async def run(self) -> None:
        await asyncio.gather(self._watch(LEASE.path(NS), self._on_lease),
                             self._watch(COORDINATION_LEASE.path(OPS), self._on_leader))

    async def _watch(self, path: str, on: Any) -> None:
        while True:
            resp = await self.kube.stream("Lease", path, {"watch": "true"})
            try:
                while line := await resp.content.readline():
                    event = orjson.loads(line)
                    on(event["type"], event["object"], time.monotonic())
            finally:
                resp.close()

    def _on_lease(self, kind: str, obj: dict[str, Any], seen: float) -> None:
        name, status = obj["metadata"]["name"], obj.get("status")
        if kind == "DELETED":
            self._last_status.pop(name, None)
            return
        if status and status != self._last_status.get(name):
            self.status.append((int(obj["metadata"]["resourceVersion"]), seen))
        self._last_status[name] = status

    def _on_leader(self, kind: str, obj: dict[str, Any], seen: float) -> None:
        if obj["metadata"]["name"] == LEASE_NAME and kind != "DELETED":
            holder = (obj.get("spec") or {}).get("holderIdentity") or ""
            if not self.holders or self.holders[-1][2] != holder:
                self.holders.append((int(obj["metadata"]["resourceVersion"]), seen, holder))

    async def first_write_after(self, signalled: float, old_holder: str, timeout: float = 120) -> float:
        """Seconds from `signalled` to the first status write after another replica took over."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            took = next((rv for rv, seen, holder in self.holders if seen > signalled
                         and holder and holder != old_holder), None)
            if took is not None:
                write = next((seen for rv, seen in self.status if rv > took), None)
                if write is not None:
                    return write - signalled
            await asyncio.sleep(0.02)
        raise TimeoutError("the new leader wrote nothing")

    def holder(self) -> str:
        return self.holders[-1][2] if self.holders else ""


def double_bookings(leases: list[dict[str, Any]]) -> list[str]:
    """Exporters that two not-ended leases hold as Ready, in one list (one moment)."""
    holders: dict[str, list[str]] = {}
    for lease in leases:
        status = lease.get("status") or {}
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())
        exporter = (status.get("exporterRef") or {}).get("name")
        if ready and exporter and not status.get("ended"):
            holders.setdefault(exporter, []).append(lease["metadata"]["name"])
    return [f"exporter {e} is Ready for {names}" for e, names in sorted(holders.items()) if len(names) > 1]


async def sample_double_bookings(kube: Gateway, namespace: str, found: list[str], every: float = 0.25) -> None:
    """Append every double booking seen, until cancelled."""
    while True:
        found.extend(double_bookings((await kube.list(LEASE, namespace))[0]))
        await asyncio.sleep(every)


def _stamp(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _lab(kube: Gateway, exporters: int) -> None:
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    for i in range(exporters):
        await kube.create(EXPORTER, NS, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": f"e{i}", "labels": {"board": "rpi"}}})
    await kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {"name": "ci"}})
    await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "lab"},
                                   "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}},
                                            "policies": [{"priority": 10, "from": [{"clientSelector": {}}]}]}})


async def workload(kube: Gateway, exporters: int, rng: random.Random) -> None:
    """Short leases arrive all the time (grants and expiries: writes every moment); exporters beat."""
    made: list[str] = []
    n = 0
    while True:
        if n % 10 == 0:
            for i in range(exporters):
                await kube.patch_status(EXPORTER, NS, f"e{i}", {"lastSeen": _stamp(), "exporterStatus": "Available"})
        name = f"l{n:05d}"
        await kube.create(LEASE, NS, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
            "clientRef": {"name": "ci"}, "selector": {"matchLabels": {"board": "rpi"}},
            "duration": f"{rng.randint(1, 3)}s"}})
        made.append(name)
        if len(made) > 4 * exporters:
            await kube.delete(LEASE, NS, made.pop(0))
        n += 1
        await asyncio.sleep(0.2)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    say(f"seed {seed}")
    rng = random.Random(seed)
    election = ("--leader-elect-lease-duration", args.lease_duration, "--leader-elect-renew-deadline",
                args.renew_deadline, "--leader-elect-retry-period", args.retry_period)
    results: dict[str, list[float]] = {"SIGKILL": [], "SIGTERM": []}
    violations: list[str] = []
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        async with ControlPlane(Path(tmp) / "cp", ensure_binaries(say), controller_manager=False, progress=say) as cp:
            async with await Gateway.connect(str(cp.kubeconfig)) as kube:
                await install(kube, OPS, progress=say)
                await _lab(kube, args.exporters)
                replicas = Replicas(cp.kubeconfig, Path(tmp), election)
                writes = Writes(kube)
                background = [asyncio.create_task(writes.run()),
                              asyncio.create_task(workload(kube, args.exporters, rng)),
                              asyncio.create_task(sample_double_bookings(kube, NS, violations))]
                try:
                    for _ in range(args.replicas):
                        await replicas.ready(replicas.start())
                    for sig in (signal.SIGKILL, signal.SIGTERM):
                        for i in range(args.kills):
                            leader = await replicas.leader()
                            await asyncio.sleep(rng.uniform(1.0, 3.0))  # mid-storm, at a random moment
                            old = writes.holder()
                            signalled = time.monotonic()
                            replicas.signal(leader, sig)
                            seconds = await writes.first_write_after(signalled, old)
                            results[sig.name].append(seconds)
                            say(f"{sig.name} {i + 1}/{args.kills}: first write of the new leader after {seconds:.2f}s")
                            await replicas.reap(leader)
                            await replicas.ready(replicas.start())
                finally:
                    for task in background:
                        task.cancel()
                    await asyncio.gather(*background, return_exceptions=True)
                    await replicas.stop()
    return {
        "benchmark": "failover",
        "seed": seed,
        "replicas": args.replicas,
        "leader_election": {"lease_duration": args.lease_duration, "renew_deadline": args.renew_deadline,
                            "retry_period": args.retry_period},
        **{sig.lower(): {"kills": len(samples), "p50_seconds": round(percentile(samples, 50), 2),
                         "p99_seconds": round(percentile(samples, 99), 2),
                         "max_seconds": round(max(samples), 2) if samples else None}
           for sig, samples in results.items()},
        "double_bookings_sampled": len(violations),
        "double_bookings_first": violations[:5],
        "machine": machine(),
    }
