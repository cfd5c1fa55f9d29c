"""Chaos: actors killed every 50 ms, and the whole operator SIGKILLed, in the middle of a lease storm.

During the storm no exporter is held by two Ready leases (sampled every
half second). Afterwards the invariants hold: no exporter held by two active
leases, no active lease bound to a missing exporter, no exporter held for an
ended lease, and every lease in the state the rules give it (released ones
ended, expired ones ended, waiting ones only while every exporter they may
have is taken). Each run draws a fresh seed (printed; `LESSOR_CHAOS_SEED`
replays one).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any


from lessor.tools.bench.failover import double_bookings
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY
from lessor.app.install import install
from lessor.mailbox import ChaosMonkey

API = "lessor.dev/v1alpha1"
EXPORTERS = 6
LEASES = 24


def _now(offset: float = 0) -> dt.datetime:
    return dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


async def _lab(kube: Gateway, ns: str) -> None:
    for i in range(EXPORTERS):
        await kube.create(EXPORTER, ns, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": f"e{i}", "labels": {"board": "rpi"}}})
    await _heartbeat(kube, ns)
    for team in ("qa", "dev"):
        await kube.create(CLIENT, ns, {"apiVersion": API, "kind": "Client",
                                       "metadata": {"name": team, "labels": {"team": team}}})
    await kube.create(POLICY, ns, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "lab"},
                                   "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                                       {"priority": 20, "from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}]},
                                       {"priority": 10, "spotAccess": True,
                                        "from": [{"clientSelector": {"matchLabels": {"team": "dev"}}}]}]}})


async def _heartbeat(kube: Gateway, ns: str) -> None:
    for i in range(EXPORTERS):
        await kube.patch_status(EXPORTER, ns, f"e{i}", {"lastSeen": _stamp(_now()), "exporterStatus": "Available"})


async def _storm(kube: Gateway, ns: str, seconds: float, rng: random.Random) -> None:
    """Leases arrive, some short-lived, some released or deleted, while exporters keep beating."""
    names = [f"l{i:02d}" for i in range(LEASES)]
    deadline = time.monotonic() + seconds
    created: list[str] = []
    for name in names:
        spec: dict[str, Any] = {"clientRef": {"name": rng.choice(["qa", "dev"])},
                                "selector": {"matchLabels": {"board": "rpi"}}}
        if rng.random() < 0.4:
            spec["duration"] = f"{rng.randint(2, 5)}s"
        await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": spec})
        created.append(name)
        await asyncio.sleep(seconds / (2 * LEASES))
    while time.monotonic() < deadline:
        await _heartbeat(kube, ns)
        victim = rng.choice(created)
        if rng.random() < 0.5:
            await kube.merge_patch(LEASE, ns, victim, {"spec": {"release": True}})
        else:
            await kube.delete(LEASE, ns, victim)
            created.remove(victim)
        await asyncio.sleep(0.5)
    await _heartbeat(kube, ns)


def _cond(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


async def double_leases(kube: Gateway, ns: str) -> list[str]:
    """What must hold at every moment of the storm: no exporter Ready for two leases."""
    return double_bookings((await kube.list(LEASE, ns))[0])


# No grace: an evicted lease's end is written before the winner is told Granted, and an exporter that
# restarts ends any lease still Ready on it that its leaseRef no longer names before it answers anyone.
DOUBLE_GRACE = 0.0


async def violations(kube: Gateway, ns: str) -> list[str]:
    leases = {x["metadata"]["name"]: x for x in (await kube.list(LEASE, ns))[0]}
    exporters = {x["metadata"]["name"]: x for x in (await kube.list(EXPORTER, ns))[0]}
    found = []
    active: dict[str, list[str]] = {}
    for name, lease in leases.items():
        status = lease.get("status") or {}
        ended = status.get("ended") is True
        exporter = (status.get("exporterRef") or {}).get("name")
        if lease["spec"].get("release") and not ended:
            found.append(f"lease {name} was released but has not ended")
        end = status.get("endTime")
        if end and not ended and dt.datetime.fromisoformat(end.replace("Z", "+00:00")) < _now(-2):
            found.append(f"lease {name} passed its end {end} but has not ended")
        if ended:
            continue
        if _cond(lease, "Ready") == ("True", "Ready"):
            if exporter not in exporters:
                found.append(f"active lease {name} is bound to missing exporter {exporter}")
            active.setdefault(exporter, []).append(name)
        elif _cond(lease, "Pending") is None:
            found.append(f"lease {name} is neither ended, ready nor pending: {status}")
    for exporter, holders in active.items():
        if len(holders) > 1:
            found.append(f"exporter {exporter} is held by {holders}")
    waiting = [n for n, x in leases.items() if not (x.get("status") or {}).get("ended")
               and _cond(x, "Ready") != ("True", "Ready")]
    for name, exporter in exporters.items():
        ref = ((exporter.get("status") or {}).get("leaseRef") or {}).get("name")
        if ref is None:
            if waiting:
                found.append(f"exporter {name} is free while {waiting} wait")
            continue
        holder = leases.get(ref)
        if holder is None or (holder.get("status") or {}).get("ended"):
            found.append(f"exporter {name} is held for lease {ref}, which is gone or ended")
        elif active.get(name) != [ref]:
            found.append(f"exporter {name} names {ref}, but the active leases on it are {active.get(name)}")
    return found


async def test_actor_chaos_during_a_lease_storm(kube: Gateway, namespace: str, operator: Any, settles: Any,
                                                chaos_seed: int, sampled: Any) -> None:
    await _lab(kube, namespace)
    async with sampled(lambda: double_leases(kube, namespace), grace=DOUBLE_GRACE), \
            ChaosMonkey(operator.system, rate=20.0, kinds={"exporter", "lease"}, seed=chaos_seed) as monkey:
        await _storm(kube, namespace, 10, random.Random(chaos_seed))
    assert len(monkey.kills) > 50, "the monkey should have killed plenty of actors"
    await settles(lambda: violations(kube, namespace), 45)


async def test_operator_sigkilled_mid_storm(tmp_path: Path, settles: Any, killed_operator: Any, chaos_seed: int,
                                           sampled: Any) -> None:
    """A separate control plane, so that only the operator under test acts on it."""
    rng = random.Random(chaos_seed)
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp:
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, "lessor-system", progress=lambda _: None)
            ns = f"chaos-{uuid.uuid4().hex[:6]}"
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            await _lab(kube, ns)

            async with sampled(lambda: double_leases(kube, ns), grace=DOUBLE_GRACE):
                kills = await killed_operator(cp, _storm(kube, ns, 10, rng), rng=rng,
                                              then=lambda: settles(lambda: violations(kube, ns), 45))
            assert kills == 3
