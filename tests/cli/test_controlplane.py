"""The local control plane is a real one: version, RBAC, in-cluster auth, garbage collection, clean exits."""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
from kubernetes_asyncio.config import incluster_config

from lessor.tools.controlplane import ControlPlane
from lessor.tools.controlplane.processes import free_port
from lessor.tools.controlplane.versions import KUBERNETES_VERSION
from lessor.gateway import ApiError, Gateway
from lessor.gateway.client import load_configuration
from lessor.gateway.resources import CONFIGMAP, EXPORTER, Resource
from tests.slowness import scaled

SERVICE_ACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts")
ROLE = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles")
ROLE_BINDING = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings")


async def test_kubeconfig_is_written_once_the_server_is_ready(controlplane: ControlPlane, kube: Gateway) -> None:
    assert controlplane.kubeconfig.is_file()
    assert oct(controlplane.kubeconfig.stat().st_mode & 0o777) == "0o600"
    version = await kube.request("get", "version", "GET", "/version")
    assert version["gitVersion"] == f"v{KUBERNETES_VERSION}"


async def _token(kube: Gateway, namespace: str, account: str) -> str:
    await kube.create(SERVICE_ACCOUNT, namespace, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                   "metadata": {"name": account}})
    review = await kube.request("create", "TokenRequest", "POST",
                                SERVICE_ACCOUNT.path(namespace, account, "token"),
                                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                      "spec": {"expirationSeconds": 3600}})
    return str(review["status"]["token"])


async def test_in_cluster_config_uses_the_service_account_and_rereads_a_rotated_token(
    controlplane: ControlPlane, kube: Gateway, namespace: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """RBAC is enforced, and the gateway picks up a rotated token file without a restart."""
    await kube.create(ROLE, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "read-exporters"},
        "rules": [{"apiGroups": ["lessor.dev"], "resources": ["exporters"], "verbs": ["get", "list", "watch"]}],
    })
    await kube.create(ROLE_BINDING, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "reader"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "read-exporters"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": namespace}],
    })
    nobody, reader = await _token(kube, namespace, "nobody"), await _token(kube, namespace, "reader")
    (tmp_path / "ca.crt").write_bytes((controlplane.pki / "ca.crt").read_bytes())
    (tmp_path / "token").write_text(nobody)
    host, port = controlplane.server.removeprefix("https://").split(":")
    monkeypatch.setenv("KUBERNETES_SERVICE_HOST", host)
    monkeypatch.setenv("KUBERNETES_SERVICE_PORT", port)
    monkeypatch.setattr(incluster_config, "TOKEN_REFRESH_PERIOD", dt.timedelta(0))  # rotate "now"
    async with Gateway(await load_configuration(None, service_account_dir=tmp_path)) as pod:
        with pytest.raises(ApiError) as denied:
            await pod.list(EXPORTER, namespace)
        assert denied.value.status == 403
        assert f"system:serviceaccount:{namespace}:nobody" in denied.value.message
        (tmp_path / "token").write_text(reader)
        items, _ = await pod.list(EXPORTER, namespace)
        assert items == []
        with pytest.raises(ApiError) as still_denied:
            await pod.list(CONFIGMAP, namespace)
        assert still_denied.value.status == 403


async def test_controller_manager_collects_garbage(kube: Gateway, namespace: str) -> None:
    owner = await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "owner"}})
    await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "owned", "ownerReferences": [{"apiVersion": "v1", "kind": "ConfigMap", "name": "owner",
                                              "uid": owner["metadata"]["uid"]}]}})
    await kube.delete(CONFIGMAP, namespace, "owner")
    deadline = time.monotonic() + scaled(30)
    while time.monotonic() < deadline:
        try:
            await kube.get(CONFIGMAP, namespace, "owned")
        except ApiError as err:
            assert err.not_found
            return
        await asyncio.sleep(0.2)
    pytest.fail("the owned ConfigMap outlived its owner: garbage collection is not running")


def _children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def _alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.split(")")[-1].split()[0] != "Z"


def _start_controlplane(directory: Path) -> subprocess.Popen[bytes]:
    proc = subprocess.Popen([sys.executable, "-m", "lessor", "controlplane", "--dir", str(directory)],
                            cwd=directory.parent, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + scaled(60)
    while not (directory / "kubeconfig").exists():
        assert proc.poll() is None, proc.stderr.read().decode() if proc.stderr else ""
        assert time.monotonic() < deadline, f"no kubeconfig after {scaled(60):.0f} s"
        time.sleep(0.1)
    return proc


def _wait_gone(pids: list[int], timeout: float = 20) -> list[int]:
    deadline = time.monotonic() + scaled(timeout)
    while (alive := [p for p in pids if _alive(p)]) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive


@pytest.mark.apiserver
def test_ctrl_c_stops_every_component(tmp_path: Path, controlplane: ControlPlane) -> None:
    proc = _start_controlplane(tmp_path / f"cp-{uuid.uuid4().hex[:6]}")
    children = _children(proc.pid)
    assert len(children) >= 2, "expected etcd and kube-apiserver as children"
    proc.send_signal(signal.SIGINT)
    assert proc.wait(scaled(30)) == 0
    assert _wait_gone(children) == []


@pytest.mark.apiserver
def test_killed_parent_leaves_no_orphans(tmp_path: Path, controlplane: ControlPlane) -> None:
    proc = _start_controlplane(tmp_path / f"cp-{uuid.uuid4().hex[:6]}")
    children = _children(proc.pid)
    assert len(children) >= 2
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert _wait_gone(children) == [], "etcd or kube-apiserver survived their parent"


def test_free_ports_are_distinct_bindable_and_outside_the_range_of_outgoing_connections() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    ports = [free_port() for _ in range(40)]
    assert len(set(ports)) == len(ports)
    assert all(port < low for port in ports)
    with socket.socket() as s:
        s.bind(("127.0.0.1", ports[-1]))
