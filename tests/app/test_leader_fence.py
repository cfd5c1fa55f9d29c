"""The leader fence the API server enforces (deploy/leader-fence.yaml, installed by `lessor install`), against
the real kube-apiserver: replicas that run as lessor's ServiceAccounts, each with a TokenRequest token, and
one of them holds the leader Lease. The other's writes are refused by the API server itself, whatever its
own fence says, with a message naming the holder, and lessor reads the refusal as `NotLeader`; a hand-over
swaps the roles; anyone else's writes are never judged; without the fence (`--no-leader-elect`) or without a
Lease nothing is refused."""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.actors.api import EXPORTER as EXPORTER_KIND
from lessor.app.api_adapter import GatewayApi
from lessor.tools.controlplane import ControlPlane
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import EXPORTER
from lessor.app.install import install, leader_fence_documents
from lessor.leadership.election import (COORDINATION_LEASE, FENCE_POLICY, HOLDER_POD, HOLDER_USERNAME, LEASE_NAME,
                           ElectionSettings, LeaderElector, NotLeader)
from tests.slowness import scaled
from tests.tasks import cancelled, running

OPS = "lessor-system"
SETTINGS = ElectionSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.3, name=LEASE_NAME)


async def _account(admin: Gateway, cp: ControlPlane, folder: Path, name: str) -> Path:
    """A ServiceAccount of the operator namespace allowed everything (the fence, not RBAC, is on trial),
    and a kubeconfig with its TokenRequest token (not bound to a pod)."""
    await admin.request("create", "ServiceAccount", "POST", f"/api/v1/namespaces/{OPS}/serviceaccounts",
                        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": name}})
    binding = await admin.resolve("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
    await admin.create(binding, None, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "cluster-admin"},
        "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": OPS}]})
    answer = await admin.request(
        "create", "TokenRequest", "POST", f"/api/v1/namespaces/{OPS}/serviceaccounts/{name}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest", "spec": {"expirationSeconds": 3600}})
    path = folder / f"{name}.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": name,
        "clusters": [{"name": "t", "cluster": {"server": cp.server, "certificate-authority": str(cp.pki / "ca.crt")}}],
        "users": [{"name": name, "user": {"token": answer["status"]["token"]}}],
        "contexts": [{"name": name, "context": {"cluster": "t", "user": name}}]}))
    return path


@contextlib.asynccontextmanager
async def _replicas(admin: Gateway, cp: ControlPlane, folder: Path, count: int) -> AsyncIterator[list[Gateway]]:
    """`count` gateways, each as its own ServiceAccount `lessor-<random>` (matched by the fence)."""
    names = [f"lessor-{uuid.uuid4().hex[:6]}" for _ in range(count)]
    async with contextlib.AsyncExitStack() as stack:
        gateways = [await stack.enter_async_context(
            await Gateway.connect(str(await _account(admin, cp, folder, n)))) for n in names]
        try:
            yield gateways
        finally:
            with contextlib.suppress(ApiError):
                await admin.delete(COORDINATION_LEASE, OPS, LEASE_NAME)



async def _exporter(admin: Gateway, namespace: str) -> str:
    await admin.create(EXPORTER, namespace, {"apiVersion": EXPORTER.api_version, "kind": "Exporter",
                                             "metadata": {"name": "board"}})
    return "board"


def _status_patch(api: GatewayApi, namespace: str, value: str) -> Awaitable[Any]:
    return api.patch_status(EXPORTER_KIND, namespace, "board", {"exporterStatus": value})


async def _eventually(check: Callable[[], Awaitable[bool]], timeout: float = 10.0) -> float:
    """Poll until `check()`; return how long it took (the fence takes effect asynchronously)."""
    began = time.monotonic()
    async with asyncio.timeout(scaled(timeout)):
        while not await check():
            await asyncio.sleep(0.05)
    return time.monotonic() - began


async def _refused(write: Callable[[], Awaitable[Any]]) -> NotLeader | None:
    try:
        await write()
    except NotLeader as err:
        return err
    return None


async def test_only_the_lease_holder_writes_and_a_hand_over_swaps_the_roles(
    kube: Gateway, controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    await _exporter(kube, namespace)
    async with _replicas(kube, controlplane, tmp_path, 2) as (one, two):
        first, second = (LeaderElector(g, OPS, SETTINGS, identity=f"{who}_{uuid.uuid4()}")
                         for g, who in ((one, "first"), (two, "second")))
        # Without their own fence, so that what refuses is the API server's.
        heard: list[str] = []
        api_one = GatewayApi(one, refused=heard.append)
        api_two = GatewayApi(two, refused=heard.append)
        async with running(first.run()) as leading:
            await asyncio.wait_for(first.wait_leading(), scaled(10))
            lease = await kube.get(COORDINATION_LEASE, OPS, LEASE_NAME)
            user_one = f"system:serviceaccount:{OPS}:{one_name(first)}"
            assert lease["metadata"]["annotations"][HOLDER_USERNAME] == user_one
            assert HOLDER_POD not in lease["metadata"]["annotations"]  # the token is bound to no pod

            # The follower's status patch is refused by the API server, naming the holder.
            refusal = None

            async def follower_refused() -> bool:
                nonlocal refusal
                refusal = await _refused(lambda: _status_patch(api_two, namespace, "Offline"))
                return refusal is not None

            await _eventually(follower_refused)
            assert refusal is not None and refusal.reason == "NotLeader" and refusal.status == 403
            assert f"ValidatingAdmissionPolicy '{FENCE_POLICY}'" in str(refusal)
            assert f"is held by {first.identity} ({user_one})" in str(refusal), refusal
            assert heard and heard[-1] == refusal.by_server
            await _status_patch(api_one, namespace, "Available")  # the holder writes
            await _status_patch(GatewayApi(kube), namespace, "LeaseReady")  # the administrator is not judged
            assert (await kube.get(EXPORTER, namespace, "board"))["status"]["exporterStatus"] == "LeaseReady"

            async with running(second.run()):
                await asyncio.sleep(3 * SETTINGS.retry_period)
                assert first.leading() and not second.leading()
                await cancelled(leading)  # SIGTERM: release hands over
                await first.release()
                await asyncio.wait_for(second.wait_leading(), scaled(10))
                # The roles swapped: the old holder, even with its own fence out of the way, is refused.
                await _status_patch(api_two, namespace, "Available")
                refusal = await _refused(lambda: _status_patch(api_one, namespace, "Offline"))
                assert refusal is not None and f"is held by {second.identity}" in str(refusal), refusal
                await _status_patch(GatewayApi(kube), namespace, "Available")
    status = (await kube.get(EXPORTER, namespace, "board"))["status"]
    assert status["exporterStatus"] == "Available"


def one_name(elector: LeaderElector) -> str:
    assert elector.authenticated is not None
    return elector.authenticated[0].rpartition(":")[2]


async def test_a_leader_refused_by_the_api_server_steps_down_at_once(
    kube: Gateway, controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """A leader whose own fence is still open (a long renew deadline) but whose Lease another replica holds:
    its write passes its own fence and is refused at the API server, and it steps down then, not at its
    renew deadline."""
    await _exporter(kube, namespace)
    slow = ElectionSettings(lease_duration=60.0, renew_deadline=40.0, retry_period=20.0, name=LEASE_NAME)
    async with _replicas(kube, controlplane, tmp_path, 2) as (one, two):
        first = LeaderElector(one, OPS, slow, identity=f"first_{uuid.uuid4()}")
        async with running(first.run()):
            await asyncio.wait_for(first.wait_leading(), scaled(10))
            api = GatewayApi(one, fence=first.fence, refused=first.refused)
            await _status_patch(api, namespace, "Available")
            # Another replica took the Lease (as after a pause longer than the lease duration).
            other = LeaderElector(two, OPS, slow, identity=f"other_{uuid.uuid4()}")
            await other._whoami()
            lease = await kube.get(COORDINATION_LEASE, OPS, LEASE_NAME)
            assert other.authenticated is not None
            lease["metadata"]["annotations"] = {HOLDER_USERNAME: other.authenticated[0]}
            lease["spec"]["holderIdentity"] = other.identity
            await kube.replace(COORDINATION_LEASE, OPS, LEASE_NAME, lease)
            assert first.leading()
            # The API server's fence reads the Lease from its own cache: until it has seen the new holder, a
            # write is still admitted. Probe with the value already there, so an admitted probe changes nothing.
            refused = await _first_refusal(lambda: _status_patch(api, namespace, "Available"))
            assert refused.by_server and other.identity in refused.by_server
            stepped = await _eventually(lambda: _false(first.leading()), timeout=5)
            assert stepped < scaled(2, at_most=20), stepped  # not at the 40 s renew deadline
            with pytest.raises(NotLeader) as own:  # refused by its own fence now, never sent
                await _status_patch(api, namespace, "Offline")
            assert own.value.by_server is None
    assert (await kube.get(EXPORTER, namespace, "board"))["status"]["exporterStatus"] == "Available"


async def _first_refusal(write: Callable[[], Awaitable[Any]], timeout: float = 10.0) -> NotLeader:
    """Repeat `write` until the API server refuses it (its fence sees a new Lease holder asynchronously)."""
    async with asyncio.timeout(scaled(timeout)):
        while (err := await _refused(write)) is None:
            await asyncio.sleep(0.05)
    return err


async def _false(value: bool) -> bool:
    return not value


async def test_no_lease_or_no_fence_refuses_nothing(
    kube: Gateway, controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    """`lessor run --no-leader-elect` writes no Lease: with the fence installed nothing is refused; and
    `lessor install --no-leader-elect` removes the fence, so that a Lease left by an elected deployment
    does not refuse a lone replica either."""
    await _exporter(kube, namespace)
    async with _replicas(kube, controlplane, tmp_path, 1) as (lone,):
        api = GatewayApi(lone)
        await _status_patch(api, namespace, "Available")  # no Lease: allowed
        # A Lease left behind, held by someone else: the fence refuses...
        await kube.create(COORDINATION_LEASE, OPS, {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": LEASE_NAME},
            "spec": {"holderIdentity": "gone_0", "leaseDurationSeconds": 15}})
        await _eventually(lambda: _refused_now(api, namespace))
        # ... until the fence is removed, as `lessor install --no-leader-elect` does.
        lines: list[str] = []
        try:
            await install(kube, OPS, progress=lines.append, leader_fence=False)
            assert f"removed the leader fence {FENCE_POLICY}" in lines
            await _eventually(lambda: _false_async(_refused_now(api, namespace)))
            await _status_patch(api, namespace, "Offline")
        finally:
            await install(kube, OPS, progress=lambda _: None)  # as the session's other tests expect it
    assert (await kube.get(EXPORTER, namespace, "board"))["status"]["exporterStatus"] == "Offline"


async def _refused_now(api: GatewayApi, namespace: str) -> bool:
    return await _refused(lambda: _status_patch(api, namespace, "Available")) is not None


async def _false_async(value: Awaitable[bool]) -> bool:
    return not await value


def test_the_fence_follows_the_operator_namespace() -> None:
    policy, binding = leader_fence_documents("ops")
    [condition] = policy["spec"]["matchConditions"]
    assert "system:serviceaccount:ops:lessor-" in condition["expression"]
    assert "lessor-system" not in condition["expression"]
    assert binding["spec"]["paramRef"] == {"name": LEASE_NAME, "namespace": "ops", "parameterNotFoundAction": "Allow"}
    assert binding["spec"]["policyName"] == policy["metadata"]["name"] == FENCE_POLICY
