"""The operator under API Priority and Fairness's 429s, against a real kube-apiserver that serves one read and
one write at a time (`--max-requests-inflight=1 --max-mutating-requests-inflight=1`), while another tenant's
ServiceAccount reads all along: the API server answers the operator's own requests 429 with Retry-After, and
the operator slows to what it allows: every lease is granted, and no actor restarts for a 429. Both accounts
fall under the suggested FlowSchema `service-accounts` (the level `workload-low`): the case without
deploy/flowcontrol.yaml, where the neighbour's load lands on lessor's own level."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lessor.app.install import install
from lessor.app.operator import Operator, OperatorConfig
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import EXPORTER, LEASE, NAMESPACE
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from tests.app.test_leader_fence import _account
from tests.leasing.test_chaos import API, EXPORTERS, _cond
from tests.leasing.test_chaos import _lab as lease_lab
from tests.slowness import scaled

OPS = "lessor-system"
NS = "throttled"


async def _read_load(tenant: Gateway, stop: asyncio.Event) -> None:
    """Another client of the API server, reading as fast as it is answered, many requests at once."""
    while not stop.is_set():
        results = await asyncio.gather(*(tenant.list(EXPORTER, NS) for _ in range(80)), return_exceptions=True)
        if not any(isinstance(r, ApiError) for r in results):
            await asyncio.sleep(0)


def _crash_restarts(registry: CollectorRegistry) -> float:
    """Of the running actor system (its collector leaves the registry when it stops)."""
    return sum(sample.value for metric in registry.collect() if metric.name == "lessor_actor_restarts"
               for sample in metric.samples if sample.labels.get("reason") == "crash")


async def _all_granted(admin: Gateway) -> bool:
    leases, _ = await admin.list(LEASE, NS)
    return len(leases) == EXPORTERS and all(_cond(lease, "Ready") == ("True", "Ready") for lease in leases)


@pytest.mark.apiserver
async def test_under_real_429s_every_lease_is_granted_with_no_actor_restart(tmp_path: Path) -> None:
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False,
                            apiserver_args=("--max-requests-inflight=1",
                                            "--max-mutating-requests-inflight=1")) as cp, \
            await Gateway.connect(str(cp.kubeconfig)) as admin:  # system:masters: never throttled
        await install(admin, OPS, progress=lambda _: None)
        await admin.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        await lease_lab(admin, NS)
        operator_config = await _account(admin, cp, tmp_path, "lessor-throttled")
        tenant_config = await _account(admin, cp, tmp_path, "tenant")
        registry = CollectorRegistry()
        stop = asyncio.Event()
        async with await Gateway.connect(str(operator_config), registry=registry) as gateway, \
                await Gateway.connect(str(tenant_config)) as tenant:
            throttled: list[str] = []
            said = gateway.retried

            def recorded(reason: str, why: str) -> None:
                if reason == "429" and "storage is (re)initializing" not in why:
                    throttled.append(why)  # API Priority and Fairness's, not a new API server's
                said(reason, why)

            gateway.retried = recorded  # type: ignore[method-assign]
            op = Operator(OperatorConfig(operator_namespace=OPS, bind_address="127.0.0.1", health_port=free_port(),
                                         metrics_port=free_port()), gateway, registry)
            running = asyncio.create_task(op.run())
            load = asyncio.create_task(_read_load(tenant, stop))
            try:
                for i in range(EXPORTERS):
                    spec: dict[str, Any] = {"clientRef": {"name": "qa"}, "selector": {"matchLabels": {"board": "rpi"}}}
                    await admin.create(LEASE, NS, {"apiVersion": API, "kind": "Lease", "metadata": {"name": f"l{i}"},
                                                   "spec": spec})
                async with asyncio.timeout(scaled(120)):
                    while not await _all_granted(admin):
                        await asyncio.sleep(0.5)
                crashes = _crash_restarts(registry)
            finally:
                stop.set()
                await load
                running.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await running
        assert crashes == 0
        assert throttled, "the API server throttled nothing of the operator's: no 429 provoked"
