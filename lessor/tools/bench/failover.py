"""Fail-over under attack (issue 27): replicas of `lessor run`, each its own ServiceAccount, during a
lease storm with churn on a slow node (CPU hogs beside them, or each under a pod's CPU limit, `--cpu-limit`:
lessor/tools/bench/cpu_limit.py), while the leader is SIGKILLed (`kill`), paused past its lease
(`stop`) or the replicas are rolled (`rolling`). The invariants are read afterwards from a watch history
of the Exporters and Leases and from the API server's audit log (lessor/tools/bench/failover_check.py says
what a sample is and what counts), so the bench judges what the API server accepted, not what the
replicas believe.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import re
import shutil
import signal
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson

from lessor.tools.bench.common import is_leader, machine, percentile, say, start_operator, wait_http
from lessor.tools.bench.cpu_limit import CpuQuota
from lessor.tools.bench.failover_check import (
    WRITE_VERBS, failovers, late_writes, scan_history, slim_lease, stranded, writes, writes_per_grant,
)
from lessor.tools.bench.failover_lab import NS, OPS, Account, Hogs, History, Sizes, account_names, churn, heartbeats, lab
from lessor.tools.bench.failover_lab import replica_accounts, storm
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway
from lessor.gateway.resources import EXPORTER, LEASE
from lessor.app.install import install

MODES = ("kill", "stop", "rolling")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=(*MODES, "all"), default="all",
                        help="kill: SIGKILL the leader every ~--kill-every s, --kills times; stop: SIGSTOP the "
                        "leader for --stop-seconds, then SIGCONT, --stops times; rolling: start a new replica, then "
                        "SIGTERM the oldest, each replica in turn, --rounds times; all: each on a fresh control "
                        "plane (default: %(default)s)")
    parser.add_argument("--replicas", type=int, default=3, help="default: %(default)s")
    parser.add_argument("--kills", type=int, default=5, help="SIGKILLs of the leader in kill mode (default: %(default)s)")
    parser.add_argument("--kill-every", type=float, default=8.0,
                        help="seconds from finding the leader to killing it, ±25%% (default: %(default)s)")
    parser.add_argument("--stops", type=int, default=2, help="pauses of the leader in stop mode (default: %(default)s)")
    parser.add_argument("--stop-seconds", type=float, default=25.0,
                        help="how long the leader stays SIGSTOPped; longer than the lease duration "
                        "(default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="rolling restarts in rolling mode (default: %(default)s)")
    parser.add_argument("--lease-duration", default="15s", help="--leader-elect-lease-duration (default: %(default)s)")
    parser.add_argument("--renew-deadline", default="10s", help="--leader-elect-renew-deadline (default: %(default)s)")
    parser.add_argument("--retry-period", default="2s", help="--leader-elect-retry-period (default: %(default)s)")
    sizes = Sizes()
    parser.add_argument("--exporters", type=int, default=sizes.exporters, help="default: %(default)s (issue 27: "
                        "300, and 1000 on the busier node)")
    parser.add_argument("--groups", type=int, default=sizes.groups, help="exporter groups (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=sizes.clients,
                        help="clients, gold/silver/spot in turn (default: %(default)s)")
    parser.add_argument("--leases", type=int, default=sizes.leases, help="default: %(default)s (issue 27: 600, "
                        "and 2000 at 40/s)")
    parser.add_argument("--rate", type=float, default=sizes.rate, help="leases created per second (default: %(default)s)")
    parser.add_argument("--churn", type=float, default=sizes.churn,
                        help="deletes of Ready leases per second after the warm-up (default: %(default)s)")
    parser.add_argument("--warmup", type=float, default=sizes.warmup,
                        help="seconds of storm before the churn and the first signal (default: %(default)s)")
    parser.add_argument("--heartbeat", type=float, default=sizes.heartbeat,
                        help="seconds between two heartbeats of an exporter (default: %(default)s)")
    parser.add_argument("--cpu-hogs", "--hogs", type=int, metavar="N",
                        help="busy-loop processes beside the replicas for the whole run: a busy node (default: 8, "
                        "or 0 with --cpu-limit)")
    parser.add_argument("--cpu-limit", metavar="CPU",
                        help="run each replica (the operator process only, not the control plane nor this driver) "
                        "under a CPU quota, as a pod's resources.limits.cpu: a Kubernetes quantity (200m, 0.5, 1), "
                        "set through a cgroup per replica (cgroup v2 cpu.max or v1 cpu.cfs_quota_us; needs a "
                        "writable cgroup, e.g. root); the JSON's cpu_limit says which (default: no limit)")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="after the attack, seconds the operator gets to leave nothing stranded (default: "
                        "%(default)s)")
    parser.add_argument("--grace", type=float, default=2.0,
                        help="a higher-priority lease counts as waiting at a grant once Pending this long "
                        "(default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=1800.0,
                        help="seconds one mode may take; the CPU hogs end by then too (default: %(default)s)")
    parser.add_argument("--keep", type=Path,
                        help="keep the run's files here (audit log, replica logs, kubeconfigs); default: a "
                        "temporary folder, removed")
    parser.add_argument("--seed", type=int, help="random seed (default: a fresh one, printed)")


# --- the replicas ------------------------------------------------------------------------------------


@dataclass
class Replica:
    proc: subprocess.Popen[bytes]
    health: int
    metrics: int
    user: str = ""
    """Its ServiceAccount's username (the audit log's user), when it runs as one."""


@dataclass
class Replicas:
    """`lessor run` processes against one control plane; each logs to its own folder under `tmp`. With
    `accounts`, the n-th replica started runs as the n-th account."""

    kubeconfig: Path
    tmp: Path
    election: tuple[str, ...] = ()
    """Extra `lessor run` flags, e.g. shorter `--leader-elect-*` durations."""
    members: list[Replica] = field(default_factory=list)
    started: int = 0
    accounts: list[Account] = field(default_factory=list)
    quota: CpuQuota | None = None
    """Each replica's CPU limit (`--cpu-limit`), in a cgroup of its own."""

    def start(self) -> Replica:
        self.started += 1
        folder = self.tmp / f"replica-{self.started}"
        folder.mkdir(parents=True, exist_ok=True)
        health, metrics = free_port(), free_port()
        account = self.accounts[self.started - 1] if self.accounts else None
        kubeconfig = account.kubeconfig if account else self.kubeconfig
        member = Replica(start_operator(kubeconfig, folder, health, metrics, *self.election, quota=self.quota),
                         health, metrics, account.username if account else "")
        self.members.append(member)
        return member

    async def ready(self, member: Replica) -> None:
        await wait_http(f"http://127.0.0.1:{member.health}/readyz", member.proc)

    async def leader(self, timeout: float = 120) -> Replica:
        """The member whose /metrics says `lessor_leader 1`."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for member in list(self.members):
                if member.proc.poll() is None and await asyncio.to_thread(is_leader, member.metrics):
                    return member
            await asyncio.sleep(0.05)
        raise TimeoutError("no replica became the leader")

    def signal(self, member: Replica, sig: signal.Signals) -> None:
        member.proc.send_signal(sig)
        self.members.remove(member)

    async def reap(self, member: Replica) -> None:
        await asyncio.to_thread(member.proc.wait, 30)
        self._ended(member)

    def _ended(self, member: Replica) -> None:
        if self.quota is not None:
            self.quota.ended(member.proc)

    async def stop(self) -> None:
        for member in self.members:
            if member.proc.poll() is None:
                member.proc.send_signal(signal.SIGCONT)
                member.proc.send_signal(signal.SIGTERM)
        for member in self.members:
            try:
                await asyncio.to_thread(member.proc.wait, 30)
            except subprocess.TimeoutExpired:
                member.proc.kill()
                member.proc.wait()
            self._ended(member)
        self.members.clear()


def double_bookings(leases: list[dict[str, Any]]) -> list[str]:
    """Exporters that two not-ended leases hold as Ready, in one list (one moment)."""
    holders: dict[str, list[str]] = {}
    for lease in leases:
        slim = slim_lease(lease)
        if slim["ready"] and slim["exporterRef"] and not slim["ended"]:
            holders.setdefault(slim["exporterRef"], []).append(slim["name"])
    return [f"exporter {e} is Ready for {names}" for e, names in sorted(holders.items()) if len(names) > 1]


# --- the attacks: each returns the (wall-clock time, user) of every signal that hit the leader ------

Signals = list[tuple[float, str]]


async def _kill(replicas: Replicas, args: argparse.Namespace, rng: random.Random) -> Signals:
    sent: Signals = []
    for _ in range(2 * args.kills):  # a leader that loses the lead by itself is not killed: try again
        if len(sent) == args.kills:
            break
        leader = await replicas.leader()
        await asyncio.sleep(args.kill_every * rng.uniform(0.75, 1.25))
        if leader.proc.poll() is not None or not await asyncio.to_thread(is_leader, leader.metrics):
            say(f"kill {len(sent) + 1}/{args.kills}: {leader.user} lost the lead by itself before the kill")
            continue
        sent.append((time.time(), leader.user))
        replicas.signal(leader, signal.SIGKILL)
        say(f"kill {len(sent)}/{args.kills}: SIGKILLed {leader.user}")
        await replicas.reap(leader)
        await replicas.ready(replicas.start())  # as the Deployment would
    return sent


async def _stop(replicas: Replicas, args: argparse.Namespace, rng: random.Random) -> Signals:
    sent: Signals = []
    for i in range(args.stops):
        leader = await replicas.leader()
        await asyncio.sleep(rng.uniform(2.0, 5.0))
        sent.append((time.time(), leader.user))
        leader.proc.send_signal(signal.SIGSTOP)
        say(f"stop {i + 1}/{args.stops}: SIGSTOPped {leader.user} for {args.stop_seconds:.0f}s")
        try:
            await asyncio.sleep(args.stop_seconds)
        finally:
            leader.proc.send_signal(signal.SIGCONT)
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and await asyncio.to_thread(is_leader, leader.metrics):
            await asyncio.sleep(0.2)  # until the resumed one has noticed it lost the lead
        await asyncio.sleep(rng.uniform(4.0, 8.0))
    return sent


async def _rolling(replicas: Replicas, args: argparse.Namespace, rng: random.Random) -> Signals:
    """As a Deployment rolls (maxSurge 1, maxUnavailable 0): a new replica, once ready, replaces the
    oldest, which gets SIGTERM."""
    sent: Signals = []
    for r in range(args.rounds):
        for old in list(replicas.members):
            await replicas.ready(replicas.start())
            was_leader = await asyncio.to_thread(is_leader, old.metrics)
            if was_leader:
                sent.append((time.time(), old.user))
            replicas.signal(old, signal.SIGTERM)
            say(f"rolling {r + 1}/{args.rounds}: SIGTERMed {old.user}{' (the leader)' if was_leader else ''}")
            await replicas.reap(old)
            await asyncio.sleep(rng.uniform(1.0, 3.0))
    return sent


ATTACKS: dict[str, Callable[[Replicas, argparse.Namespace, random.Random], Any]] = {
    "kill": _kill, "stop": _stop, "rolling": _rolling}


def _accounts_needed(mode: str, args: argparse.Namespace) -> int:
    extra: int = {"kill": 2 * args.kills, "stop": 0, "rolling": args.rounds * args.replicas}[mode]
    return int(args.replicas) + extra


def _seconds(text: str) -> float:
    match = re.fullmatch(r"(\d+(?:\.\d+)?)(ms|s)?", text.strip())
    if not match:
        raise ValueError(f"not a duration: {text}")
    return float(match[1]) / (1000 if match[2] == "ms" else 1)


# --- one mode, on a control plane of its own -----------------------------------------------------------


async def attack(mode: str, args: argparse.Namespace, seed: int, folder: Path) -> dict[str, Any]:
    rng = random.Random(f"{seed}-{mode}")
    sizes = Sizes(args.exporters, args.groups, args.clients, args.leases, args.rate, args.churn, args.warmup,
                  args.heartbeat)
    election = ("--leader-elect-lease-duration", args.lease_duration, "--leader-elect-renew-deadline",
                args.renew_deadline, "--leader-elect-retry-period", args.retry_period)
    count = _accounts_needed(mode, args)
    users = tuple(f"system:serviceaccount:{OPS}:{n}" for n in account_names(count))
    async with ControlPlane(folder / "cp", ensure_binaries(say), controller_manager=False, progress=say,
                            audit_users=users, audit_verbs=WRITE_VERBS) as cp:
        assert cp.audit_log is not None
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=say)
            accounts = await replica_accounts(kube, cp.server, cp.pki / "ca.crt", folder / "accounts", count,
                                              int(args.timeout) + 600)
            await lab(kube, sizes)
            say(f"{mode}: lab of {sizes.exporters} exporters in {sizes.groups} groups, {sizes.clients} clients")
            history = History(kube)
            recording, working = asyncio.Event(), asyncio.Event()
            replicas = Replicas(cp.kubeconfig, folder, election, accounts=accounts, quota=args.quota)
            background = [asyncio.create_task(history.run(recording)),
                          asyncio.create_task(heartbeats(kube, sizes, recording))]
            with Hogs(args.hogs, args.timeout):
                try:
                    async with asyncio.timeout(args.timeout):
                        for _ in range(args.replicas):
                            await replicas.ready(replicas.start())
                        began, storm_began = time.monotonic(), time.time()
                        work = [asyncio.create_task(storm(kube, sizes, rng, working)),
                                asyncio.create_task(churn(kube, history, sizes, rng, working))]
                        await asyncio.sleep(sizes.warmup)
                        signals = await ATTACKS[mode](replicas, args, rng)
                        working.set()
                        created, deleted = await asyncio.gather(*work)
                        attacked = time.monotonic() - began
                        left, settled = await _settle(kube, args.settle)
                finally:
                    recording.set()
                    await replicas.stop()
                    for task in background:
                        task.cancel()
                    await asyncio.gather(*background, return_exceptions=True)
            audit = [json.loads(line) for line in cp.audit_log.read_text().splitlines() if line.strip()]
    if args.keep:  # the history too, so that a changed checker can judge the run again
        (folder / "history.jsonl").write_bytes(b"".join(orjson.dumps(e.__dict__) + b"\n" for e in history.events))
    accepted = writes(audit, users)
    seconds = failovers(accepted, signals)
    scanned = scan_history(history.events, args.grace)
    late = late_writes(accepted, _seconds(args.renew_deadline))
    measured = [s for s in seconds if s is not None]
    limit = (_seconds(args.lease_duration) + 2) if mode != "rolling" else 2.0
    stranded_count = sum(len(v) for v in left.values())
    figures = {
        "exporter_ready_for_two_leases": scanned.double_ready.report(),
        "lease_named_by_two_exporters": scanned.double_named.report(),
        "late_writes": late,
        "stranded": {"count": stranded_count, "settled_seconds": settled,
                     **{k: {"count": len(v), "first": v[:5]} for k, v in left.items() if v}},
        "priority_inversions": {"grants": len(scanned.inversions), "first": scanned.inversions[:5]},
        "writes_per_grant": writes_per_grant(accepted, scanned.grants, storm_began),
        "failover": {"signals": len(signals), "p50_seconds": round(percentile(measured, 50), 2) if measured else None,
                     "max_seconds": max(measured) if measured else None, "seconds": seconds},
    }
    targets = {
        "exporter_ready_for_two_leases": ("samples", 0), "lease_named_by_two_exporters": ("samples", 0),
        "late_writes": ("count", 0), "stranded": ("count", 0), "priority_inversions": ("grants", 0),
        "writes_per_grant": ("per_grant", 3),
    }
    verdict = {k: {"value": figures[k][key], "target": target, "met": figures[k][key] <= target}
               for k, (key, target) in targets.items()}
    p50 = figures["failover"]["p50_seconds"]
    verdict["failover_p50_seconds"] = {"value": p50, "target": f"<= {limit:g}",
                                       "met": p50 is not None and p50 <= limit}
    return {"mode": mode, **figures, "targets": verdict,
            "workload": {"leases_created": created, "leases_deleted": deleted, "attack_seconds": round(attacked, 1),
                         "replicas_started": replicas.started, "watch_samples": scanned.samples,
                         "watch_relists": history.relists, "audited_writes": len(accepted)}}


async def _settle(kube: Gateway, seconds: float) -> tuple[dict[str, list[str]], float | None]:
    """Poll the end state every 2 s until nothing is stranded or `seconds` passed; (what is left, seconds
    it took to leave nothing, None if it never did)."""
    began = time.monotonic()
    while True:
        left = stranded((await kube.list(EXPORTER, NS))[0], (await kube.list(LEASE, NS))[0])
        if not any(left.values()):
            return left, round(time.monotonic() - began, 1)
        if time.monotonic() - began >= seconds:
            return left, None
        await asyncio.sleep(2.0)


def summary(result: dict[str, Any]) -> str:
    """One line per mode for the terminal: figure (target)."""
    lines = []
    for mode, r in result["modes"].items():
        t = r["targets"]
        lines.append(
            f"{mode}: exporter Ready for two {t['exporter_ready_for_two_leases']['value']} samples (target 0); "
            f"lease named by two {t['lease_named_by_two_exporters']['value']} samples (0); late writes "
            f"{t['late_writes']['value']} (0); stranded {t['stranded']['value']} (0); priority inversions "
            f"{t['priority_inversions']['value']} (0); writes per grant {t['writes_per_grant']['value']} (3, Events "
            f"included); failover p50 {t['failover_p50_seconds']['value']} s "
            f"({t['failover_p50_seconds']['target']}), max {r['failover']['max_seconds']} s")
    return "\n".join(lines)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    say(f"seed {seed}")
    modes = MODES if args.mode == "all" else (args.mode,)
    args.hogs = args.cpu_hogs if args.cpu_hogs is not None else (0 if args.cpu_limit else 8)
    args.quota = CpuQuota.of(args.cpu_limit) if args.cpu_limit else None
    result: dict[str, Any] = {
        "benchmark": "failover", "seed": seed, "replicas": args.replicas, "cpu_hogs": args.hogs,
        "cpu_limit": args.quota.report() if args.quota else None,
        "leader_election": {"lease_duration": args.lease_duration, "renew_deadline": args.renew_deadline,
                            "retry_period": args.retry_period},
        "workload": {"exporters": args.exporters, "groups": args.groups, "clients": args.clients,
                     "leases": args.leases, "rate": args.rate, "churn": args.churn, "warmup": args.warmup},
        "attack": {"kills": args.kills, "kill_every": args.kill_every, "stops": args.stops,
                   "stop_seconds": args.stop_seconds, "rounds": args.rounds},
        "modes": {},
    }
    with contextlib.ExitStack() as stack:
        if args.quota is not None:
            stack.callback(args.quota.close)
        root = args.keep or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lessor-bench-")))
        for mode in modes:
            folder = root / mode
            if folder.exists():
                shutil.rmtree(folder)
            folder.mkdir(parents=True)
            result["modes"][mode] = await attack(mode, args, seed, folder)
    result["machine"] = machine()
    say("\n" + summary(result))
    return result
