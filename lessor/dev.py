"""`lessor controlplane` and `lessor dev`: everything a newcomer needs, in one process tree."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime as dt
import os
import shutil
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Any

import aiohttp

from lessor import manifests
from lessor.controlplane import ControlPlane, ensure_binaries
from lessor.controlplane.processes import Child
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import EXPORTER
from lessor.install import install

HEARTBEAT_SECONDS = 15.0


def _say(line: str) -> None:
    print(f"lessor: {line}", file=sys.stderr, flush=True)


async def _until_stopped(*waits: Awaitable[Any]) -> None:
    """Return on SIGINT/SIGTERM or as soon as any of `waits` finishes (a child died)."""
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    tasks = [asyncio.ensure_future(w) for w in waits] + [asyncio.ensure_future(stop.wait())]
    try:
        done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
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
    binaries = ensure_binaries(_say)
    async with ControlPlane(directory, binaries, controller_manager=controller_manager, progress=_say) as cp:
        _say(f"export KUBECONFIG={cp.kubeconfig}   # then: kubectl get namespaces; Ctrl-C stops")
        await _until_stopped(cp.wait())
    return 0


async def run_dev(args: argparse.Namespace) -> int:
    binaries = ensure_binaries(_say)
    async with ControlPlane(args.dir, binaries, progress=_say) as cp:
        out = args.kubeconfig_out.resolve()
        tmp = out.with_name(f".{out.name}.tmp")
        shutil.copyfile(cp.kubeconfig, tmp)
        os.replace(tmp, out)
        async with await Gateway.connect(str(out)) as gateway:
            await install(gateway, args.operator_namespace, progress=_say)
            operator = Child("lessor run", [
                sys.executable, "-m", "lessor", "run", "--kubeconfig", str(out),
                "--operator-namespace", args.operator_namespace, "--bind-address", "127.0.0.1",
                "--health-port", str(args.health_port), "--metrics-port", str(args.metrics_port),
            ], cp.directory / "logs" / "operator.log")
            # cwd outside the source tree, so `-m lessor` imports the installed package
            await operator.start_in(cp.directory)
            _say(f"started the operator (log: {operator.log_path})")
            try:
                await _wait_ready(f"http://127.0.0.1:{args.health_port}/readyz", operator)
                _say("operator ready")
                heartbeats: list[Awaitable[Any]] = []
                if not args.no_samples:
                    docs = manifests.samples()
                    for doc in docs:  # one refused sample is reported, the others still come up
                        try:
                            for line in await manifests.apply_all(gateway, [doc]):
                                _say(f"applied {line}")
                        except ApiError as err:
                            _say(f"sample {doc['kind']}/{doc['metadata']['name']} was refused: {err.message}")
                    exporters = [(d["metadata"].get("namespace", "default"), d["metadata"]["name"])
                                 for d in docs if d["kind"] == "Exporter"]
                    heartbeats.append(_heartbeat(gateway, exporters))
                _say(f"ready. In another terminal:\n\n    export KUBECONFIG={out}\n"
                     "    kubectl get lessor -A\n\nCtrl-C stops everything.")
                await _until_stopped(cp.wait(), _child_exit(operator), *heartbeats)
            finally:
                await operator.stop()
    return 0


async def _child_exit(child: Child) -> str:
    assert child.process is not None
    await child.process.wait()
    return child.name


async def _wait_ready(url: str, child: Child, timeout: float = 60.0) -> None:
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
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for namespace, name in exporters:
            with contextlib.suppress(ApiError):
                await gateway.patch_status(EXPORTER, namespace, name, {"lastSeen": now, "exporterStatus": "Available"})
        await asyncio.sleep(HEARTBEAT_SECONDS)
