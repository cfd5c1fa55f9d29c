"""The API server's bad minutes, against the real API server: transient answers are retried in the gateway (the
wait a Retry-After asks for honoured, within a bound, the leader's fence asked before each send), a write made
while kube-apiserver is down lands once it is back, and an informer that lived through an outage is back in
seconds.

The scripted answers (429, 503, a connection that breaks after the request went out) come from a small proxy
in front of the shared control plane, which forwards everything else; the outages are real: a control plane of
this module's own whose kube-apiserver is SIGKILLed and started again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import ssl
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import yaml
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from lessor.gateway import ApiError, Gateway, Informer
from lessor.gateway.resources import CONFIGMAP, NAMESPACE, Resource
from lessor.gateway.retries import Outages, Retries
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from tests.gateway.test_gateway import Recorder, configmap, running
from tests.slowness import scaled

SERVICEACCOUNT = Resource("", "v1", "ServiceAccount", "serviceaccounts", True)
ROLE = Resource("rbac.authorization.k8s.io", "v1", "Role", "roles", True)
ROLEBINDING = Resource("rbac.authorization.k8s.io", "v1", "RoleBinding", "rolebindings", True)
STARTING = "storage is (re)initializing"
NOT_INSTALLED = "the request has been made before all known HTTP paths have been installed, please try again"


def status(code: int, message: str, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "message": message, "reason": reason,
            "code": code}


@dataclass
class Scripted:
    """An answer the proxy gives instead of forwarding (`drop`: forward, then break the connection unanswered)."""

    status: int = 0
    body: dict[str, Any] = field(default_factory=dict)
    retry_after: str | None = None
    drop: bool = False


@dataclass
class Proxy:
    """Plain HTTP in front of the real API server (as its admin): answers the writes with what `script` says
    while it lasts, forwards the rest, and records when each write arrived."""

    upstream: str
    tls: ssl.SSLContext
    url: str = ""
    script: list[Scripted] = field(default_factory=list)
    writes: list[tuple[float, str, str]] = field(default_factory=list)  # (monotonic time, method, path)
    on_write: Callable[[], None] = lambda: None
    http: aiohttp.ClientSession | None = None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        body = await request.read()
        if request.method != "GET":
            self.writes.append((time.monotonic(), request.method, request.path))
            self.on_write()
            if self.script:
                step = self.script.pop(0)
                if step.drop:
                    await self._forward(request, body)
                    assert request.transport is not None
                    request.transport.close()  # the write was carried out; its answer never arrives
                    return web.Response()
                headers = {"Retry-After": step.retry_after} if step.retry_after is not None else {}
                return web.json_response(step.body, status=step.status, headers=headers)
        return await self._forward(request, body)

    async def _forward(self, request: web.Request, body: bytes) -> web.Response:
        assert self.http is not None
        async with self.http.request(request.method, self.upstream + request.rel_url.raw_path_qs, data=body or None,
                                     headers={k: v for k, v in request.headers.items()
                                              if k in ("Content-Type", "Accept")}, ssl=self.tls) as resp:
            return web.Response(body=await resp.read(), status=resp.status,
                                content_type=resp.content_type)

    def sent(self, method: str = "POST") -> list[float]:
        return [at for at, m, _ in self.writes if m == method]


@contextlib.asynccontextmanager
async def proxied(controlplane: ControlPlane, retries: Retries | None = None) -> AsyncIterator[tuple[Proxy, Gateway]]:
    tls = ssl.create_default_context(cafile=str(controlplane.pki / "ca.crt"))
    tls.load_cert_chain(str(controlplane.pki / "admin.crt"), str(controlplane.pki / "admin.key"))
    proxy = Proxy(controlplane.server, tls)
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    proxy.url = f"http://127.0.0.1:{port}"
    cfg = Configuration()
    cfg.host = proxy.url
    try:
        async with aiohttp.ClientSession() as proxy.http, Gateway(cfg, retries=retries) as gateway:
            yield proxy, gateway
    finally:
        await runner.cleanup()


async def test_a_429_with_retry_after_is_waited_as_asked_and_the_write_then_lands(
        controlplane: ControlPlane, kube: Gateway, namespace: str) -> None:
    async with proxied(controlplane) as (proxy, gateway):
        proxy.script = [Scripted(429, status(429, STARTING, "TooManyRequests"), retry_after="1")] * 2
        created = await gateway.create(CONFIGMAP, namespace, configmap(namespace, "throttled", v="1"))

    assert created["metadata"]["name"] == "throttled"
    assert (await kube.get(CONFIGMAP, namespace, "throttled"))["data"] == {"v": "1"}
    sent = proxy.sent()
    assert len(sent) == 3, "two 429s, then the write"
    assert all(later - earlier >= 1.0 for earlier, later in zip(sent, sent[1:])), \
        f"each retry waited the Retry-After of 1 s: sent at {[round(t - sent[0], 2) for t in sent]}"
    assert gateway.retry_counts == {"429": 2}


async def test_the_attempts_bound_is_kept_and_the_caller_gets_what_the_api_server_answered(
        controlplane: ControlPlane, namespace: str) -> None:
    async with proxied(controlplane, Retries(attempts=4)) as (proxy, gateway):
        proxy.script = [Scripted(503, status(503, NOT_INSTALLED, "ServiceUnavailable"), retry_after="0")] * 10
        with pytest.raises(ApiError) as raised:
            await gateway.merge_patch(CONFIGMAP, namespace, "any", {"data": {"v": "1"}})

    assert (raised.value.status, raised.value.message) == (503, NOT_INSTALLED)
    assert raised.value.retried == ("503",) * 3
    assert len(proxy.sent("PATCH")) == 4


async def test_the_time_bound_is_kept_with_the_waits_asked_for(controlplane: ControlPlane, namespace: str) -> None:
    """Waits of at least 1 s each (Retry-After) within a bound of 3 s: no more than 3 retries, whatever the
    machine's speed, where the attempts would allow 100."""
    async with proxied(controlplane, Retries(attempts=100, total=3.0)) as (proxy, gateway):
        proxy.script = [Scripted(429, status(429, "throttled", "TooManyRequests"), retry_after="1")] * 100
        with pytest.raises(ApiError) as raised:
            await gateway.create(CONFIGMAP, namespace, configmap(namespace, "never"))

    assert raised.value.status == 429
    assert 2 <= len(proxy.sent()) <= 4


async def test_a_deposed_leader_does_not_retry_its_way_past_the_fence(
        controlplane: ControlPlane, kube: Gateway, namespace: str) -> None:
    closed = False

    def fence() -> None:
        if closed:
            raise PermissionError("not the leader any more")

    async with proxied(controlplane) as (proxy, gateway):
        proxy.script = [Scripted(503, status(503, NOT_INSTALLED, "ServiceUnavailable"), retry_after="5")] * 10

        def depose() -> None:
            nonlocal closed
            closed = True
            asyncio.get_running_loop().call_soon(gateway.drop_queued_writes)  # what the step-down does

        proxy.on_write = depose
        with pytest.raises(PermissionError):
            await gateway.create(CONFIGMAP, namespace, configmap(namespace, "fenced"), fence=fence)

    assert len(proxy.sent()) == 1, "sent while leader, never again after the term ended"
    with pytest.raises(ApiError) as missing:
        await kube.get(CONFIGMAP, namespace, "fenced")
    assert missing.value.not_found


async def test_a_create_whose_answer_was_lost_is_answered_as_created(
        controlplane: ControlPlane, kube: Gateway, namespace: str) -> None:
    async with proxied(controlplane) as (proxy, gateway):
        proxy.script = [Scripted(drop=True)]
        created = await gateway.create(CONFIGMAP, namespace, configmap(namespace, "landed", v="1"))

    assert (created["metadata"]["name"], created["data"]) == ("landed", {"v": "1"})
    assert len(proxy.sent()) == 2, "sent again after the lost answer, and found there"
    assert gateway.retry_counts == {"connection": 1}


async def test_a_create_whose_answer_was_lost_and_whose_name_another_object_took_is_already_exists(
        controlplane: ControlPlane, kube: Gateway, namespace: str) -> None:
    await kube.create(CONFIGMAP, namespace, configmap(namespace, "taken", v="theirs"))
    async with proxied(controlplane) as (proxy, gateway):
        proxy.script = [Scripted(drop=True)]
        with pytest.raises(ApiError) as raised:
            await gateway.create(CONFIGMAP, namespace, configmap(namespace, "taken", v="ours"))

    assert raised.value.already_exists and raised.value.answer_lost
    assert (await kube.get(CONFIGMAP, namespace, "taken"))["data"] == {"v": "theirs"}


# --- real outages: a control plane of this module's own, its kube-apiserver killed and started again -------


@pytest.fixture(scope="module")
async def own_controlplane(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ControlPlane]:
    async with ControlPlane(tmp_path_factory.mktemp("outage"), ensure_binaries(),
                            controller_manager=False) as cp:
        yield cp


@pytest.fixture
async def own_namespace(own_controlplane: ControlPlane) -> AsyncIterator[tuple[Path, str]]:
    async with await Gateway.connect(str(own_controlplane.kubeconfig)) as gateway:
        name = f"outage-{free_port()}"
        await gateway.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        yield own_controlplane.kubeconfig, name


async def _until(check: Callable[[], bool]) -> None:
    async with asyncio.timeout(scaled(30)):
        while not check():
            await asyncio.sleep(0.05)


@pytest.mark.apiserver
async def test_a_write_made_while_kube_apiserver_is_down_lands_once_it_is_back(
        own_controlplane: ControlPlane, own_namespace: tuple[Path, str], caplog: pytest.LogCaptureFixture) -> None:
    kubeconfig, namespace = own_namespace
    caplog.set_level(logging.INFO)
    async with await Gateway.connect(str(kubeconfig)) as gateway:
        await own_controlplane.kill_apiserver()
        try:
            write = asyncio.create_task(gateway.create(CONFIGMAP, namespace, configmap(namespace, "patient", v="1")))
            await _until(lambda: gateway.retry_counts["connection"] >= 2 or write.done())
            assert not write.done(), write.exception()
        finally:
            await own_controlplane.start_apiserver()
        created = await asyncio.wait_for(write, scaled(30))
        assert created["metadata"]["name"] == "patient"
        assert (await gateway.get(CONFIGMAP, namespace, "patient"))["data"] == {"v": "1"}
    assert gateway.retry_counts["connection"] >= 2
    said = [r.getMessage() for r in caplog.records if "API server unavailable (connection" in r.getMessage()]
    assert len(said) == 1, f"one line for the outage, however many retries: {said}"
    assert not [r for r in caplog.records if r.exc_info], "no traceback for an outage"


def test_the_log_says_each_outage_once_per_kind_with_its_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    outages = Outages(settle=2.0, clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="lessor.gateway")
    for _ in range(50):
        outages.retried("connection", "Cannot connect to host")
        now[0] += 0.1
    for _ in range(3):
        outages.retried("503", "503 ServiceUnavailable: please try again")
    outages.answered()  # within the settle time: the outage goes on
    assert [r.getMessage() for r in caplog.records] == [
        "API server unavailable (connection: Cannot connect to host); retrying requests",
        "API server unavailable (503: 503 ServiceUnavailable: please try again); retrying requests"]
    now[0] += 2.0
    outages.answered()
    outages.answered()
    assert [r.getMessage() for r in caplog.records[2:]] == [
        "API server answering again after 4.9s unavailable (connection: Cannot connect to host): 50 requests retried",
        "API server answering again after 0.0s unavailable (503: 503 ServiceUnavailable: please try again): "
        "3 requests retried"]
    assert outages.open == {}


@pytest.mark.apiserver
async def test_an_informer_that_lived_through_an_outage_sees_a_change_made_right_after_the_server_is_back(
        own_controlplane: ControlPlane, own_namespace: tuple[Path, str]) -> None:
    """An informer whose base wait is long (`retry_delay` 30 s: before, its waits doubled from there up to
    30 s, and 13.5 s and 29.8 s were seen after a restart) waits no longer than the short ceiling while the
    API server is down, and lists again as soon as it answers: the change made as it is ready arrives in
    seconds. Twice: the first outage's failures do not lengthen the second's waits."""
    kubeconfig, namespace = own_namespace
    rec = Recorder()
    async with await Gateway.connect(str(kubeconfig)) as gateway:
        informer = Informer(gateway, CONFIGMAP, rec, namespace=namespace, retry_delay=30.0)
        async with running(informer):
            for outage in ("first", "second"):
                await own_controlplane.kill_apiserver()
                try:
                    await asyncio.sleep(3)
                finally:
                    await own_controlplane.start_apiserver()
                await gateway.create(CONFIGMAP, namespace, configmap(namespace, outage, v="1"))
                await rec.wait_for(lambda events, name=outage: rec.of(name), timeout=5)
        assert rec.of("first") == rec.of("second") == [("ADDED", "1")]


@pytest.fixture(scope="module")
async def throttling_controlplane(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[ControlPlane]:
    """An API server that serves one read and one write at a time and answers the rest 429 with Retry-After."""
    async with ControlPlane(tmp_path_factory.mktemp("throttling"), ensure_binaries(), controller_manager=False,
                            apiserver_args=("--max-requests-inflight=1",
                                            "--max-mutating-requests-inflight=1")) as cp:
        yield cp


async def _account_kubeconfig(admin: Gateway, cp: ControlPlane, namespace: str, folder: Path) -> Path:
    """A kubeconfig of a ServiceAccount that may write ConfigMaps in `namespace`: not in system:masters, whose
    requests the API server never throttles."""
    await admin.create(SERVICEACCOUNT, namespace, {"apiVersion": "v1", "kind": "ServiceAccount",
                                                   "metadata": {"name": "writer"}})
    await admin.create(ROLE, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role", "metadata": {"name": "writer"},
        "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["*"]}]})
    await admin.create(ROLEBINDING, namespace, {
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding", "metadata": {"name": "writer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "writer"},
        "subjects": [{"kind": "ServiceAccount", "name": "writer", "namespace": namespace}]})
    token = await admin.request("create", "TokenRequest", "POST",
                                f"/api/v1/namespaces/{namespace}/serviceaccounts/writer/token",
                                body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                      "spec": {"expirationSeconds": 3600}})
    path = folder / "writer.kubeconfig"
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "writer",
        "clusters": [{"name": "c", "cluster": {"server": cp.server, "certificate-authority": str(cp.pki / "ca.crt")}}],
        "users": [{"name": "writer", "user": {"token": token["status"]["token"]}}],
        "contexts": [{"name": "writer", "context": {"cluster": "c", "user": "writer"}}]}))
    return path


@pytest.mark.apiserver
async def test_under_real_429s_every_write_lands(throttling_controlplane: ControlPlane, tmp_path: Path) -> None:
    """Writes and reads at once, many more than the API server serves together: it answers 429 (really:
    `retry_counts` says so), and each write is sent again after the wait asked for until it lands."""
    namespace = f"throttled-{free_port()}"
    async with await Gateway.connect(str(throttling_controlplane.kubeconfig)) as admin:
        await admin.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
        kubeconfig = await _account_kubeconfig(admin, throttling_controlplane, namespace, tmp_path)
        async with await Gateway.connect(str(kubeconfig)) as gateway:
            writes = [gateway.create(CONFIGMAP, namespace, configmap(namespace, f"w{i}", v=str(i))) for i in range(30)]
            reads = [gateway.list(CONFIGMAP, namespace) for _ in range(30)]
            await asyncio.wait_for(asyncio.gather(*writes, *reads), scaled(120))
        assert gateway.retry_counts["429"] > 0, "the API server throttled nothing: the test provoked no 429"
        stored, _ = await admin.list(CONFIGMAP, namespace)
    assert {cm["metadata"]["name"]: cm["data"]["v"] for cm in stored if cm["metadata"]["name"].startswith("w")} \
        == {f"w{i}": str(i) for i in range(30)}
