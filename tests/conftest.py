"""Shared fixtures: one real control plane per test session, a fresh namespace per test."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from lessor.controlplane import ControlPlane, ensure_binaries
from lessor.gateway import Gateway
from lessor.gateway.resources import NAMESPACE
from lessor.install import install

OPERATOR_NAMESPACE = "lessor-system"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "controlplane" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.apiserver)


@pytest.fixture(scope="session")
async def controlplane(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ControlPlane]:
    """The real etcd + kube-apiserver (+ controller manager), built from Go modules once per machine."""
    binaries = ensure_binaries(lambda line: print(f"lessor: {line}", flush=True))
    # PodTemplates bypass the watch cache, so a test can force a real 410 Gone by compacting etcd.
    async with ControlPlane(tmp_path_factory.mktemp("controlplane"), binaries,
                            apiserver_args=("--watch-cache-sizes=podtemplates#0",)) as cp:
        yield cp


@pytest.fixture(scope="session")
async def kube(controlplane: ControlPlane) -> AsyncIterator[Gateway]:
    """A gateway to the shared control plane with the CRDs installed."""
    async with await Gateway.connect(str(controlplane.kubeconfig)) as gateway:
        await install(gateway, OPERATOR_NAMESPACE, progress=lambda _: None)
        yield gateway


@pytest.fixture
async def namespace(kube: Gateway) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACE, None, name)


@pytest.fixture
def kubeconfig(controlplane: ControlPlane) -> Path:
    return controlplane.kubeconfig


@pytest.fixture(scope="session")
async def operator(kube: Gateway, controlplane: ControlPlane) -> AsyncIterator[object]:
    """The operator, in this process: its actors, topology and chaos monkey are reachable by tests."""
    import asyncio
    import contextlib

    from prometheus_client import CollectorRegistry

    from lessor.controlplane.processes import free_port
    from lessor.operator import Operator, OperatorConfig

    config = OperatorConfig(operator_namespace=OPERATOR_NAMESPACE, bind_address="127.0.0.1",
                            health_port=free_port(), metrics_port=free_port(), exporter_heartbeat_timeout=30.0)
    registry = CollectorRegistry()
    # Its own connection, as a separate `lessor run` would have: its requests are counted apart.
    async with await Gateway.connect(str(controlplane.kubeconfig), registry=registry) as gateway:
        op = Operator(config, gateway, registry)
        task = asyncio.create_task(op.run())
        while not op.ready()[0]:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
        yield op
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


Violations = Callable[[], Awaitable[list[str]]]


@pytest.fixture
def settles() -> Callable[[Violations, float], Awaitable[None]]:
    """`await settles(violations, timeout)`: poll until the invariant checker finds nothing,
    else fail with what it still finds (the chaos tests' "afterwards")."""
    import asyncio
    import time

    async def wait(violations: Violations, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        found: list[str] = []
        while time.monotonic() < deadline:
            found = await violations()
            if not found:
                return
            await asyncio.sleep(0.5)
        pytest.fail("invariants still broken after the storm:\n" + "\n".join(found))

    return wait


@pytest.fixture
def killed_operator(tmp_path: Path) -> Callable[..., Awaitable[int]]:
    """`await killed_operator(cp, storm, then=checks)`: run `lessor run` against `cp` as its own
    process, SIGKILL and restart it `kills` times while `storm` runs, then await `then()` with
    the last operator still up. Returns how many kills happened."""
    import asyncio
    import signal
    import subprocess
    import sys

    from lessor.controlplane.processes import free_port

    async def run(cp: ControlPlane, storm: Awaitable[None], *, then: Callable[[], Awaitable[None]],
                  kills: int = 3, every: float = 2.5) -> int:
        def start() -> subprocess.Popen[bytes]:
            return subprocess.Popen(
                [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(cp.kubeconfig), "--no-webhook",
                 "--bind-address", "127.0.0.1", "--health-port", str(free_port()),
                 "--metrics-port", str(free_port())],
                cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=open(tmp_path / "operator.log", "ab"))

        proc = start()
        done = 0

        async def killer() -> None:
            nonlocal proc, done
            for _ in range(kills):
                await asyncio.sleep(every)
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                done += 1
                proc = start()

        try:
            await asyncio.gather(storm, killer())
            await then()
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        return done

    return run
