"""`lessor bench faults --mode apikill|compact|overload`: the API server's bad minutes during a lease storm
(issue 42).

A fresh control plane, the failover bench's lab (exporters in groups, gold/silver/spot clients, one policy),
`lessor run` as a process of its own, leases created at a steady rate; `--kill-after` seconds into the storm the
fault starts and lasts `--down` seconds:
- apikill: kube-apiserver SIGKILLed, then started again;
- compact: the same, and etcd compacted to its newest revision while the API server is down, as on a long-lived
  cluster whose history moved on meanwhile: every watch resumes into 410 Gone and every informer lists again;
- overload: an API server that serves two reads and one write at a time (`--max-requests-inflight=2
  --max-mutating-requests-inflight=1`, no priority and fairness), the operator as a ServiceAccount of
  deploy/rbac.yaml (not system:masters, which that limit exempts), and another ServiceAccount reading as fast as
  it is answered for the fault's seconds: the operator's requests are answered 429 with Retry-After.
Reported: how long after the fault ended (the API server ready again, or the flood over) and after the last create
every lease had its status and the grants were complete (convergence), the operator's retries by reason
(`lessor_api_retries_total`) and failed watches by code (`lessor_watch_failures_total`), its actors' crash
restarts, the tracebacks and outage lines in its log, and from fresh lists: double grants, stale references and
leases with no status.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import re
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from lessor.gateway import ApiError, Gateway
from lessor.gateway.retries import Retries
from lessor.gateway.resources import EXPORTER, LEASE
from lessor.app.install import install
from lessor.tools.bench.common import machine, metrics_text, say, start_operator, stop_operator, wait_http
from lessor.tools.bench.failover import double_bookings
from lessor.tools.bench.failover_check import GROUP_LABEL, slim_lease
from lessor.tools.bench.failover_lab import NS, Sizes, lab, replica_accounts, storm
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port

MODES = ("apikill", "compact", "overload", "none")

OVERLOAD_LIMITS = ("--max-requests-inflight=2", "--max-mutating-requests-inflight=1")
"""The overloaded API server's limits: the plain max-in-flight filter (the control plane runs without priority and
fairness) answers 429 past them to everyone but system:masters."""

FLOOD_READS = 40
"""Concurrent lists the overload's neighbour keeps in flight."""


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="apikill",
                        help="apikill: SIGKILL kube-apiserver during the storm and start it again (default); "
                        "compact: the same, with etcd compacted while it is down (every informer lists again); "
                        "overload: an API server that serves 2 reads and 1 write at a time, the operator as a "
                        "ServiceAccount, and a neighbour flooding it with reads (429s with Retry-After); "
                        "none: the same storm with no fault, the baseline")
    parser.add_argument("--exporters", type=int, default=200, help="exporters (default: %(default)s)")
    parser.add_argument("--groups", type=int, default=10, help="exporter groups (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=12, help="clients, gold/silver/spot in turn (default: %(default)s)")
    parser.add_argument("--leases", type=int, default=400, help="leases created (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="leases created per second (default: %(default)s)")
    parser.add_argument("--kill-after", type=float, default=10.0,
                        help="seconds into the storm when the fault starts (default: %(default)s)")
    parser.add_argument("--down", type=float, default=10.0,
                        help="seconds the fault lasts: kube-apiserver down before it is started again, or the "
                        "neighbour's flood (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for convergence after the storm (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="the storm's random seed (default: drawn, and reported)")
    parser.add_argument("--keep", type=Path, help="keep the control plane's and the operator's logs in this folder")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    sizes = Sizes(exporters=args.exporters, groups=args.groups, clients=args.clients, leases=args.leases,
                  rate=args.rate)
    overload = args.mode == "overload"
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        async with ControlPlane(folder / "cp", ensure_binaries(say), controller_manager=False, progress=say,
                                apiserver_args=OVERLOAD_LIMITS if overload else ()) as cp, \
                await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, "lessor-system", progress=say)
            await lab(kube, sizes)
            # The operator and the neighbour as ServiceAccounts under overload: system:masters is never limited.
            accounts = (await replica_accounts(kube, cp.server, cp.pki / "ca.crt", folder / "accounts", 2,
                                               int(args.timeout) + 600) if overload else [])
            health, metrics = free_port(), free_port()
            # No exporter agents are simulated: a long heartbeat timeout keeps them online through the run.
            proc = start_operator(accounts[0].kubeconfig if accounts else cp.kubeconfig, folder, health, metrics,
                                  "--exporter-heartbeat-timeout", "1h")
            try:
                await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
                before = _counters(metrics_text(metrics))
                neighbour = accounts[1].kubeconfig if accounts else None
                result = await _storm_with_fault(kube, cp, sizes, args, random.Random(seed), neighbour)
                after = _counters(metrics_text(metrics))
            finally:
                await stop_operator(proc)
            log = (folder / "operator.log").read_text(errors="replace")
    result.update({
        "retries": _grown(before["retries"], after["retries"]),
        "watch_failures": _grown(before["watch_failures"], after["watch_failures"]),
        "actor_restarts": _grown(before["restarts"], after["restarts"]),
        "tracebacks": log.count("Traceback (most recent call last)"),
        "outage_log_lines": len(re.findall(r"API server (unavailable|still unavailable|answering again)", log)),
    })
    report = {"benchmark": "faults", "mode": args.mode, "seed": seed,
              "workload": {"exporters": args.exporters, "groups": args.groups, "clients": args.clients,
                           "leases": args.leases, "rate": args.rate},
              "fault": {"starts_after": args.kill_after, "lasts": args.down,
                        **({"apiserver_limits": list(OVERLOAD_LIMITS), "neighbour_reads_in_flight": FLOOD_READS}
                           if overload else {})} if args.mode != "none" else None,
              **result, "machine": machine()}
    say(f"converged {result['converged_after_ready_s']} s after the fault ended, "
        f"{result['converged_after_last_create_s']} s after the last create; "
        f"retries {result['retries']}, watch failures {result['watch_failures']}, "
        f"actor restarts {sum(result['actor_restarts'].values())}, "
        f"double grants {result['double_grants']}, stale refs {result['stale_refs']}, "
        f"tracebacks {result['tracebacks']}")
    return report


def _grown(before: dict[str, float], after: dict[str, float]) -> dict[str, float]:
    return {k: n for k in after if (n := after[k] - before.get(k, 0))}


async def _flood(kubeconfig: Path, stop: asyncio.Event) -> int:
    """Another tenant reading as fast as it is answered, `FLOOD_READS` lists at a time; the 429s it gets back."""
    refused = 0
    async with await Gateway.connect(str(kubeconfig), retries=Retries(attempts=1)) as tenant:
        while not stop.is_set():
            results = await asyncio.gather(*(tenant.list(EXPORTER, NS) for _ in range(FLOOD_READS)),
                                           return_exceptions=True)
            refused += sum(1 for r in results if isinstance(r, ApiError) and r.status == 429)
    return refused


async def _storm_with_fault(kube: Gateway, cp: ControlPlane, sizes: Sizes, args: argparse.Namespace,
                            rng: random.Random, neighbour: Path | None) -> dict[str, Any]:
    stop = asyncio.Event()
    began = time.monotonic()
    fault = {"apikill": "kube-apiserver killed", "compact": "kube-apiserver killed and etcd compacted",
             "overload": "a neighbour's flood of reads"}.get(args.mode)
    say(f"creating {sizes.leases} leases at {sizes.rate:g}/s" + (
        f"; {fault} after {args.kill_after:g} s for {args.down:g} s" if fault else ""))
    creating = asyncio.create_task(storm(kube, sizes, rng, stop))
    await asyncio.sleep(args.kill_after)
    killed = time.monotonic()
    start_seconds = 0.0
    extra: dict[str, Any] = {}
    if args.mode in ("apikill", "compact"):
        await cp.kill_apiserver()
        if args.mode == "compact":
            extra["compacted_to_revision"] = await cp.compact()
        await asyncio.sleep(args.down)
        start_seconds = await cp.start_apiserver()
        say(f"kube-apiserver ready again {time.monotonic() - killed:.1f} s after the kill "
            f"({start_seconds:.1f} s to start)")
    elif args.mode == "overload":
        assert neighbour is not None
        flood_over = asyncio.Event()
        flooding = asyncio.create_task(_flood(neighbour, flood_over))
        await asyncio.sleep(args.down)
        flood_over.set()
        extra["neighbour_429s"] = await flooding
        say(f"the neighbour's flood ended after {time.monotonic() - killed:.1f} s "
            f"({extra['neighbour_429s']} of its reads answered 429)")
    ready = time.monotonic() if args.mode != "none" else None
    created = await creating
    last_create = time.monotonic()
    deadline = last_create + args.timeout
    while True:
        leases, _ = await kube.list(LEASE, NS)
        exporters, _ = await kube.list(EXPORTER, NS)
        state = _judge(leases, exporters, sizes)
        if state["converged"] or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    converged = time.monotonic() if state["converged"] else None
    return {
        "created": created,
        "fault_at_s": round(killed - began, 2), "fault_s": round(ready - killed, 2) if ready else None,
        "apiserver_start_s": round(start_seconds, 2), **extra,
        "converged": state["converged"],
        "converged_after_ready_s": round(converged - ready, 2) if converged is not None and ready else None,
        "converged_after_last_create_s": round(max(0.0, converged - last_create), 2) if converged is not None else None,
        "granted": state["granted"], "expected_grants": state["expected"], "no_status": state["no_status"],
        "double_grants": len(state["double"]), "stale_refs": len(state["stale"]),
        "problems": (state["double"] + state["stale"])[:20],
    }


def _judge(leases: list[dict[str, Any]], exporters: list[dict[str, Any]], sizes: Sizes) -> dict[str, Any]:
    """Converged: every lease has its Ready condition and as many hold an exporter as the groups allow."""
    slim = [slim_lease(lease) for lease in leases]
    per_group = Counter((e["metadata"].get("labels") or {}).get(GROUP_LABEL, "") for e in exporters)
    wanted = Counter(s["group"] for s in slim)
    expected = sum(min(count, per_group[group]) for group, count in wanted.items())
    no_status = sum(1 for s in slim if not s["readyReason"])
    granted = {s["name"]: s["exporterRef"] for s in slim if s["ready"] and not s["ended"]}
    stale = []
    holders = {e["metadata"]["name"]: ((e.get("status") or {}).get("leaseRef") or {}).get("name") for e in exporters}
    for lease, exporter in granted.items():
        if holders.get(exporter) != lease:
            stale.append(f"lease {lease} is Ready on {exporter}, whose leaseRef names {holders.get(exporter)}")
    return {"converged": no_status == 0 and len(granted) == expected, "granted": len(granted), "expected": expected,
            "no_status": no_status, "double": double_bookings(leases), "stale": stale}


def _counters(text: str) -> dict[str, dict[str, float]]:
    """The operator's retries by reason, failed watches by code and crash restarts by actor kind, from its /metrics."""
    retries = {reason: float(value) for reason, value in
               re.findall(r'^lessor_api_retries_total\{reason="([^"]*)"\} (\S+)$', text, re.MULTILINE)}
    restarts: dict[str, float] = {}
    watch_failures: dict[str, float] = {}
    for name, labels, value in re.findall(r"^(lessor_actor_restarts_total|lessor_watch_failures_total)\{([^}]*)\} (\S+)$",
                                          text, re.MULTILINE):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if name == "lessor_watch_failures_total":
            code = pairs.get("code", "?")
            watch_failures[code] = watch_failures.get(code, 0.0) + float(value)
        elif pairs.get("reason") == "crash":
            restarts[pairs.get("kind", "?")] = restarts.get(pairs.get("kind", "?"), 0.0) + float(value)
    return {"retries": retries, "restarts": restarts, "watch_failures": watch_failures}
