"""A lease storm against the real control plane, judged against the API server's own ceiling.

1,000 exporters in 50 groups, 20 clients under 3 policies (one spot), then
2,000 leases at once, each selecting one group: half of them can be granted,
the rest wait. The operator runs as its own process (`lessor run`), so its
RSS, CPU time and API requests are its own. Then half the holders release at
once (`--release`), and `priority.judge` checks who took the freed exporters:
the highest priority of each group first, every lease with a status, no
waiter beside a free exporter or a spot holder.

`--cpu-share S` runs the storm twice, each on a fresh control plane, with the
operator pinned to one core: alone on it, then beside CPU hogs pinned to the
same core (round(1/S) - 1 busy loops, so the scheduler gives the operator
about S of the core), and reports grants/s loaded against unloaded, the CPU
share the operator really got, writes per lease by verb and object in both
runs and the actor restarts (a busy operator must not look like a crashed one).

`--cpu-limit 200m` runs the operator under a CPU quota instead, as a pod's `resources.limits.cpu`
(lessor/tools/bench/cpu_limit.py): what one replica does with the CPU a cluster gives it.

Every storm also polls `/readyz` and `/healthz` as a kubelet would (`probes`): a replica whose API server
answers must stay ready however slow its loop is (issue 23), on a starved core too. The writes before the
storm are reported apart (`api_writes_before_storm`): a start writes one condition per exporter, client and
policy, and more would show there.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from lessor.tools.bench.apiserver import measure_ceiling
from lessor.tools.bench.canary_tenant import CanaryTimes, canary_lease
from lessor.tools.bench.cpu_limit import CpuQuota
from lessor.tools.bench.probing import ProbePoller
from lessor.tools.bench.common import (
    WRITE_VERBS,
    api_requests,
    available_exporters,
    event_counters,
    event_requests,
    events_report,
    events_written,
    gather_limited,
    machine,
    metrics_text,
    percentile,
    process_stats,
    ready_at,
    request_deltas,
    say,
    start_operator,
    stop_operator,
    unanswered_writes,
    wait_http,
)
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway, Informer
from lessor.gateway.informer import WatchEvent
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, POLICY
from lessor.app.install import install
from lessor.model.views.conditions import StatusView
from lessor.model.views.leasing import LeaseView
from lessor.model.views.meta import Meta
from lessor.tools.bench.priority import Terms, judge
from lessor.tools.bench.profiling import Profile
from lessor.telemetry.tracefile import TRACES_FILE_ENV

API = "lessor.dev/v1alpha1"
NS = "storm"
CANARY = "canary"  # another tenant: one client, two exporters, one lease at a time (issue 23)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporters", type=int, default=1000, help="default: %(default)s")
    parser.add_argument("--leases", type=int, default=2000, help="default: %(default)s")
    parser.add_argument("--clients", type=int, default=20, help="default: %(default)s")
    parser.add_argument("--groups", type=int, default=50, help="exporter groups a lease selects from (default: %(default)s)")
    parser.add_argument("--timeout", type=float, default=600, help="give up after this many seconds (default: %(default)s)")
    parser.add_argument("--release", type=float, default=0.5, metavar="F",
                        help="after the storm, release this share of the granted leases at once and judge who gets "
                        "the freed exporters: priority inversions, leases without status, waiters beside a free "
                        "exporter or a spot holder (0 skips it; default: %(default)s)")
    parser.add_argument("--cpu-share", type=float, default=None, metavar="S",
                        help="also run the storm with the operator pinned to one core beside CPU hogs that leave it "
                        "about S of the core (0 < S <= 1, e.g. 0.25), and report grants/s against the same storm "
                        "on that core alone")
    parser.add_argument("--cpu-limit", metavar="CPU",
                        help="run the operator process (not the control plane nor this driver) under a CPU quota, "
                        "as a pod's resources.limits.cpu: a Kubernetes quantity (200m, 0.5, 1), set through a "
                        "cgroup of its own (cgroup v2 cpu.max or v1 cpu.cfs_quota_us; needs a writable cgroup, e.g. "
                        "root); the JSON's cpu_limit says which (default: no limit)")
    parser.add_argument("--trace", action="store_true",
                        help="also run the storm traced (spans to a file), at 100%% and 1%% parent-based sampling, "
                        "each on a fresh control plane, and report their throughput against the untraced run")
    parser.add_argument("--profile", type=Path, default=None, metavar="FILE",
                        help="sample the operator with py-spy through the (untraced) storm, write the collapsed "
                        "stacks to FILE and add the CPU by stage and the top functions to the JSON (`profile`); "
                        "needs py-spy on PATH and leave to ptrace the operator (root)")


#: The traced runs of `--trace`: the operator's environment for each.
TRACED = {
    "100%": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "1.0"},
    "1%": {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio", "OTEL_TRACES_SAMPLER_ARG": "0.01"},
}


async def run(args: argparse.Namespace) -> dict[str, Any]:
    with contextlib.ExitStack() as stack:
        if args.cpu_limit is not None:
            args.quota = CpuQuota.of(args.cpu_limit)
            stack.callback(args.quota.close)
        else:
            args.quota = None
        result = await _run(args)
    return {**result, "cpu_limit": args.quota.report() if args.quota else None}


async def _run(args: argparse.Namespace) -> dict[str, Any]:
    if args.cpu_share is not None:
        if not 0 < args.cpu_share <= 1:
            raise ValueError("--cpu-share: a share of one core, more than 0 and at most 1")
        return await _starved(args)
    storm, ceiling = await _on_fresh_control_plane(args, None, measure=True)
    assert ceiling is not None
    traced = {}
    for mode, env in TRACED.items() if args.trace else ():
        say(f"the same storm traced, sampling {mode}")
        run_, _ = await _on_fresh_control_plane(args, env, measure=False)
        traced[mode] = {
            "leases_granted_per_second": run_["leases_granted_per_second"],
            "create_to_ready_ms": run_["create_to_ready_ms"],
            "operator_cpu_seconds": run_["operator_cpu_seconds"],
            "spans_written": run_["spans_written"],
            "on_off_ratio": round(run_["leases_granted_per_second"] / max(storm["leases_granted_per_second"], 1e-9), 3),
        }
    allowed = ceiling["status_patches_per_second"]["8"] / max(storm["api_writes_per_granted_lease"], 1e-9)
    return {
        "benchmark": "leases",
        "machine": machine(),
        "setup": {"exporters": args.exporters, "leases": args.leases, "clients": args.clients,
                  "policies": 3, "groups": args.groups},
        **storm,
        "apiserver_ceiling": ceiling,
        "ratio_to_ceiling": round(storm["leases_granted_per_second"] / allowed, 3),
        "ratio_explained": "granted/s divided by (status patches/s at 8 writers / API writes per granted lease)",
        **({"traced": traced, "traced_explained": "each on a fresh control plane; spans written as JSON lines "
            "(OTEL_TRACES_EXPORTER=jsonl); on_off_ratio: granted/s traced over untraced"} if traced else {}),
    }


async def _starved(args: argparse.Namespace) -> dict[str, Any]:
    """The storm on one core, alone and then beside hogs: does throughput fall no faster than the CPU share?"""
    core = max(os.sched_getaffinity(0))
    hogs = max(0, round(1 / args.cpu_share) - 1)
    say(f"the storm with the operator alone on core {core}")
    alone, _ = await _on_fresh_control_plane(args, None, measure=False, core=core)
    say(f"the storm with the operator on core {core} beside {hogs} CPU hog(s)")
    with _hogs(core, hogs):
        starved, _ = await _on_fresh_control_plane(args, None, measure=False, core=core)
    nominal = 1 / (hogs + 1)
    ratio = starved["leases_granted_per_second"] / max(alone["leases_granted_per_second"], 1e-9)
    return {
        "benchmark": "leases --cpu-share",
        "machine": machine(),
        "setup": {"exporters": args.exporters, "leases": args.leases, "clients": args.clients,
                  "policies": 3, "groups": args.groups, "core": core, "hogs": hogs,
                  "cpu_share_asked": args.cpu_share, "cpu_share_nominal": round(nominal, 3)},
        "alone": alone,
        "starved": starved,
        "grants_per_second_ratio": round(ratio, 3),
        "grants_per_second_target": round(0.8 * nominal, 3),
        "target_met": ratio >= 0.8 * nominal and starved["actor_restarts"] == 0,
        "explained": "each run on a fresh control plane with the operator pinned to one core; the starved run "
                     "shares that core with `hogs` busy loops (the scheduler's fair share: 1/(hogs+1)); "
                     "grants_per_second_ratio is starved over alone, the target 0.8 x the nominal share; "
                     "operator_cpu_share is the operator's CPU seconds over the storm's seconds",
    }


@contextlib.contextmanager
def _hogs(core: int, count: int) -> Iterator[None]:
    """`count` busy loops pinned to `core`, for as long as the block runs."""
    procs = [subprocess.Popen([sys.executable, "-c", "while True: pass"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL) for _ in range(count)]
    try:
        for proc in procs:
            os.sched_setaffinity(proc.pid, {core})
        yield
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


def _lag_buckets(text: str) -> dict[float, float]:
    """The operator's event loop lag histogram (sampled every 0.5 s): cumulative count by upper bound."""
    return {float(le): float(v) for le, v in
            re.findall(r'^lessor_event_loop_lag_seconds_bucket\{le="([^"]+)"\} (\S+)$', text, re.M)}


def _worst_lag(before: dict[float, float], after: dict[float, float]) -> float | None:
    """The upper bound of the worst lag sampled between the two readings (None: no sample; inf: off the scale):
    whether the loop itself was the bottleneck."""
    deltas = sorted((le, after[le] - before.get(le, 0.0)) for le in after)
    if not deltas or not deltas[-1][1]:
        return None
    return next(le for le, count in deltas if count == deltas[-1][1])


def _messages(text: str) -> Counter[str]:
    """Messages handled so far by `kind message_type` (both outcomes), from the operator's /metrics."""
    found: Counter[str] = Counter()
    for kind, message_type, value in re.findall(
            r'^lessor_messages_handled_total\{kind="([^"]*)",message_type="([^"]*)",outcome="[^"]*"\} (\S+)$',
            text, re.M):
        found[f"{kind} {message_type}"] += int(float(value))
    return found


def _sum_metric(text: str, name: str) -> float:
    return sum(float(v) for v in re.findall(rf"^{name}(?:\{{[^}}]*\}})? (\S+)$", text, re.M))


async def _on_fresh_control_plane(args: argparse.Namespace, trace_env: dict[str, str] | None,
                                  measure: bool, core: int | None = None,
                                  ) -> tuple[dict[str, Any], dict[str, Any] | None]:
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        async with ControlPlane(Path(tmp) / "cp", ensure_binaries(say), controller_manager=False, progress=say) as cp:
            async with await Gateway.connect(str(cp.kubeconfig)) as kube:
                await install(kube, "lessor-system", progress=say)
                ceiling = None
                if measure:
                    say("measuring the API server's ceiling first")
                    ceiling = await measure_ceiling(kube, seconds=3, watch_samples=50)
                await _lab(kube, args)
                env = None
                if trace_env is not None:
                    env = {"OTEL_TRACES_EXPORTER": "jsonl", TRACES_FILE_ENV: str(Path(tmp) / "traces.jsonl"),
                           **trace_env}
                profile = args.profile if env is None and core is None else None
                storm = await _storm(kube, cp.kubeconfig, Path(tmp), args, env, core, profile)
                if env is not None:  # the operator flushed its spans when it stopped
                    spans = await asyncio.to_thread(Path(env[TRACES_FILE_ENV]).read_bytes)
                    storm["spans_written"] = spans.count(b"\n")
    return storm, ceiling


async def _lab(kube: Gateway, args: argparse.Namespace) -> None:
    say(f"creating {args.exporters} exporters, {args.clients} clients, 3 policies")
    await available_exporters(kube, NS, {f"e{i:04d}": {"board": "rpi", "group": f"g{i % args.groups}"}
                                         for i in range(args.exporters)})
    await gather_limited([kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {
        "name": f"c{i:02d}", "labels": {"tier": ("gold", "silver", "spot")[i % 3]}}}) for i in range(args.clients)])
    await available_exporters(kube, CANARY, {"quiet": {"slot": "quiet"}, "busy": {"slot": "busy"}})
    await kube.create(CLIENT, CANARY, {"apiVersion": API, "kind": "Client", "metadata": {
        "name": "canary", "labels": {"tier": "canary"}}})
    await kube.create(POLICY, CANARY, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "canary"},
                                       "spec": {"exporterSelector": {}, "policies": [{
                                           "priority": 10, "maximumDuration": "8h",
                                           "from": [{"clientSelector": {"matchLabels": {"tier": "canary"}}}]}]}})
    for name, tier, priority, spot in (("gold", "gold", 30, False), ("silver", "silver", 20, False),
                                       ("spot", "spot", 10, True)):
        await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": name},
                                       "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [{
                                           "priority": priority, "spotAccess": spot, "maximumDuration": "8h",
                                           "from": [{"clientSelector": {"matchLabels": {"tier": tier}}}]}]}})


async def _all_online(kube: Gateway, count: int, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        exporters, _ = await kube.list(EXPORTER, NS)
        online = sum(1 for e in exporters if StatusView.of(e).condition("Online") is not None)
        if online >= count:
            return
        await asyncio.sleep(0.5)
    raise TimeoutError("the operator did not write every exporter's Online condition")


async def _storm(kube: Gateway, kubeconfig: Path, tmp: Path, args: argparse.Namespace,
                 env: dict[str, str] | None = None, core: int | None = None,
                 profile_to: Path | None = None) -> dict[str, Any]:
    health, metrics = free_port(), free_port()
    # The exporters' agents are not simulated (their heartbeats would compete for the API
    # server), so the heartbeat timeout is long enough to keep them online through the storm.
    exporters_at_start = len((await kube.list(EXPORTER))[0])  # every namespace's: a leftover would be written too
    proc = start_operator(kubeconfig, tmp, health, metrics, "--exporter-heartbeat-timeout", "1h", env=env,
                          quota=args.quota)
    if core is not None:  # the process and every thread it starts later
        os.sched_setaffinity(proc.pid, {core})
    stack = contextlib.ExitStack()
    probes: list[ProbePoller] = []
    profile = Profile(proc.pid, profile_to) if profile_to is not None else None
    try:
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
        await _all_online(kube, args.exporters)  # written once at start: not the storm's writes
        quiet = await canary_lease(kubeconfig, CANARY, "quiet")
        before, events_before = api_requests(metrics), event_counters(metrics)
        unanswered_before = unanswered_writes(metrics)
        text = metrics_text(metrics)
        restarts_before = _sum_metric(text, "lessor_actor_restarts_total")
        slow_before = _sum_metric(text, "lessor_mailbox_slow_asks_total")
        lag_before = _lag_buckets(text)
        messages_before = _messages(text)
        if profile is not None:
            profile.start()
        _, cpu_before = process_stats(proc.pid)

        created: dict[str, float] = {}
        granted: dict[str, float] = {}
        latest: dict[str, dict[str, Any]] = {}
        note_ready = ready_at(granted)

        def seen(event: WatchEvent) -> None:
            note_ready(event)
            name = Meta.of(event.object).name
            if event.type == "DELETED":
                latest.pop(name, None)
            else:
                latest[name] = event.object

        informer = Informer(kube, LEASE, seen, namespace=NS)
        watch = asyncio.create_task(informer.run())
        await informer.synced.wait()
        say(f"creating {args.leases} leases at once")
        started = time.perf_counter()
        probes = [stack.enter_context(ProbePoller(health, path)) for path in ("/readyz", "/healthz")]

        async def lease(i: int) -> None:
            name = f"l{i:05d}"
            created[name] = time.perf_counter()
            await kube.create(LEASE, NS, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
                "clientRef": {"name": f"c{i % args.clients:02d}"},
                "selector": {"matchLabels": {"group": f"g{i % args.groups}"}}, "duration": "1h"}})

        busy = asyncio.create_task(canary_lease(kubeconfig, CANARY, "busy", after=lambda: len(created) >= args.leases // 2))
        await gather_limited([lease(i) for i in range(args.leases)], limit=32)
        created_by = time.perf_counter()
        # Every group has exporters/groups exporters, so at most that many leases per group can win.
        expected = min(args.leases, args.exporters)
        deadline = time.monotonic() + args.timeout
        last = -1
        while len(granted) < expected and time.monotonic() < deadline:
            if len(granted) != last:
                say(f"{len(granted)} of {expected} leases granted")
                last = len(granted)
            await asyncio.sleep(1)
        done = max(granted.values(), default=time.perf_counter())
        await asyncio.sleep(2)
        stack.close()  # the probes were polled through the storm
        after = api_requests(metrics)
        rss, cpu_after = process_stats(proc.pid)
        if profile is not None:
            profile.stop()
        text = metrics_text(metrics)
        restarts = _sum_metric(text, "lessor_actor_restarts_total") - restarts_before
        slow_asks = _sum_metric(text, "lessor_mailbox_slow_asks_total") - slow_before
        worst_lag = _worst_lag(lag_before, _lag_buckets(text))
        messages = _messages(text) - messages_before
        lag = await events_written(metrics)  # Events wait behind the work's writes: counted once written
        events_after = event_counters(metrics)
        _, event_writes = event_requests(request_deltas(before, api_requests(metrics)))
        live, granted = granted, dict(granted)  # the storm's grants, judged below; the release phase adds to live
        release = await _release(kube, args, live, latest) if args.release > 0 else None
        during = await busy
        watch.cancel()
    finally:
        stack.close()
        if profile is not None:
            profile.stop()
        await stop_operator(proc, args.quota)
    latencies = [(granted[n] - created[n]) * 1000 for n in granted if n in created]
    start_work, _ = event_requests(request_deltas({}, before))
    requests, _ = event_requests(request_deltas(before, after))
    writes = sum(v for k, v in requests.items() if k.split()[0] in WRITE_VERBS)
    count = max(len(granted), 1)
    return {
        "leases_granted": len(granted),
        "leases_expected_granted": expected,
        "leases_granted_per_second": round(len(granted) / max(done - started, 1e-9), 1),
        "create_seconds": round(created_by - started, 2),
        "create_to_ready_ms": {"p50": round(percentile(latencies, 50), 1), "p99": round(percentile(latencies, 99), 1)},
        "api_requests_per_granted_lease": {k: round(v / count, 3) for k, v in sorted(requests.items())},
        "api_writes_per_granted_lease": round(writes / count, 3),
        "list_calls_during_storm": sum(v for k, v in requests.items() if k.startswith("list ")),
        "api_writes_before_storm": {k: v for k, v in sorted(start_work.items()) if k.split()[0] in WRITE_VERBS},
        "api_writes_before_storm_explained": "the start-up's writes (a condition per exporter, client and policy; "
                                             "the leader election's) and the quiet canary's lease, by verb and "
                                             "object, Events apart; every attempt, answered or not",
        "start_up": {
            "exporters": exporters_at_start,
            "exporter_status_patches_per_exporter": round(start_work.get("patch Exporter", 0) / max(exporters_at_start, 1),
                                                          3),
            "unanswered_writes": unanswered_before,
            "explained": "exporters: every Exporter the operator found at its start, in every namespace (the lab's "
                         "and the canary's two; more would be another's leftovers); the patches are the start's "
                         "(one Online each, the target at most 1) and the quiet canary's commit; unanswered_writes: "
                         "the attempts before the storm the API server did not take, by verb, kind and code "
                         "(counted in the writes above too)"},
        "events": {**events_report(event_writes, events_before, events_after, count, lag),
                   "unit": "granted lease", "explained": "Event writes are not in the API writes above"},
        "messages_per_granted_lease": {
            "total": round(messages.total() / count, 2),
            **{k: round(v / count, 2) for k, v in messages.most_common(15)},
            "explained": "actor messages handled in the storm window, by actor kind and message type (the 15 most)"},
        "operator_rss_bytes": rss,
        "operator_cpu_seconds": round(cpu_after - cpu_before, 2),
        "operator_cpu_ms_per_granted_lease": round((cpu_after - cpu_before) * 1000 / count, 2),
        "operator_cpu_share": round((cpu_after - cpu_before) / max(done + 2 - started, 1e-9), 3),
        "actor_restarts": int(restarts),
        "slow_asks": int(slow_asks),  # asks without a deadline (to the topology) unanswered after 5 s
        **({"release_phase": release} if release is not None else {}),
        **({"profile": profile.report()} if profile is not None else {}),
        "probes": {**{p.path: p.report() for p in probes},
                   "explained": "polled every 0.25 s from the storm's first create until 2 s after its last grant, "
                                "each with the Deployment's 3 s timeout; a failure is anything but 200 in time, and "
                                "the kubelet acts only after 3 in a row (longest_failing_run)"},
        "canary": {"quiet_seconds": round(quiet.seconds, 2), "during_storm_seconds": round(during.seconds, 2),
                   "ratio": round(during.seconds / max(quiet.seconds, 1e-9), 2), "target_ratio": 2.0,
                   "create_request_seconds": {"quiet": round(quiet.create_seconds, 3),
                                              "during_storm": round(during.create_seconds, 3)},
                   "ratio_after_created": round((during.seconds - during.create_seconds)
                                                / max(quiet.seconds - quiet.create_seconds, 1e-9), 2),
                   "watched": {"quiet_seconds": round(quiet.watched_seconds, 2),
                               "during_storm_seconds": round(during.watched_seconds, 2),
                               "ratio": round(during.watched_seconds / max(quiet.watched_seconds, 1e-9), 2)},
                   "api_floor": _floor(quiet, during),
                   "loop_lag_during_storm_at_most_seconds": worst_lag,
                   "explained": "another namespace's one lease, created to Ready, alone and then while this "
                                "storm's leases are being created (issue 23: one tenant cannot slow another), by "
                                "a process of its own, as another tenant's client (its own connections and loop); "
                                "create_request_seconds: the create request alone, the API server's answer "
                                "before lessor can know of the lease; ratio_after_created: the ratio of the "
                                "times from that answer to Ready (lessor's part, its own writes' waits at the "
                                "API server included)"},
    }


def _floor(quiet: CanaryTimes, during: CanaryTimes) -> dict[str, Any]:
    """The canary's time split into the API server's share (its floor) and lessor's (the rest, watched), and the
    best ratio this machine allows: the storm's floor plus lessor's quiet part, over the quiet time."""
    ours_quiet, ours_during = quiet.watched_seconds - quiet.api_floor_seconds, during.watched_seconds - during.api_floor_seconds
    return {
        "quiet_seconds": round(quiet.api_floor_seconds, 3),
        "during_storm_seconds": round(during.api_floor_seconds, 3),
        "lessor_part_seconds": {"quiet": round(ours_quiet, 3), "during_storm": round(ours_during, 3)},
        "ratio_at_best": round((during.api_floor_seconds + ours_quiet) / max(quiet.watched_seconds, 1e-9), 2),
        "explained": "the canary's API requests without lessor (a create, then two writes one after the other, "
                     "until a watch delivers the second: the exporter's commit and the lease's Ready are two), "
                     "on ConfigMaps lessor does not watch, sent by the canary's process again and again from its "
                     "lease's create until the lease is Ready: the median; lessor_part_seconds: the watched time "
                     "less this floor (the decision window, the hops); "
                     "ratio_at_best: the watched ratio if lessor's part stayed as quiet as alone",
    }


_TIERS = (Terms("", 30, False), Terms("", 20, False), Terms("", 10, True))  # gold, silver, spot: see `_lab`


def _terms(args: argparse.Namespace) -> Callable[[str], Terms]:
    """Lease l{i} selects group g{i % groups} for client c{i % clients}, whose tier is (i % clients) % 3."""
    def terms_of(name: str) -> Terms:
        i = int(name[1:])
        tier = _TIERS[(i % args.clients) % 3]
        return Terms(f"g{i % args.groups}", tier.priority, tier.spot)

    return terms_of


async def _release(kube: Gateway, args: argparse.Namespace, granted: dict[str, float],
                   latest: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Release a share of the holders at once, wait for the waiters to take what was freed, and judge it."""
    terms_of = _terms(args)
    holders = sorted(n for n, lease in latest.items() if n in granted and not LeaseView.of(lease).ended)
    step = max(1, round(1 / args.release))
    released = holders[::step]
    per_group = Counter(f"g{i % args.groups}" for i in range(args.exporters))
    waiting = Counter(terms_of(n).group for n, lease in latest.items() if n not in granted and not LeaseView.of(lease).ended)
    freed = Counter(terms_of(n).group for n in released)
    expected = sum(min(freed[g], waiting[g]) for g in freed)
    say(f"releasing {len(released)} of {len(holders)} holders at once; {expected} waiters should take their place")
    release_at = time.perf_counter()
    await gather_limited([kube.merge_patch(LEASE, NS, name, {"spec": {"release": True}}) for name in released],
                         limit=32)
    deadline = time.monotonic() + args.timeout
    last = -1
    while time.monotonic() < deadline:
        regranted = sum(1 for at in granted.values() if at >= release_at)
        if regranted >= expected:
            break
        if regranted != last:
            say(f"{regranted} of {expected} freed exporters taken")
            last = regranted
        await asyncio.sleep(1)
    await asyncio.sleep(5)  # what settles late (an eviction, a Pending rewritten) is judged too
    latencies = [(at - release_at) * 1000 for at in granted.values() if at >= release_at]
    return {
        "released": len(released),
        "regrants_expected": expected,
        "release_to_regrant_ms": {"p50": round(percentile(latencies, 50), 1),
                                  "p99": round(percentile(latencies, 99), 1)},
        **judge(dict(latest), granted, release_at, terms_of, per_group),
        "explained": "priority_inversions: leases granted after the release while a lease of a higher priority in "
                     "their group still waits at the end (target 0); the other counts are of a settled storm "
                     "(target 0 each)",
    }
