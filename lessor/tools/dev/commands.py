"""`lessor controlplane` and `lessor dev`: everything a newcomer needs, in one process tree."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import shutil
import signal
import socket
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp

from lessor.shipped import manifests
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import Child
from lessor.tools.dev.prometheus import SCRAPE_SECONDS, find_prometheus, graph_url, prometheus_child
from lessor.tools.dev.zipkin import ensure_zipkin, find_java, search_url, spans_endpoint, zipkin_child
from lessor.tools.dev.lock import folder_lock
from lessor.telemetry.tracefile import TRACES_FILE_ENV
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import EXPORTER
from lessor.app.install import install
from lessor.model.times import format_time

HEARTBEAT_SECONDS = 15.0


def _say(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)


async def _until_stopped(*waits: Awaitable[Any]) -> None:
    """Return on SIGINT/SIGTERM or as soon as any of `waits` finishes (a child died)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    stopped = asyncio.ensure_future(stop.wait())
    tasks = [asyncio.ensure_future(w) for w in waits] + [stopped]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
        if stopped in done:
            _say("interrupted: cleaning up")
        for task in done:
            if task.exception() is not None:
                raise task.exception()  # type: ignore[misc]
            if (name := task.result()) and isinstance(name, str):
                _say(f"{name} exited unexpectedly; stopping")
    finally:
        for task in tasks:
            task.cancel()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def run_controlplane(directory: Path, *, controller_manager: bool = True) -> int:
    with folder_lock(directory, "lessor controlplane", _say, since=_now()):
        binaries = ensure_binaries(_say)
        async with ControlPlane(directory, binaries, controller_manager=controller_manager, progress=_say) as cp:
            _say(f"export KUBECONFIG={cp.kubeconfig}   # then: kubectl get namespaces; Ctrl-C stops")
            await _until_stopped(cp.wait())
        _say("stopped the control plane")
    return 0


def _ports(args: argparse.Namespace) -> dict[str, int]:
    """The ports `lessor dev` listens on, by the flag that moves each."""
    ports = {"--health-port": args.health_port, "--metrics-port": args.metrics_port}
    if not args.no_webhook:
        ports["--webhook-port"] = args.webhook_port
    if args.metrics:
        ports["--prometheus-port"] = args.prometheus_port
    if args.traces:
        ports["--zipkin-port"] = args.zipkin_port
    if args.grpc:
        ports["--grpc-port"] = args.grpc_port
    return ports


def _check_ports_free(ports: dict[str, int]) -> None:
    """Refuse before starting anything, rather than fail half-way with `[Errno 98]`."""
    for flag, port in ports.items():
        with socket.socket() as s:
            s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                hint = " or --no-webhook" if flag == "--webhook-port" else ""
                raise RuntimeError(f"port {port} on 127.0.0.1 is in use (by another lessor dev or lessor run?); "
                                   f"choose another with {flag} N{hint}") from None


async def run_dev(args: argparse.Namespace) -> int:
    with folder_lock(args.dir, "lessor dev", _say, since=_now(),
                     independent="another --dir, --kubeconfig-out and ports"):
        _check_ports_free(_ports(args))
        prometheus = find_prometheus() if args.metrics else None
        zipkin = (find_java(), ensure_zipkin(_say)) if args.traces else None
        await _dev(args, prometheus, zipkin)
    return 0


async def _dev(args: argparse.Namespace, prometheus: str | None, zipkin: tuple[str, Path] | None) -> None:
    binaries = ensure_binaries(_say)
    _say(f"starting the local control plane in {args.dir}")
    async with ControlPlane(args.dir, binaries, progress=_say) as cp:
        out = args.kubeconfig_out.resolve()
        tmp = out.with_name(f".{out.name}.tmp")
        shutil.copyfile(cp.kubeconfig, tmp)
        os.replace(tmp, out)
        _say(f"wrote the kubeconfig {out}")
        try:
            async with await Gateway.connect(str(out)) as gateway:
                _say("installing the CRDs")
                await install(gateway, args.operator_namespace, progress=_say)
                async with contextlib.AsyncExitStack() as viewer:  # stops after the operator's last spans
                    if zipkin is not None:
                        await _start_zipkin(*zipkin, args, cp, viewer)
                    await _with_operator(args, cp, out, gateway, prometheus)
        finally:
            _say("stopping the control plane (" + ", ".join(
                ["kube-controller-manager"] * cp.run_controller_manager + ["kube-apiserver", "etcd"]) + ")")
    _say(f"stopped the control plane; kept its data in {cp.directory / 'etcd'} (the next lessor dev starts "
         f"from it; `make clean` removes it) and its logs in {cp.directory / 'logs'}; {out} is stale until "
         "the next lessor dev")


async def _with_operator(args: argparse.Namespace, cp: ControlPlane, out: Path, gateway: Gateway,
                         prometheus: str | None) -> None:
    webhook = ["--no-webhook"] if args.no_webhook else ["--webhook-port", str(args.webhook_port)]
    if args.traces:  # the operator inherits the environment
        traces = (args.dir / "traces.jsonl").resolve()
        os.environ.update({"OTEL_TRACES_EXPORTER": "jsonl,zipkin", TRACES_FILE_ENV: str(traces),
                           "OTEL_EXPORTER_ZIPKIN_ENDPOINT": spans_endpoint(args.zipkin_port)})
        _say(f"tracing the operator into Zipkin and {traces}: `lessor trace lease NAMESPACE/NAME` prints "
             "one lease's trace")
    grpc_ca = (args.dir / "grpc-ca.pem").resolve()  # Jumpstarter's tools trust the development CA through it
    grpc = ["--grpc-port", str(args.grpc_port), "--grpc-ca-out", str(grpc_ca),  # the CA kept with the dev state
            "--grpc-ca-dir", str((args.dir / "grpc-ca").resolve())] if args.grpc else []
    operator = Child("lessor run", [
        sys.executable, "-m", "lessor", "run", "--kubeconfig", str(out),
        "--operator-namespace", args.operator_namespace, "--bind-address", "127.0.0.1",
        "--health-port", str(args.health_port), "--metrics-port", str(args.metrics_port), *webhook, *grpc,
        *(["--trace-leader-election"] if args.trace_leader_election else []), "--event-loop", args.event_loop,
    ], cp.directory / "logs" / "operator.log")
    # cwd outside the source tree, so `-m lessor` imports the installed package
    await operator.start_in(cp.directory)
    _say(f"started the operator (log: {operator.log_path})")
    stack = contextlib.AsyncExitStack()  # what starts after the operator stops before it
    try:
        await _wait_ready(f"http://127.0.0.1:{args.health_port}/readyz", operator)
        _say(f"operator ready: /healthz and /readyz on http://127.0.0.1:{args.health_port}, "
             f"/metrics on http://127.0.0.1:{args.metrics_port}/metrics")
        _say("admission webhook off (--no-webhook)" if args.no_webhook else
             f"admission webhook on https://127.0.0.1:{args.webhook_port}, registered as the "
             "ValidatingWebhookConfiguration lessor-preflight")
        waits: list[Awaitable[Any]] = []  # the heartbeats, and children that must not exit
        if not args.no_samples:
            _say("applying the samples from deploy/samples/")
            docs = manifests.samples()
            for doc in docs:  # one refused sample is reported, the others still come up
                try:
                    for line in await manifests.apply_all(gateway, [doc]):
                        _say(f"applied {line}")
                except ApiError as err:
                    _say(f"sample {doc['kind']}/{doc['metadata']['name']} was refused: {err.message}")
            exporters = [(d["metadata"].get("namespace", "default"), d["metadata"]["name"])
                         for d in docs if d["kind"] == "Exporter"]
            _say(f"reporting heartbeats for the {len(exporters)} sample exporters every {HEARTBEAT_SECONDS:.0f}s")
            waits.append(_heartbeat(gateway, exporters))
        graph = ""
        if prometheus is not None:
            waits.append(_child_exit(await _start_prometheus(prometheus, args, cp, stack)))
            graph = f"    open {graph_url(args.prometheus_port)}\n"
        if args.traces:
            graph += f"    open {search_url(args.zipkin_port)}   # traces\n"
        if args.grpc:
            graph += (f"    # Jumpstarter's tools, on localhost:{args.grpc_port} (docs/jumpstarter-grpc.md):\n"
                      f"    lessor credentials client NAME -n NAMESPACE --kubeconfig {out} --ca-file {grpc_ca} "
                      "-o client.yaml\n    jmp get exporters --client-config client.yaml --with online\n")
        _say(f"ready. In another terminal:\n\n    export KUBECONFIG={out}\n"
             f"    kubectl get lessor -A\n{graph}\nCtrl-C stops everything.")
        await _until_stopped(cp.wait(), _child_exit(operator), *waits)
    finally:
        await stack.aclose()
        _say("stopping the operator" + ("" if args.no_webhook else
                                        " (it removes its webhook registration lessor-preflight)"))
        asked = operator.running  # else it had exited by itself, and its exit code is news
        await operator.stop()
        _say(operator_stopped(operator.process.returncode if operator.process else None, asked=asked,
                              log=operator.log_path))


def operator_stopped(code: int | None, *, asked: bool, log: Path) -> str:
    """What `lessor dev` says once its operator is down: 143 (128 + SIGTERM, `lessor run`'s answer to
    the SIGTERM we sent) is a clean stop, not an error to read an exit code into."""
    if code is None:
        return "the operator did not start"
    if asked and code in (0, 128 + signal.SIGTERM, -signal.SIGTERM):
        return "stopped the operator cleanly"
    if asked and code == -signal.SIGKILL:
        return f"stopped the operator: it did not stop within 10s of SIGTERM and was killed (log: {log})"
    return f"the operator had stopped by itself with exit code {code} (log: {log})"


async def _start_prometheus(binary: str, args: argparse.Namespace, cp: ControlPlane,
                            stack: contextlib.AsyncExitStack) -> Child:
    child = prometheus_child(binary, cp.directory / "prometheus", args.prometheus_port, args.metrics_port)
    await child.start_in(cp.directory)
    stack.push_async_callback(_stop_prometheus, child)
    _say(f"started Prometheus {binary} (log: {child.log_path})")
    await _wait_ready(f"http://127.0.0.1:{args.prometheus_port}/-/ready", child)
    _say(f"Prometheus on http://127.0.0.1:{args.prometheus_port}, scraping the operator's /metrics every "
         f"{SCRAPE_SECONDS}s (data: {cp.directory / 'prometheus' / 'data'})")
    return child


async def _stop_prometheus(child: Child) -> None:
    await child.stop()
    _say("stopped Prometheus")


async def _start_zipkin(java: str, jar: Path, args: argparse.Namespace, cp: ControlPlane,
                        stack: contextlib.AsyncExitStack) -> None:
    child = zipkin_child(java, jar, cp.directory / "zipkin", args.zipkin_port)
    await child.start_in(cp.directory)
    stack.push_async_callback(_stop_zipkin, child)
    _say(f"started Zipkin {jar.name} (log: {child.log_path})")
    await _wait_ready(f"http://127.0.0.1:{args.zipkin_port}/health", child)
    _say(f"Zipkin on {search_url(args.zipkin_port)} (spans in memory, gone when lessor dev stops)")


async def _stop_zipkin(child: Child) -> None:
    await child.stop()
    _say("stopped Zipkin")


def _now() -> str:
    return format_time(dt.datetime.now(dt.UTC))


async def _child_exit(child: Child) -> str:
    assert child.process is not None
    await child.process.wait()
    return child.name


READY_TIMEOUT = 60.0
"""Seconds each child of `lessor dev` has to become ready; LESSOR_DEV_READY_TIMEOUT overrides (a busy machine)."""


async def _wait_ready(url: str, child: Child, timeout: float | None = None) -> None:
    if timeout is None:
        timeout = float(os.environ.get("LESSOR_DEV_READY_TIMEOUT") or READY_TIMEOUT)
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            if not child.running:
                raise RuntimeError(f"{child.name} exited during start-up:\n{child.log_tail()}")
            with contextlib.suppress(aiohttp.ClientError, OSError):
                async with http.get(url) as resp:
                    if resp.status == 200:
                        return
            await asyncio.sleep(0.2)
    raise TimeoutError(f"{child.name} not ready after {timeout:.0f}s; see {child.log_path}")


async def _heartbeat(gateway: Gateway, exporters: list[tuple[str, str]]) -> None:
    """Stand in for the sample exporters' agents: report them alive and available."""
    while True:
        now = _now()
        for namespace, name in exporters:
            with contextlib.suppress(ApiError):
                await gateway.patch_status(EXPORTER, namespace, name, {"lastSeen": now, "exporterStatus": "Available"})
        await asyncio.sleep(HEARTBEAT_SECONDS)
