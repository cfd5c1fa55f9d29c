"""`lessor run --metrics-secure`: HTTPS, and /metrics only for a ServiceAccount token that the real API
server authenticates (TokenReview) and allows to get the non-resource URL /metrics (SubjectAccessReview,
through the ClusterRole of deploy/rbac.yaml)."""

from __future__ import annotations

import asyncio
import signal
import ssl
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from lessor.tools.controlplane import ControlPlane
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway
from tests.slowness import scaled

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def _get(url: str, token: str | None = None) -> tuple[int, str]:
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the development certificate is self-signed
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"} if token else {})
    try:
        with urllib.request.urlopen(request, timeout=scaled(5), context=context) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _token(kube: Gateway, namespace: str, account: str) -> str:
    await kube.request("create", "ServiceAccount", "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                       body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    got = await kube.request("create", "TokenRequest", "POST",
                             f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                             body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                   "spec": {"expirationSeconds": 600}})
    return str(got["status"]["token"])


async def _may_get_metrics(kube: Gateway, user: str) -> bool:
    got = await kube.request("create", "SubjectAccessReview", "POST",
                             "/apis/authorization.k8s.io/v1/subjectaccessreviews",
                             body={"apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
                                   "spec": {"user": user, "nonResourceAttributes": {"path": "/metrics", "verb": "get"}}})
    return bool(got["status"].get("allowed"))


async def test_secure_metrics_need_a_token_allowed_to_get_metrics(
    kube: Gateway, controlplane: ControlPlane, namespace: str, tmp_path: Path
) -> None:
    docs = list(yaml.safe_load_all((DEPLOY / "rbac.yaml").read_text()))
    reader = next(d for d in docs if d["metadata"]["name"] == "lessor-metrics-reader")
    roles = await kube.resolve("rbac.authorization.k8s.io/v1", "ClusterRole")
    bindings = await kube.resolve("rbac.authorization.k8s.io/v1", "ClusterRoleBinding")
    await kube.apply(roles, None, reader["metadata"]["name"], reader)
    binding = f"lessor-metrics-reader-{namespace}"
    await kube.apply(bindings, None, binding, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": {"name": binding},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "lessor-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]})
    scraper, nobody = await _token(kube, namespace, "prometheus"), await _token(kube, namespace, "nobody")
    deadline = time.monotonic() + scaled(10)
    while not await _may_get_metrics(kube, f"system:serviceaccount:{namespace}:prometheus"):
        assert time.monotonic() < deadline, "the binding never took effect"
        await asyncio.sleep(0.2)

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(controlplane.kubeconfig), "--no-webhook",
         "--no-leader-elect", "--bind-address", "127.0.0.1", "--health-port", str(free_port()),
         "--metrics-port", str(port), "--metrics-secure"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"https://127.0.0.1:{port}/metrics"
    try:
        deadline = time.monotonic() + scaled(30)
        while True:
            try:
                status, body = await asyncio.to_thread(_get, url, scraper)
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, "lessor run did not serve /metrics"
                await asyncio.sleep(0.2)
        assert status == 200 and "lessor_leader" in body, (status, body)
        assert (await asyncio.to_thread(_get, url))[0] == 401
        assert (await asyncio.to_thread(_get, url, "not-a-token"))[0] == 401
        status, body = await asyncio.to_thread(_get, url, nobody)
        assert status == 403 and "lessor-metrics-reader" in body, (status, body)
        with pytest.raises((urllib.error.URLError, OSError)):  # no plain HTTP any more
            await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{port}/metrics", None, 5)
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(30))
        await kube.request("delete", "ClusterRoleBinding", "DELETE",
                           f"/apis/rbac.authorization.k8s.io/v1/clusterrolebindings/{binding}")
    assert proc.returncode in (0, 143), out
