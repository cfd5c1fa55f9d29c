"""Replicas: two and three `lessor run` against one API server during a lease storm and a claim storm,
the leader SIGKILLed every few seconds, or paused (SIGSTOP past its lease, then SIGCONT) beside CPU hogs
(a fresh seed each run, printed).

Sampled all along: no exporter Ready for two leases, no lease named by two exporters, no handle bound to
two claims, no claim with two handles. Afterwards everything settles to its right state (the storms' own
invariants).
"""

from __future__ import annotations

import asyncio
import multiprocessing
import os
import random
import signal
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from lessor.tools.bench.failover import Replicas, double_bookings
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, EXPORTER, HANDLE, LEASE, NAMESPACE
from lessor.app.install import install
from tests.provisioning.test_chaos import OPS, Storm
from tests.provisioning.test_chaos import violations as claim_violations
from tests.leasing.test_chaos import _lab as lease_lab
from tests.leasing.test_chaos import _storm as lease_storm
from tests.leasing.test_chaos import violations as lease_violations
from tests.slowness import scaled

# Short terms, so that a SIGKILLed leader is replaced within seconds.
ELECTION = ("--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms",
            "--leader-elect-retry-period", "300ms")
STORM_SECONDS = 14
KILLS = 4
PAUSES = 2
HOGS = 4
async def _double_binds(kube: Gateway, storm: Storm) -> list[str]:
    """At one moment (one list each): a claim two handles name, a handle two claims name."""
    handles = [h for h in (await kube.list(HANDLE, OPS))[0]
               if any((r.get("provider") or {}).get("name") == storm.provider for r in h["spec"]["resources"])]
    claims = (await kube.list(CLAIM, storm.ns))[0]
    by_claim: dict[str, list[str]] = {}
    for handle in handles:
        if ref := (handle["spec"].get("resourceClaim") or {}).get("name"):
            by_claim.setdefault(ref, []).append(handle["metadata"]["name"])
    by_handle: dict[str, list[str]] = {}
    for claim in claims:
        if ref := ((claim.get("status") or {}).get("resourceHandle") or {}).get("name"):
            by_handle.setdefault(ref, []).append(claim["metadata"]["name"])
    return ([f"claim {c} is bound by handles {hs}" for c, hs in by_claim.items() if len(hs) > 1]
            + [f"handle {h} is named by claims {cs}" for h, cs in by_handle.items() if len(cs) > 1])


def _twice_named(exporters: list[dict[str, Any]]) -> list[str]:
    """At one moment: a lease that two exporters' `status.leaseRef` name."""
    by_lease: dict[str, list[str]] = {}
    for exporter in exporters:
        if ref := ((exporter.get("status") or {}).get("leaseRef") or {}).get("name"):
            by_lease.setdefault(ref, []).append(exporter["metadata"]["name"])
    return [f"lease {lease} is named by exporters {names}" for lease, names in by_lease.items() if len(names) > 1]


async def _sample(kube: Gateway, lease_ns: str, storm: Storm, found: list[str]) -> None:
    while True:
        found.extend(double_bookings((await kube.list(LEASE, lease_ns))[0]))
        found.extend(_twice_named((await kube.list(EXPORTER, lease_ns))[0]))
        found.extend(await _double_binds(kube, storm))
        await asyncio.sleep(0.2)


async def _kill_leaders(replicas: Replicas, rng: random.Random, kills: list[float]) -> None:
    """SIGKILL whoever leads every few seconds, and start a replacement (as a Deployment would)."""
    for _ in range(KILLS):
        leader = await replicas.leader(timeout=scaled(60))
        await asyncio.sleep(rng.uniform(1.5, 3.0))
        replicas.signal(leader, signal.SIGKILL)
        await replicas.reap(leader)
        kills.append(asyncio.get_running_loop().time())
        replicas.start()


async def _pause_leaders(replicas: Replicas, rng: random.Random, kills: list[float]) -> None:
    """SIGSTOP whoever leads for longer than its lease, then SIGCONT: it resumes past its deadline, with
    writes it had queued and decisions it had made, while another replica leads."""
    for _ in range(PAUSES):
        leader = await replicas.leader(timeout=scaled(60))
        await asyncio.sleep(rng.uniform(1.0, 2.5))
        leader.proc.send_signal(signal.SIGSTOP)  # it stays a member: it resumes, and follows
        await asyncio.sleep(rng.uniform(2.5, 4.0))  # past the 2 s lease: another replica takes over
        leader.proc.send_signal(signal.SIGCONT)
        kills.append(asyncio.get_running_loop().time())


def _cpu_hog(seconds: float) -> None:
    """A busy loop for a bounded time: the node is busy, as production nodes are, and writes are slow."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


@pytest.mark.apiserver
@pytest.mark.parametrize("count,fault", [(2, "kill"), (3, "kill"), (3, "pause")])
async def test_replicas_with_the_leader_killed_or_paused_during_a_lease_and_a_claim_storm(
    count: int, fault: str, tmp_path: Path, settles: Any
) -> None:
    seed = int(os.environ.get("LESSOR_CHAOS_SEED") or random.randrange(2**32))  # the variable replays a run
    print(f"replicas chaos seed: {seed} (replay: LESSOR_CHAOS_SEED={seed})")
    rng = random.Random(seed)
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp, \
            await Gateway.connect(str(cp.kubeconfig)) as kube:
        await install(kube, OPS, progress=lambda _: None)
        lease_ns, claim_ns = f"leases-{uuid.uuid4().hex[:6]}", f"claims-{uuid.uuid4().hex[:6]}"
        for ns in (lease_ns, claim_ns):
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await lease_lab(kube, lease_ns)
        storm = Storm(kube, claim_ns, random.Random(rng.random()))
        await storm.lab()

        replicas = Replicas(cp.kubeconfig, tmp_path, ELECTION)
        for _ in range(count):
            replicas.start()
        found: list[str] = []
        kills: list[float] = []
        sampler = asyncio.create_task(_sample(kube, lease_ns, storm, found))
        hogs: list[multiprocessing.Process] = []
        if fault == "pause":  # what made the races show: a busy node, where writes are slow
            hogs = [multiprocessing.Process(target=_cpu_hog, args=(STORM_SECONDS + 20,), daemon=True)
                    for _ in range(HOGS)]
            for hog in hogs:
                hog.start()
        faults = _kill_leaders if fault == "kill" else _pause_leaders
        try:
            await asyncio.gather(lease_storm(kube, lease_ns, STORM_SECONDS, random.Random(rng.random())),
                                 storm.run(STORM_SECONDS), faults(replicas, rng, kills))
            await settles(lambda: lease_violations(kube, lease_ns), 45)
            await settles(lambda: claim_violations(kube, storm), 60)
        finally:
            for hog in hogs:
                hog.kill()
            sampler.cancel()
            await asyncio.gather(sampler, return_exceptions=True)
            await replicas.stop()
        assert len(kills) == (KILLS if fault == "kill" else PAUSES)
        assert not found, f"seed {seed}: " + "; ".join(dict.fromkeys(found))
