"""What every benchmark needs: a control plane of its own (or a given one), machine facts, percentiles."""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import sys
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from lessor.controlplane import ControlPlane, ensure_binaries
from lessor.controlplane.versions import KUBERNETES_VERSION
from lessor.gateway import Gateway
from lessor.install import install


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
