"""`lessor bench faults --mode apikill`: the API server's bad minute during a lease storm (issue 42).

A fresh control plane, the failover bench's lab (exporters in groups, gold/silver/spot clients, one policy),
`lessor run` as a process of its own, leases created at a steady rate; `--kill-after` seconds into the storm
kube-apiserver is SIGKILLed, and started again `--down` seconds later. Reported: how long after the API server
was ready (and after the last create) every lease had its status and the grants were complete (convergence),
the operator's retries by reason (`lessor_api_retries_total`), its actors' crash restarts, the tracebacks and
outage lines in its log, and from fresh lists: double grants, stale references and leases with no status.
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

from lessor.gateway import Gateway
from lessor.gateway.resources import EXPORTER, LEASE
from lessor.app.install import install
from lessor.tools.bench.common import machine, metrics_text, say, start_operator, stop_operator, wait_http
from lessor.tools.bench.failover import double_bookings
from lessor.tools.bench.failover_check import GROUP_LABEL, slim_lease
from lessor.tools.bench.failover_lab import NS, Sizes, lab, storm
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port

MODES = ("apikill", "none")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--mode", choices=MODES, default="apikill",
                        help="apikill: SIGKILL kube-apiserver during the storm and start it again (default); "
                        "none: the same storm with no fault, the baseline")
    parser.add_argument("--exporters", type=int, default=200, help="exporters (default: %(default)s)")
    parser.add_argument("--groups", type=int, default=10, help="exporter groups (default: %(default)s)")
    parser.add_argument("--clients", type=int, default=12, help="clients, gold/silver/spot in turn (default: %(default)s)")
    parser.add_argument("--leases", type=int, default=400, help="leases created (default: %(default)s)")
    parser.add_argument("--rate", type=float, default=20.0, help="leases created per second (default: %(default)s)")
    parser.add_argument("--kill-after", type=float, default=10.0,
                        help="seconds into the storm when kube-apiserver is killed (default: %(default)s)")
    parser.add_argument("--down", type=float, default=10.0,
                        help="seconds kube-apiserver stays down before it is started again (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=180.0,
                        help="seconds to wait for convergence after the storm (default: %(default)s)")
    parser.add_argument("--seed", type=int, help="the storm's random seed (default: drawn, and reported)")
    parser.add_argument("--keep", type=Path, help="keep the control plane's and the operator's logs in this folder")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    seed = args.seed if args.seed is not None else random.randrange(2**32)
    sizes = Sizes(exporters=args.exporters, groups=args.groups, clients=args.clients, leases=args.leases,
                  rate=args.rate)
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        folder = args.keep or Path(tmp)
        folder.mkdir(parents=True, exist_ok=True)
        async with ControlPlane(folder / "cp", ensure_binaries(say), controller_manager=False, progress=say) as cp, \
                await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, "lessor-system", progress=say)
            await lab(kube, sizes)
            health, metrics = free_port(), free_port()
            # No exporter agents are simulated: a long heartbeat timeout keeps them online through the run.
            proc = start_operator(cp.kubeconfig, folder, health, metrics, "--exporter-heartbeat-timeout", "1h")
            try:
                await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
                before = _counters(metrics_text(metrics))
                result = await _apikill(kube, cp, sizes, args, random.Random(seed))
                after = _counters(metrics_text(metrics))
            finally:
                await stop_operator(proc)
            log = (folder / "operator.log").read_text(errors="replace")
    result.update({
        "retries": {k: n for k in after["retries"] if (n := after["retries"][k] - before["retries"].get(k, 0))},
        "actor_restarts": {k: after["restarts"].get(k, 0) - before["restarts"].get(k, 0)
                           for k in after["restarts"] if after["restarts"].get(k, 0) - before["restarts"].get(k, 0)},
        "tracebacks": log.count("Traceback (most recent call last)"),
        "outage_log_lines": len(re.findall(r"API server (unavailable|still unavailable|answering again)", log)),
    })
    report = {"benchmark": "faults", "mode": args.mode, "seed": seed,
              "workload": {"exporters": args.exporters, "groups": args.groups, "clients": args.clients,
                           "leases": args.leases, "rate": args.rate},
              "fault": {"kill_after": args.kill_after, "down": args.down} if args.mode == "apikill" else None,
              **result, "machine": machine()}
    say(f"converged {result['converged_after_ready_s']} s after the API server was ready, "
        f"{result['converged_after_last_create_s']} s after the last create; "
        f"retries {result['retries']}, actor restarts {sum(result['actor_restarts'].values())}, "
        f"double grants {result['double_grants']}, stale refs {result['stale_refs']}, "
        f"tracebacks {result['tracebacks']}")
    return report


async def _apikill(kube: Gateway, cp: ControlPlane, sizes: Sizes, args: argparse.Namespace,
                   rng: random.Random) -> dict[str, Any]:
    stop = asyncio.Event()
    began = time.monotonic()
    say(f"creating {sizes.leases} leases at {sizes.rate:g}/s" + (
        f"; kube-apiserver killed after {args.kill_after:g} s for {args.down:g} s" if args.mode == "apikill" else ""))
    creating = asyncio.create_task(storm(kube, sizes, rng, stop))
    await asyncio.sleep(args.kill_after)
    killed = time.monotonic()
    start_seconds = 0.0
    if args.mode == "apikill":
        await cp.kill_apiserver()
        await asyncio.sleep(args.down)
        start_seconds = await cp.start_apiserver()
        say(f"kube-apiserver ready again {time.monotonic() - killed:.1f} s after the kill "
            f"({start_seconds:.1f} s to start)")
    ready = time.monotonic() if args.mode == "apikill" else None
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
        "killed_at_s": round(killed - began, 2), "down_s": round(ready - killed, 2) if ready else None,
        "apiserver_start_s": round(start_seconds, 2),
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
    """The operator's retries by reason and crash restarts by actor kind, from its /metrics."""
    retries = {reason: float(value) for reason, value in
               re.findall(r'^lessor_api_retries_total\{reason="([^"]*)"\} (\S+)$', text, re.MULTILINE)}
    restarts: dict[str, float] = {}
    for labels, value in re.findall(r"^lessor_actor_restarts_total\{([^}]*)\} (\S+)$", text, re.MULTILINE):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if pairs.get("reason") == "crash":
            restarts[pairs.get("kind", "?")] = restarts.get(pairs.get("kind", "?"), 0.0) + float(value)
    return {"retries": retries, "restarts": restarts}
