"""What every benchmark needs: a control plane of its own (or a given one), machine facts, percentiles,
and the operator as a process of its own with its requests, memory and CPU time."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import platform
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.versions import KUBERNETES_VERSION
from lessor.gateway import Gateway, WatchEvent
from lessor.model.views.conditions import StatusView
from lessor.gateway.resources import EXPORTER, NAMESPACE
from lessor.app.install import install

if TYPE_CHECKING:
    from lessor.tools.bench.cpu_limit import CpuQuota


STARTUP_SECONDS: list[float] = []
"""Start-to-ready times of the control planes `cluster()` started in this process."""


def say(line: str) -> None:
    print(f"lessor bench: {line}", file=sys.stderr, flush=True)


def add_cluster_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="measure this cluster instead of starting a local control plane")


@contextlib.asynccontextmanager
async def cluster(args: argparse.Namespace) -> AsyncIterator[Gateway]:
    """A gateway with the CRDs installed: to `--kubeconfig`, or to a fresh local control plane."""
    if getattr(args, "kubeconfig", None):
        async with await Gateway.connect(args.kubeconfig) as gateway:
            await install(gateway, "lessor-system", progress=say)
            yield gateway
        return
    binaries = ensure_binaries(say)
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        async with ControlPlane(Path(tmp), binaries, controller_manager=False, progress=say) as cp:
            STARTUP_SECONDS.append(round(cp.startup_seconds, 2))
            async with await Gateway.connect(str(cp.kubeconfig)) as gateway:
                await install(gateway, "lessor-system", progress=say)
                yield gateway


def machine() -> dict[str, Any]:
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "kubernetes": KUBERNETES_VERSION,
    }


def percentile(samples: list[float], p: float) -> float:
    if not samples:
        return float("nan")
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# --- the operator as a process of its own: its requests, memory and CPU are its own ------------------

WRITE_VERBS = ("create", "update", "patch", "delete")


PROGRESS_EVERY = 10.0
"""Seconds between two progress lines of a long set-up (creating 50,000 exporters takes minutes)."""


async def gather_limited(coros: list[Any], limit: int = 32, what: str = "") -> None:
    """Run `coros` with at most `limit` in flight: a client that floods the API server measures the client.
    With `what`, says how far it got every `PROGRESS_EVERY` seconds."""
    gate = asyncio.Semaphore(limit)
    done = 0

    async def one(coro: Any) -> None:
        nonlocal done
        async with gate:
            await coro
        done += 1

    async def report() -> None:
        start = time.monotonic()
        while True:
            await asyncio.sleep(PROGRESS_EVERY)
            say(f"{what}: {done:,} of {len(coros):,} ({done / (time.monotonic() - start):.0f}/s)")

    reporting = asyncio.create_task(report()) if what else None
    try:
        await asyncio.gather(*(one(c) for c in coros))
    finally:
        if reporting is not None:
            reporting.cancel()


def start_operator(kubeconfig: Path, tmp: Path, health: int, metrics: int, *extra: str,
                   env: dict[str, str] | None = None, quota: CpuQuota | None = None) -> subprocess.Popen[bytes]:
    """`lessor run` against `kubeconfig`, without the webhook, logging to `tmp/operator.log`; `env` adds to the
    environment (the OTEL_* variables of a traced run); with `quota`, under its CPU limit (`--cpu-limit`)."""
    argv = [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(kubeconfig), "--no-webhook", *extra,
            "--bind-address", "127.0.0.1", "--health-port", str(health), "--metrics-port", str(metrics)]
    popen: Callable[..., subprocess.Popen[bytes]] = subprocess.Popen if quota is None else quota.popen
    return popen(argv, cwd=tmp, stdout=subprocess.DEVNULL, stderr=open(tmp / "operator.log", "wb"),
                 env={**os.environ, **(env or {})})


async def stop_operator(proc: subprocess.Popen[bytes], quota: CpuQuota | None = None) -> None:
    proc.send_signal(signal.SIGTERM)
    await asyncio.to_thread(proc.wait, 30)
    if quota is not None:
        quota.ended(proc)


def metrics_text(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
        body: bytes = resp.read()
        return body.decode()


def is_leader(port: int) -> bool:
    """Whether the operator whose /metrics is on `port` says `lessor_leader 1` (False when it does not answer)."""
    try:
        return re.search(r"^lessor_leader 1(\.0)?$", metrics_text(port), re.MULTILINE) is not None
    except OSError:
        return False


def api_requests(port: int) -> dict[tuple[str, str], float]:
    """The operator's `lessor_api_requests_total` by (verb, kind), summed over codes, from its /metrics."""
    found: dict[tuple[str, str], float] = {}
    for kind, verb, value in re.findall(
            r'lessor_api_requests_total\{code="[^"]*",kind="([^"]*)",verb="([^"]*)"\} (\S+)', metrics_text(port)):
        found[(verb, kind)] = found.get((verb, kind), 0.0) + float(value)
    return found


def unanswered_writes(port: int) -> dict[str, float]:
    """The operator's write attempts the API server did not take (no 2xx: a conflict, a throttle, a timeout), as
    {"verb kind code": count}: a write tried again shows here, and not as a second change of the object."""
    found: dict[str, float] = {}
    for code, kind, verb, value in re.findall(
            r'lessor_api_requests_total\{code="([^"]*)",kind="([^"]*)",verb="([^"]*)"\} (\S+)', metrics_text(port)):
        if verb in WRITE_VERBS and not code.startswith("2") and float(value):
            found[f"{verb} {kind} {code}"] = found.get(f"{verb} {kind} {code}", 0.0) + float(value)
    return found


EVENT_KIND = "Event"


def event_requests(requests: dict[str, float]) -> tuple[dict[str, float], dict[str, float]]:
    """(the work's requests, the Events' requests) of a `request_deltas` result: Events are reported
    apart, so that "writes per lease/claim" counts only what the work itself needs."""
    work = {k: v for k, v in requests.items() if k.split(" ", 1)[1] != EVENT_KIND}
    events = {k.split(" ", 1)[0]: v for k, v in requests.items() if k.split(" ", 1)[1] == EVENT_KIND}
    return work, events


def event_counters(port: int) -> dict[str, float]:
    """The operator's `lessor_events_*` counters (recorded, aggregated, dropped, failed), from its /metrics."""
    found: dict[str, float] = {}
    for name, labels, value in re.findall(r'^lessor_events_(\w+)_total(?:\{([^}]*)\})? (\S+)$', metrics_text(port),
                                          re.M):
        key = name + (f" {labels.split('=', 1)[1].strip(chr(34))}" if labels else "")
        found[key] = found.get(key, 0) + float(value)
    return found


async def events_written(port: int, timeout: float = 120) -> float:
    """Wait until the operator's event recorder has written what it queued (`lessor_events_queued` is 0):
    in a storm Events wait behind the work's writes. Returns the seconds waited."""
    started = time.monotonic()
    while time.monotonic() < started + timeout:
        if re.search(r"^lessor_events_queued 0\.0$", metrics_text(port), re.M):
            break
        await asyncio.sleep(0.25)
    else:
        say("the operator's events were still queued at the timeout")
    return round(time.monotonic() - started, 2)


def events_report(writes: dict[str, float], before: dict[str, float], after: dict[str, float],
                  count: int, lag: float) -> dict[str, Any]:
    """The Events of a storm: their API writes per unit of work (`count`), what the recorder did with what
    the actors recorded (`event_counters` before and after), and how long after the work they were written."""
    delta = {k: round(v - before.get(k, 0)) for k, v in sorted(after.items()) if v - before.get(k, 0)}
    return {
        "creates_per_unit": round(writes.get("create", 0) / count, 3),
        "patches_per_unit": round(writes.get("patch", 0) / count, 3),
        "writes_per_unit": round(sum(writes.values()) / count, 3),
        "recorder": delta,
        "written_seconds_after_work": lag,
    }


def request_deltas(before: dict[tuple[str, str], float], after: dict[tuple[str, str], float]) -> dict[str, float]:
    """Requests made between two `api_requests` readings, as {"verb kind": count}."""
    deltas = {}
    for (verb, kind), value in after.items():
        if delta := value - before.get((verb, kind), 0):
            deltas[f"{verb} {kind}"] = delta
    return deltas


def process_stats(pid: int) -> tuple[int, float]:
    """(RSS bytes, user+system CPU seconds) of a process, from /proc."""
    rss = 0
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            rss = int(line.split()[1]) * 1024
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    return rss, (int(fields[11]) + int(fields[12])) / ticks


async def available_exporters(kube: Gateway, namespace: str, labels: dict[str, dict[str, str]]) -> None:
    """Create the namespace and an Exporter per name (with its labels) whose agent reports it Available, each
    seen when it is created (one time for all aged the first ones by the whole lab's creation, past a heartbeat
    timeout at thousands on a slow machine)."""
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})

    async def exporter(name: str, marks: dict[str, str]) -> None:
        await kube.create(EXPORTER, namespace, {"apiVersion": EXPORTER.api_version, "kind": "Exporter",
                                                "metadata": {"name": name, "labels": marks}})
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await kube.patch_status(EXPORTER, namespace, name, {"lastSeen": now, "exporterStatus": "Available"})

    await gather_limited([exporter(name, marks) for name, marks in labels.items()], what="exporters created")


def ready_at(granted: dict[str, float]) -> Callable[[WatchEvent], None]:
    """An informer handler that notes in `granted` when each object first reports Ready=True."""
    def on_event(event: WatchEvent) -> None:
        seen = StatusView.of(event.object)
        if seen.is_true("Ready") and seen.name not in granted:
            granted[seen.name] = time.perf_counter()

    return on_event


async def wait_http(url: str, proc: subprocess.Popen[bytes], timeout: float = 120) -> None:
    """Wait until `url` answers (the operator's /readyz), failing early if the process exits."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("lessor run exited during start-up")
        try:
            await asyncio.to_thread(urllib.request.urlopen, url, None, 2)
            return
        except OSError:
            await asyncio.sleep(0.2)
    raise TimeoutError(url)
