"""Jumpstarter's own tools against `lessor run --grpc-port`, on the real API server (docs/jumpstarter-grpc.md).

The client library, `jmp` and `jmp run` are the 0.9.0 packages from PyPI (the test extra). The operator runs in
this process with its own control plane, so that no other test's operator leases the same objects.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime as dt
import functools
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from jumpstarter.config.client import ClientConfigV1Alpha1
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc, router_pb2, router_pb2_grpc
from prometheus_client import CollectorRegistry

from lessor.tls.certs import CertificateAuthority
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY
from lessor.app.install import install
from lessor.jumpstarter.settings import GrpcSettings
from lessor.jumpstarter.tokens import Subject, mint, new_key_pem, load_key
from lessor.app.operator import Operator, OperatorConfig
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from tests.polling import until
from tests.slowness import scaled
from tests.tasks import cancelled

pytestmark = pytest.mark.apiserver

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
NS = "lab"
SECRET = Resource("", "v1", "Secret", "secrets")
LESSOR = Path(sys.executable).parent / "lessor"  # the installed command, not the source folder
JMP = Path(sys.executable).parent / "jmp"  # installed beside this Python by the test extra


@dataclass
class Lab:
    kube: Gateway
    kubeconfig: Path
    endpoint: str
    ca: Path
    folder: Path
    metrics_port: int = 0


@pytest.fixture(scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[Lab]:
    """Its own control plane, a namespace with a policy for team=qa, and an operator serving gRPC over TLS
    with a certificate for localhost from a cert dir (as in production)."""
    folder = tmp_path_factory.mktemp("grpc")
    ca = CertificateAuthority("test-ca")
    pair = ca.issue("lessor-grpc", hosts=("localhost",), server=True)
    (folder / "certs").mkdir()
    pair.write(folder / "certs", "tls")
    (folder / "ca.pem").write_bytes(ca.cert_pem)
    port = free_port()
    async with ControlPlane(folder / "cp", ensure_binaries(), controller_manager=False) as cp:
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=lambda _: None)
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "qa"},
                                   "spec": {"exporterSelector": {}, "policies": [
                                       {"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}]}]}})
            metrics_port = free_port()
            config = OperatorConfig(operator_namespace=OPS, bind_address="127.0.0.1", health_port=free_port(),
                                    metrics_port=metrics_port, exporter_heartbeat_timeout=15.0, leader_election=None,
                                    grpc=GrpcSettings(port=port, endpoint=f"localhost:{port}", cert_dir=folder / "certs"))
            async with await Gateway.connect(str(cp.kubeconfig), registry=CollectorRegistry()) as gateway:
                op = Operator(config, gateway, CollectorRegistry())
                task = asyncio.create_task(op.run())
                try:
                    while not op.ready()[0]:
                        assert not task.done(), task.exception()
                        await asyncio.sleep(0.05)
                    yield Lab(kube, cp.kubeconfig, f"localhost:{port}", folder / "ca.pem", folder, metrics_port)
                finally:
                    await cancelled(task)


async def a_client(lab: Lab, name: str, team: str = "qa") -> Mapping[str, Any]:
    await lab.kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client",
                                       "metadata": {"name": name, "labels": {"team": team}}})
    return await until(lab.kube, CLIENT, NS, name,
                       lambda o: (o.get("status") or {}).get("credential", {}).get("name") == f"{name}-client")


async def an_exporter(lab: Lab, name: str, labels: Mapping[str, str]) -> Mapping[str, Any]:
    await lab.kube.create(EXPORTER, NS, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": name, "labels": dict(labels)}})
    return await until(lab.kube, EXPORTER, NS, name,
                       lambda o: (o.get("status") or {}).get("credential", {}).get("name") == f"{name}-exporter")


async def credentials(lab: Lab, kind: str, name: str, *extra: str) -> Path:
    """`lessor credentials KIND NAME`, as a user runs it; the path of the config it wrote."""
    out = lab.folder / f"{kind}-{name}.yaml"
    done = await run(str(LESSOR), "credentials", kind, name, "-n", NS, "--kubeconfig", str(lab.kubeconfig),
                     "--ca-file", str(lab.ca), "-o", str(out), *extra)
    assert done.returncode == 0, done.stdout
    return out


@dataclass
class Done:
    returncode: int
    stdout: str


async def run(*args: str, timeout: float = 60, env: Mapping[str, str] | None = None) -> Done:
    """A command of the user's, without blocking this loop (the operator and its gRPC server run on it)."""
    # the venv's commands on PATH, as in an activated venv (`jmp shell -- j ...` runs `j` from PATH)
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
           **(env or {})}
    process = await asyncio.create_subprocess_exec(*args, stdout=asyncio.subprocess.PIPE,
                                                   stderr=asyncio.subprocess.STDOUT, env=env)
    try:
        out, _ = await asyncio.wait_for(process.communicate(), scaled(timeout))
    except TimeoutError:
        process.kill()
        out, _ = await process.communicate()
        return Done(-9, out.decode() + f"\n(killed after {scaled(timeout):.0f} s)")
    return Done(process.returncode or 0, out.decode())


def channel(lab: Lab) -> grpc.aio.Channel:
    return grpc.aio.secure_channel(lab.endpoint, grpc.ssl_channel_credentials(lab.ca.read_bytes()))


def metadata(kind: str, name: str, token: str) -> tuple[tuple[str, str], ...]:
    return (("authorization", f"Bearer {token}"), ("jumpstarter-kind", kind), ("jumpstarter-namespace", NS),
            ("jumpstarter-name", name))


async def eventually(read: Callable[[], Awaitable[Any]], check: Callable[[Any], bool], what: str,
                     timeout: float = 10) -> Any:
    """What `read` answers once `check` holds: lessor answers lists from its informers' caches, which follow
    the API server a moment later than the test's own reads."""
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while True:
        value = await read()
        if check(value):
            return value
        assert asyncio.get_running_loop().time() < deadline, f"{what}: {value}"
        await asyncio.sleep(0.1)


def token_of(config: Path) -> str:
    return str(yaml.safe_load(config.read_text())["token"])


def ready(obj: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


def online(obj: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Online" and c.get("status") == "True"
               for c in (obj.get("status") or {}).get("conditions") or ())


async def test_every_client_and_exporter_gets_a_token_secret_and_a_config_jmp_loads(lab: Lab) -> None:
    client = await a_client(lab, "alice")
    assert client["status"]["endpoint"] == lab.endpoint
    secret = await lab.kube.get(SECRET, NS, "alice-client")
    assert secret is not None
    token = base64.b64decode(secret["data"]["token"]).decode()
    config = ClientConfigV1Alpha1.from_file(await credentials(lab, "client", "alice"))
    assert (config.metadata.namespace, config.metadata.name, config.endpoint, config.token) == \
        (NS, "alice", lab.endpoint, token)
    assert base64.b64decode(config.tls.ca) == lab.ca.read_bytes()
    header, claims, _ = token.split(".")
    decoded = yaml.safe_load(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    assert decoded["sub"] == f"client:{NS}:alice:{client['metadata']['uid']}"
    assert yaml.safe_load(base64.urlsafe_b64decode(header + "=" * (-len(header) % 4)))["alg"] == "ES256"


async def test_a_secret_of_the_credentials_name_that_lessor_did_not_make_is_left_alone(
        lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    mine = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "mallory-client"},
            "data": {"token": base64.b64encode(b"the user's own").decode()}}
    await lab.kube.create(SECRET, NS, mine)
    await lab.kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {"name": "mallory"}})
    deadline = asyncio.get_running_loop().time() + scaled(10)
    while "Secret lab/mallory-client exists and is not lessor's" not in caplog.text:  # the actor's decision
        assert asyncio.get_running_loop().time() < deadline, caplog.text
        await asyncio.sleep(0.1)
    client = await lab.kube.get(CLIENT, NS, "mallory")
    assert "credential" not in (client.get("status") or {})
    secret = await lab.kube.get(SECRET, NS, "mallory-client")
    assert secret is not None and secret["data"] == mine["data"] and not secret["metadata"].get("ownerReferences")


async def test_credentials_for_an_object_without_one_says_why(lab: Lab) -> None:
    done = await run(str(LESSOR), "credentials", "client", "nobody", "-n", NS, "--kubeconfig", str(lab.kubeconfig))
    assert done.returncode == 1
    assert "Client lab/nobody does not exist" in done.stdout and "Traceback" not in done.stdout


@contextlib.asynccontextmanager
async def real_exporter(lab: Lab, name: str, labels: Mapping[str, str]) -> AsyncIterator[Path]:
    """`jmp run` for a new Exporter with the mock power driver, while the context is open; its log's path."""
    await an_exporter(lab, name, labels)
    path = await credentials(lab, "exporter", name)
    config = yaml.safe_load(path.read_text())
    config["export"] = {"power": {"type": "jumpstarter_driver_power.driver.MockPower"}}
    path.write_text(yaml.safe_dump(config))
    log_path = lab.folder / f"{name}.log"
    log = log_path.open("wb")  # the agent's output, read back when a step fails
    agent = subprocess.Popen([str(JMP), "run", "--exporter-config", str(path)],
                             stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield log_path
    finally:
        os.killpg(agent.pid, signal.SIGTERM)
        try:
            agent.wait(timeout=scaled(20))
        except subprocess.TimeoutExpired:
            os.killpg(agent.pid, signal.SIGKILL)
            agent.wait()
        log.close()


async def client_config(lab: Lab, name: str) -> Path:
    """`lessor credentials client NAME`, with the drivers this user's client may load (as a user adds them)."""
    path = await credentials(lab, "client", name)
    config = yaml.safe_load(path.read_text())
    config["drivers"] = {"allow": ["jumpstarter_driver_power.*", "jumpstarter_driver_composite.*"]}
    path.write_text(yaml.safe_dump(config))
    return path


async def test_a_real_exporter_registers_and_becomes_online_and_jmp_leases_it(lab: Lab) -> None:
    async with real_exporter(lab, "board-1", {"board": "rpi4"}):
        # Register (devices), then ReportStatus (Available), then the streams' heartbeats
        exporter = await until(lab.kube, EXPORTER, NS, "board-1", lambda o: online(o) and (o.get("status") or {}).get(
            "devices") and o["status"].get("exporterStatus") == "Available", timeout=60)
        registered = [c for c in exporter["status"]["conditions"] if c["type"] == "Registered"]
        assert registered and registered[0]["status"] == "True"

        await a_client(lab, "bob")
        client_path = await client_config(lab, "bob")
        client = ClientConfigV1Alpha1.from_file(client_path)
        await eventually(lambda: client.list_exporters(include_online=True),
                         lambda got: [(e.name, e.online) for e in got.exporters] == [("board-1", True)],
                         "ListExporters shows board-1 online")

        # jmp itself, as a user types it
        jmp = [str(JMP)]
        made = await run(*jmp, "create", "lease", "--client-config", str(client_path), "-l", "board=rpi4",
                         "--duration", "1h", "-o", "name")
        assert made.returncode == 0, made.stdout
        name = made.stdout.strip().split("/")[-1]
        lease = await until(lab.kube, LEASE, NS, name, ready)
        assert lease["spec"]["clientRef"] == {"name": "bob"}
        assert lease["spec"]["selector"] == {"matchLabels": {"board": "rpi4"}}
        assert lease["spec"]["duration"] == "1h"
        assert lease["status"]["exporterRef"] == {"name": "board-1"}
        await eventually(client.list_leases, lambda got: [(item.name, item.exporter, item.get_status())
                                                          for item in got.leases] == [(name, "board-1", "In-Use")],
                         "ListLeases shows the lease in use on board-1")

        # through lessor's router to the exporter's mock power driver, and back
        shell = await run(*jmp, "shell", "--client-config", str(client_path), "--lease", name, "--",
                          "j", "power", "on")
        assert shell.returncode == 0, shell.stdout + "\n--- exporter:\n" + (lab.folder / "board-1.log").read_text()
        assert "power on" in (lab.folder / "board-1.log").read_text()  # the mock driver itself was called

        deleted = await run(*jmp, "delete", "lease", "--client-config", str(client_path), name)
        assert deleted.returncode == 0, deleted.stdout
        await eventually(client.list_leases, lambda got: got.leases == [], "the deleted lease leaves ListLeases")
        await until(lab.kube, EXPORTER, NS, "board-1", lambda o: not (o.get("status") or {}).get("leaseRef"))


async def test_a_lease_made_over_grpc_carries_tags_and_waits_with_a_pending_reason(lab: Lab) -> None:
    await a_client(lab, "carol")
    await an_exporter(lab, "board-2", {"board": "imx8"})  # never connected: offline
    client = ClientConfigV1Alpha1.from_file(await credentials(lab, "client", "carol"))
    lease = await client.create_lease(duration=timedelta(minutes=30), selector="board=imx8", tags={"ci": "run-7"})
    obj = await until(lab.kube, LEASE, NS, lease.name,
                      lambda o: any(c["type"] == "Pending" for c in (o.get("status") or {}).get("conditions") or ()))
    assert obj["spec"]["tags"] == {"ci": "run-7"} and obj["spec"]["duration"] == "30m"
    listed = (await eventually(lambda: client.list_leases(tag_filter="ci=run-7"), lambda got: [
        item.name for item in got.leases] == [lease.name] and any(c.type == "Pending" for c in got.leases[0].conditions),
        "ListLeases by tag shows the pending lease")).leases
    pending = [c for c in listed[0].conditions if c.type == "Pending"]
    assert pending and pending[0].status == "True" and pending[0].reason == "Offline"
    async with channel(lab) as ch:  # nothing to connect to yet: the tools retry on "not ready"
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await jumpstarter_pb2_grpc.ControllerServiceStub(ch).Dial(
                jumpstarter_pb2.DialRequest(lease_name=lease.name), metadata=metadata("Client", "carol", client.token or ""))
        assert caught.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "is not ready: Offline" in (caught.value.details() or "")
    await client.delete_lease(lease.name)


async def test_refusals_are_status_codes_with_messages(lab: Lab) -> None:
    dave = token_of(await credentials(lab, "client", (await a_client(lab, "dave"))["metadata"]["name"]))
    erin = token_of(await credentials(lab, "client", (await a_client(lab, "erin"))["metadata"]["name"]))
    await an_exporter(lab, "board-3", {"board": "x86"})
    board = token_of(await credentials(lab, "exporter", "board-3"))
    async with channel(lab) as ch:
        clients = client_pb2_grpc.ClientServiceStub(ch)
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        parent = f"namespaces/{NS}"

        async def refused(call: Any, request: Any, md: Any) -> tuple[grpc.StatusCode, str]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(request, metadata=md)
            return caught.value.code(), caught.value.details() or ""

        # a token signed by another key, for the right subject
        uid = (await lab.kube.get(CLIENT, NS, "dave"))["metadata"]["uid"]
        forged = mint(load_key(new_key_pem()), Subject("client", NS, "dave", uid))
        code, details = await refused(clients.ListLeases, client_pb2.ListLeasesRequest(parent=parent),
                                      metadata("Client", "dave", forged))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "signature" in details
        code, details = await refused(clients.ListLeases, client_pb2.ListLeasesRequest(parent=parent),
                                      metadata("Client", "dave", "not-a-token"))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "not a JWT" in details
        code, details = await refused(clients.ListLeases, client_pb2.ListLeasesRequest(parent=parent),
                                      (("jumpstarter-kind", "Client"),))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "bearer" in details
        # a valid token that claims to be someone else
        code, details = await refused(clients.ListLeases, client_pb2.ListLeasesRequest(parent=parent),
                                      metadata("Client", "erin", dave))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "Client lab/dave" in details

        # a valid token for another client's lease
        lease = client_pb2.Lease(selector="board=x86")
        lease.duration.FromTimedelta(timedelta(minutes=5))
        made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=parent, lease=lease),
                                         metadata=metadata("Client", "dave", dave))
        for call, request in ((clients.GetLease, client_pb2.GetLeaseRequest(name=made.name)),
                              (clients.DeleteLease, client_pb2.DeleteLeaseRequest(name=made.name))):
            code, details = await refused(call, request, metadata("Client", "erin", erin))
            assert code == grpc.StatusCode.PERMISSION_DENIED and "belongs to client dave" in details
        obj = await lab.kube.get(LEASE, NS, made.name.split("/")[-1])
        assert obj is not None and not obj["spec"].get("release")
        # another namespace
        code, details = await refused(clients.CreateLease, client_pb2.CreateLeaseRequest(parent="namespaces/other",
                                                                                          lease=lease),
                                      metadata("Client", "dave", dave))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "namespace other" in details

        # an exporter cannot lease, and a client cannot act as an exporter
        code, details = await refused(clients.CreateLease, client_pb2.CreateLeaseRequest(parent=parent, lease=lease),
                                      metadata("Exporter", "board-3", board))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "exporter's token cannot lease" in details
        code, details = await refused(controller.Register, jumpstarter_pb2.RegisterRequest(),
                                      metadata("Client", "dave", dave))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "cannot act as an exporter" in details

        # bad input is INVALID_ARGUMENT naming the field
        bad = client_pb2.Lease(selector="board in ()")
        code, details = await refused(clients.CreateLease, client_pb2.CreateLeaseRequest(parent=parent, lease=bad),
                                      metadata("Client", "dave", dave))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "lease.selector" in details

        # a deleted and re-created client's old token no longer works
        await lab.kube.delete(CLIENT, NS, "erin")
        await a_client(lab, "erin")
        code, details = await refused(clients.ListLeases, client_pb2.ListLeasesRequest(parent=parent),
                                      metadata("Client", "erin", erin))
        assert code == grpc.StatusCode.UNAUTHENTICATED and "no longer exists" in details


async def test_over_grpc_a_waiting_lease_of_higher_priority_goes_first_and_the_agent_hears_who_holds_it(lab: Lab) -> None:
    """The controller lessor replaces serves waiting leases in arrival order (a TODO in its lease controller);
    lessor serves them by priority, over gRPC too. The exporter here is the protocol's own stubs, as an agent."""
    await lab.kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "ops"},
                                       "spec": {"exporterSelector": {"matchLabels": {"board": "prio"}}, "policies": [
                                           {"priority": 30, "from": [{"clientSelector": {"matchLabels": {"team": "ops"}}}]}]}})
    await an_exporter(lab, "board-p", {"board": "prio"})
    agent_token = token_of(await credentials(lab, "exporter", "board-p"))
    tokens = {}
    for name, team in (("frank", "qa"), ("gina", "qa"), ("hank", "ops")):
        await a_client(lab, name, team)
        tokens[name] = token_of(await credentials(lab, "client", name))
    heard: list[Any] = []
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        clients = client_pb2_grpc.ClientServiceStub(ch)
        agent = metadata("Exporter", "board-p", agent_token)
        register = jumpstarter_pb2.RegisterRequest(labels={"board": "prio"})
        register.reports.add(uuid="d-1", labels={"jumpstarter.dev/name": "power"})
        assert (await controller.Register(register, metadata=agent)).uuid
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE"), message="ready"), metadata=agent)

        async def listen() -> None:
            async for response in controller.Status(jumpstarter_pb2.StatusRequest(), metadata=agent):
                heard.append(response)

        listening = asyncio.create_task(listen())
        try:
            await until(lab.kube, EXPORTER, NS, "board-p", online)

            async def lease_for(client: str) -> str:
                lease = client_pb2.Lease(selector="board=prio")
                lease.duration.FromTimedelta(timedelta(minutes=10))
                made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease),
                                                 metadata=metadata("Client", client, tokens[client]))
                return str(made.name)

            first = await lease_for("frank")
            await until(lab.kube, LEASE, NS, first.split("/")[-1], ready)
            low = await lease_for("gina")  # waits first, at priority 10
            await asyncio.sleep(0.5)
            high = await lease_for("hank")  # waits later, at priority 30
            for name in (low, high):
                await until(lab.kube, LEASE, NS, name.split("/")[-1], lambda o: any(
                    c["type"] == "Pending" and c["reason"] == "NotAvailable"
                    for c in (o.get("status") or {}).get("conditions") or ()))
            await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=first),
                                      metadata=metadata("Client", "frank", tokens["frank"]))
            granted = await until(lab.kube, LEASE, NS, high.split("/")[-1], ready)
            assert granted["status"]["exporterRef"] == {"name": "board-p"}
            waiting = await clients.GetLease(client_pb2.GetLeaseRequest(name=low),
                                             metadata=metadata("Client", "gina", tokens["gina"]))
            assert waiting.exporter == "" and any(c.type == "Pending" and c.reason == "NotAvailable"
                                                  for c in waiting.conditions)
            deadline = asyncio.get_running_loop().time() + scaled(10)
            while not any(r.leased and r.client_name == "hank" for r in heard):
                assert asyncio.get_running_loop().time() < deadline, heard
                await asyncio.sleep(0.1)
            holders = [r.client_name for r in heard if r.leased]
            assert holders[0] == "frank" and holders[-1] == "hank"
            exporter = await lab.kube.get(EXPORTER, NS, "board-p")
            assert exporter["status"]["devices"] == [{"uuid": "d-1", "labels": {"jumpstarter.dev/name": "power"}}]
            assert (exporter["status"]["exporterStatus"], exporter["status"]["statusMessage"]) == ("Available", "ready")
        finally:
            listening.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await listening


async def test_an_exporter_releases_the_lease_it_holds_and_no_other(lab: Lab) -> None:
    """After its afterLease hook, an agent ends its lease with ReleaseLease; it cannot end a lease it does not hold."""
    await an_exporter(lab, "board-r", {"board": "rel"})
    await an_exporter(lab, "board-s", {"board": "other"})
    mine = token_of(await credentials(lab, "exporter", "board-r"))
    other = token_of(await credentials(lab, "exporter", "board-s"))
    await a_client(lab, "ivan")
    ivan = ClientConfigV1Alpha1.from_file(await credentials(lab, "client", "ivan"))
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")),
            metadata=metadata("Exporter", "board-r", mine))
        lease = await ivan.create_lease(duration=timedelta(minutes=5), selector="board=rel")
        await until(lab.kube, LEASE, NS, lease.name, ready)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await controller.ReleaseLease(jumpstarter_pb2.ReleaseLeaseRequest(name=lease.name),
                                          metadata=metadata("Exporter", "board-s", other))
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "is not held by exporter board-s" in (caught.value.details() or "")
        await controller.ReleaseLease(jumpstarter_pb2.ReleaseLeaseRequest(name=lease.name),
                                      metadata=metadata("Exporter", "board-r", mine))
        ended = await until(lab.kube, LEASE, NS, lease.name, lambda o: (o.get("status") or {}).get("ended"))
        assert [c["reason"] for c in ended["status"]["conditions"] if c["type"] == "Ready"] == ["Released"]


async def test_the_controllers_older_lease_calls_request_get_and_list_only_the_callers_own_leases(lab: Lab) -> None:
    """ControllerService's RequestLease, GetLease and ListLeases (older clients) make, read and list the same
    Lease objects as ClientService: the caller's own, and none for an exporter's token."""
    await an_exporter(lab, "board-o", {"board": "ctl"})
    agent = metadata("Exporter", "board-o", token_of(await credentials(lab, "exporter", "board-o")))
    tokens = {}
    for name in ("oli", "pat"):
        await a_client(lab, name)
        tokens[name] = metadata("Client", name, token_of(await credentials(lab, "client", name)))
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)

        def request(**labels: str) -> Any:
            wanted = jumpstarter_pb2.RequestLeaseRequest()
            wanted.duration.FromTimedelta(timedelta(minutes=5))
            for key, value in labels.items():
                wanted.selector.match_labels[key] = value
            return wanted

        olis = (await controller.RequestLease(request(board="ctl"), metadata=tokens["oli"])).name
        obj = await until(lab.kube, LEASE, NS, olis, ready)
        assert (obj["spec"]["clientRef"], obj["spec"]["selector"], obj["spec"]["duration"]) == \
            ({"name": "oli"}, {"matchLabels": {"board": "ctl"}}, "5m")
        assert obj["status"]["exporterRef"] == {"name": "board-o"}
        waiting = jumpstarter_pb2.RequestLeaseRequest()
        waiting.selector.match_expressions.add(key="board", operator="In", values=["ctl"])
        pats = (await controller.RequestLease(waiting, metadata=tokens["pat"])).name
        obj = await until(lab.kube, LEASE, NS, pats, lambda o: any(
            c["type"] == "Pending" for c in (o.get("status") or {}).get("conditions") or ()))
        assert obj["spec"]["selector"] == {"matchExpressions": [{"key": "board", "operator": "In", "values": ["ctl"]}]}

        got = await controller.GetLease(jumpstarter_pb2.GetLeaseRequest(name=olis), metadata=tokens["oli"])
        uid = (await lab.kube.get(EXPORTER, NS, "board-o"))["metadata"]["uid"]
        assert (dict(got.selector.match_labels), got.duration.ToTimedelta(), got.exporter_uuid) == \
            ({"board": "ctl"}, timedelta(minutes=5), uid)
        assert got.HasField("begin_time") and not got.HasField("end_time")
        assert [(c.type, c.status) for c in got.conditions if c.type == "Ready"] == [("Ready", "True")]
        for client, mine in (("oli", olis), ("pat", pats)):  # each sees its own, not the other's
            await eventually(lambda client=client: controller.ListLeases(jumpstarter_pb2.ListLeasesRequest(),
                                                                         metadata=tokens[client]),
                             lambda got, mine=mine: list(got.names) == [mine], f"ListLeases of {client}")

        async def refused(call: Any, message: Any, md: Any) -> tuple[grpc.StatusCode, str]:
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await call(message, metadata=md)
            return caught.value.code(), caught.value.details() or ""

        code, details = await refused(controller.GetLease, jumpstarter_pb2.GetLeaseRequest(name=olis), tokens["pat"])
        assert code == grpc.StatusCode.PERMISSION_DENIED and "belongs to client oli" in details
        code, details = await refused(controller.GetLease, jumpstarter_pb2.GetLeaseRequest(name="nothing"),
                                      tokens["pat"])
        assert code == grpc.StatusCode.NOT_FOUND and "lease lab/nothing does not exist" in details
        for call, message in ((controller.RequestLease, request(board="ctl")),
                              (controller.GetLease, jumpstarter_pb2.GetLeaseRequest(name=olis)),
                              (controller.ListLeases, jumpstarter_pb2.ListLeasesRequest())):
            code, details = await refused(call, message, agent)
            assert code == grpc.StatusCode.PERMISSION_DENIED and "exporter's token cannot lease" in details
        bad = jumpstarter_pb2.RequestLeaseRequest()
        bad.selector.match_expressions.add(key="board", operator="Near", values=["ctl"])
        code, details = await refused(controller.RequestLease, bad, tokens["oli"])
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "selector.matchExpressions" in details

        # a name in another namespace is refused, not read as the caller's own lease of that name
        code, details = await refused(controller.ReleaseLease,
                                      jumpstarter_pb2.ReleaseLeaseRequest(name=f"namespaces/elsewhere/leases/{olis}"),
                                      tokens["oli"])
        assert code == grpc.StatusCode.PERMISSION_DENIED and "namespace elsewhere" in details
        assert not ((await lab.kube.get(LEASE, NS, olis)).get("spec") or {}).get("release")

        # released, oli's lease leaves the active list and shows its end; pat's waiting lease is granted
        await controller.ReleaseLease(jumpstarter_pb2.ReleaseLeaseRequest(name=olis), metadata=tokens["oli"])
        await eventually(lambda: controller.ListLeases(jumpstarter_pb2.ListLeasesRequest(), metadata=tokens["oli"]),
                         lambda got: list(got.names) == [], "the released lease leaves ListLeases")
        await until(lab.kube, LEASE, NS, pats, ready)
        ended = await controller.GetLease(jumpstarter_pb2.GetLeaseRequest(name=f"namespaces/{NS}/leases/{olis}"),
                                          metadata=tokens["oli"])
        assert ended.HasField("end_time") and any(c.type == "Ready" and c.reason == "Released"
                                                  for c in ended.conditions)
        await controller.ReleaseLease(jumpstarter_pb2.ReleaseLeaseRequest(name=pats), metadata=tokens["pat"])


async def test_the_router_pairs_a_dial_with_the_exporters_listen_and_a_lease_that_ends_closes_them(lab: Lab) -> None:
    await an_exporter(lab, "board-t", {"board": "route"})
    agent = metadata("Exporter", "board-t", token_of(await credentials(lab, "exporter", "board-t")))
    await a_client(lab, "judy")
    await a_client(lab, "kim")
    judy = metadata("Client", "judy", token_of(await credentials(lab, "client", "judy")))
    kim = metadata("Client", "kim", token_of(await credentials(lab, "client", "kim")))
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        clients = client_pb2_grpc.ClientServiceStub(ch)
        router = router_pb2_grpc.RouterServiceStub(ch)
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)
        lease = client_pb2.Lease(selector="board=route")
        lease.duration.FromTimedelta(timedelta(minutes=5))
        made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease),
                                         metadata=judy)
        name = made.name.split("/")[-1]
        await until(lab.kube, LEASE, NS, name, ready)

        with pytest.raises(grpc.aio.AioRpcError) as caught:  # not judy's lease
            await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=kim)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # judy's lease's name, in another namespace
            await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=f"namespaces/elsewhere/leases/{name}"),
                                  metadata=judy)
        assert caught.value.code() == grpc.StatusCode.PERMISSION_DENIED
        with pytest.raises(grpc.aio.AioRpcError) as caught:  # the exporter does not listen yet: the tools retry
            await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=judy)
        assert caught.value.code() == grpc.StatusCode.UNAVAILABLE and "not listening" in (caught.value.details() or "")

        listen = controller.Listen(jumpstarter_pb2.ListenRequest(lease_name=name), metadata=agent)
        deadline = asyncio.get_running_loop().time() + scaled(10)
        while True:
            try:
                dialled = await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=judy)
                break
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.UNAVAILABLE and asyncio.get_running_loop().time() < deadline
                await asyncio.sleep(0.1)
        announced = await listen.read()
        assert announced.router_endpoint == dialled.router_endpoint == lab.endpoint
        assert announced.router_token != dialled.router_token  # one per side: a client cannot take both

        bearer = (("authorization", f"Bearer {dialled.router_token}"),)
        client_side = router.Stream(metadata=bearer)
        exporter_side = router.Stream(metadata=(("authorization", f"Bearer {announced.router_token}"),))
        await client_side.write(router_pb2.StreamRequest(payload=b"ping"))
        assert (await exporter_side.read()).payload == b"ping"
        for i in range(200):  # more than the router buffers: it waits for the reader, it drops nothing
            await exporter_side.write(router_pb2.StreamRequest(payload=f"pong {i}".encode()))
        assert [(await client_side.read()).payload for _ in range(200)] == [f"pong {i}".encode() for i in range(200)]

        for token in (dialled.router_token, announced.router_token):  # each token serves its side, once
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                third = router.Stream(metadata=(("authorization", f"Bearer {token}"),))
                await third.read()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED

        await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=made.name), metadata=judy)
        for side in (client_side, exporter_side):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await asyncio.wait_for(side.read(), scaled(10))
            assert caught.value.code() == grpc.StatusCode.ABORTED and "ended" in (caught.value.details() or "")
        assert await asyncio.wait_for(listen.read(), scaled(10)) == grpc.aio.EOF  # the exporter stops serving it


async def leases_of(lab: Lab, client: str) -> list[dict[str, Any]]:
    return [o for o in (await lab.kube.list(LEASE, NS))[0] if o["spec"]["clientRef"]["name"] == client]


def pending_on_a_busy_exporter(obj: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Pending" and c["status"] == "True" and c["reason"] == "NotAvailable"
               for c in (obj.get("status") or {}).get("conditions") or ())


async def test_two_real_clients_waiting_for_one_real_exporter_are_served_by_priority(lab: Lab) -> None:
    """The real tools end to end: `jmp run` is the only board=contest exporter; a qa client (priority 10) holds
    it with `jmp create lease`; another qa client, then an ops client (priority 30, its own policy) run
    `jmp shell -l board=contest -- j power on`, which waits for a lease. When the holder runs `jmp delete lease`,
    the ops client's shell gets the board first although it asked last (the controller lessor replaces serves by
    arrival), and the qa client's shell only once the ops client's shell has ended and released it."""
    await lab.kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy",
                                       "metadata": {"name": "contest-ops"},
                                       "spec": {"exporterSelector": {"matchLabels": {"board": "contest"}}, "policies": [
                                           {"priority": 30, "from": [{"clientSelector": {"matchLabels": {"team": "ops"}}}]}]}})
    configs = {}
    for name, team in (("nia", "qa"), ("lou", "qa"), ("max", "ops")):
        await a_client(lab, name, team)
        configs[name] = await client_config(lab, name)
    async with real_exporter(lab, "board-c", {"board": "contest"}) as exporter_log:
        await until(lab.kube, EXPORTER, NS, "board-c", lambda o: online(o) and (o.get("status") or {}).get(
            "exporterStatus") == "Available", timeout=60)
        held = await run(str(JMP), "create", "lease", "--client-config", str(configs["nia"]), "-l", "board=contest",
                         "--duration", "1h", "-o", "name")
        assert held.returncode == 0, held.stdout
        holder = held.stdout.strip().split("/")[-1]
        await until(lab.kube, LEASE, NS, holder, ready)

        shells: dict[str, asyncio.Task[Done]] = {}
        for name in ("lou", "max"):  # the low priority asks first
            shells[name] = asyncio.create_task(run(
                str(JMP), "shell", "--client-config", str(configs[name]), "-l", "board=contest", "--duration", "10m",
                "--", "j", "power", "on", timeout=180))
            await eventually(functools.partial(leases_of, lab, name),
                             lambda got: len(got) == 1 and pending_on_a_busy_exporter(got[0]),
                             f"{name}'s jmp shell waits for board-c", timeout=60)
        deleted = await run(str(JMP), "delete", "lease", "--client-config", str(configs["nia"]), holder)
        assert deleted.returncode == 0, deleted.stdout

        done = {name: await shell for name, shell in shells.items()}
        for name, shell in done.items():
            assert shell.returncode == 0, f"{name}: {shell.stdout}\n--- exporter:\n{exporter_log.read_text()}"
        highs, lows = await leases_of(lab, "max"), await leases_of(lab, "lou")
        assert len(highs) == len(lows) == 1, ("a shell had to ask again", [(o["metadata"]["name"], o["status"])
                                              for o in highs + lows], done["max"].stdout, done["lou"].stdout)
        (high,), (low,) = highs, lows
        for lease in (high, low):
            assert lease["status"]["exporterRef"] == {"name": "board-c"}, lease["status"]
            assert [c["reason"] for c in lease["status"]["conditions"] if c["type"] == "Ready"] == ["Released"]
        # One at a time, the high priority first: lou's lease began once max's had ended.
        assert high["status"]["beginTime"] <= high["status"]["endTime"] <= low["status"]["beginTime"], \
            (high["status"], low["status"])
        assert exporter_log.read_text().count("power on") >= 2  # both shells reached the mock driver


async def test_update_lease_extends_refuses_a_new_begin_once_started_and_hands_the_lease_over(lab: Lab) -> None:
    """`jmp update lease` as the controller of the pinned version serves it: the duration of a Ready lease is
    extended (and with it the lease's end), its begin cannot move once it has an exporter, conflicting times and
    another client's lease are refused, and `--to-client` hands the lease to another client of the namespace."""
    await an_exporter(lab, "board-u", {"board": "upd"})
    agent = metadata("Exporter", "board-u", token_of(await credentials(lab, "exporter", "board-u")))
    for name in ("uma", "vic"):
        await a_client(lab, name)
    uma, vic = await client_config(lab, "uma"), await client_config(lab, "vic")
    tokens = {"uma": token_of(uma), "vic": token_of(vic)}
    async with channel(lab) as ch:
        await jumpstarter_pb2_grpc.ControllerServiceStub(ch).ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)
        made = await run(str(JMP), "create", "lease", "--client-config", str(uma), "-l", "board=upd",
                         "--duration", "5m", "-o", "name")
        assert made.returncode == 0, made.stdout
        name = made.stdout.strip().split("/")[-1]
        granted = await until(lab.kube, LEASE, NS, name, ready)
        begin = dt.datetime.fromisoformat(granted["status"]["beginTime"])

        extended = await run(str(JMP), "update", "lease", "--client-config", str(uma), name, "--duration", "20m")
        assert extended.returncode == 0, extended.stdout
        lease = await until(lab.kube, LEASE, NS, name, lambda o: ready(o) and dt.datetime.fromisoformat(
            o["status"].get("endTime", "")) == begin + dt.timedelta(minutes=20))
        assert lease["spec"]["duration"] == "20m" and lease["status"]["exporterRef"] == {"name": "board-u"}

        clients = client_pb2_grpc.ClientServiceStub(ch)
        full = f"namespaces/{NS}/leases/{name}"

        async def refused(who: str, change: Callable[[Any], None]) -> tuple[grpc.StatusCode, str]:
            wanted = client_pb2.Lease(name=full)
            change(wanted)
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await clients.UpdateLease(client_pb2.UpdateLeaseRequest(lease=wanted),
                                          metadata=metadata("Client", who, tokens[who]))
            return caught.value.code(), caught.value.details() or ""

        later = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        code, details = await refused("uma", lambda lease: lease.begin_time.FromDatetime(later))
        assert code == grpc.StatusCode.FAILED_PRECONDITION and "has already started" in details, details

        code, details = await refused("uma", lambda lease: lease.duration.FromTimedelta(dt.timedelta(minutes=-5)))
        assert code == grpc.StatusCode.INVALID_ARGUMENT and "duration must be positive" in details, details
        code, details = await refused("vic", lambda lease: lease.duration.FromTimedelta(dt.timedelta(hours=9)))
        assert code == grpc.StatusCode.PERMISSION_DENIED and "belongs to client uma" in details, details
        code, details = await refused("uma", lambda lease: setattr(lease, "client", f"namespaces/{NS}/clients/nobody"))
        assert code == grpc.StatusCode.NOT_FOUND and "does not exist" in details, details

        handed = await run(str(JMP), "update", "lease", "--client-config", str(uma), name, "--to-client", "vic")
        assert handed.returncode == 0, handed.stdout
        lease = await until(lab.kube, LEASE, NS, name, lambda o: o["spec"]["clientRef"] == {"name": "vic"})
        assert ready(lease) and lease["status"]["exporterRef"] == {"name": "board-u"}, lease["status"]
        mine = await clients.GetLease(client_pb2.GetLeaseRequest(name=full), metadata=metadata("Client", "vic",
                                                                                                 tokens["vic"]))
        assert mine.client == f"namespaces/{NS}/clients/vic"
        code, details = await refused("uma", lambda lease: lease.duration.FromTimedelta(dt.timedelta(hours=1)))
        assert code == grpc.StatusCode.PERMISSION_DENIED, details
        await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=full), metadata=metadata("Client", "vic",
                                                                                               tokens["vic"]))


async def test_jmp_auth_rotate_writes_a_new_token_and_an_expired_token_is_refused(lab: Lab) -> None:
    """RotateToken (`jmp auth rotate`): the Client's actor mints a fresh token into its credential Secret and
    answers it; old and new work. A token past its `exp` (lessor run --grpc-token-lifetime) signed with
    lessor's own key is UNAUTHENTICATED, with the reason."""
    client = await a_client(lab, "wes")
    path = await client_config(lab, "wes")
    old = token_of(path)
    # What `jmp auth rotate` calls (the command itself saves the config under the user's home, not at PATH).
    new = await ClientConfigV1Alpha1.from_file(path).rotate_token()
    assert new and new != old
    secret = await lab.kube.get(SECRET, NS, "wes-client")
    assert base64.b64decode(secret["data"]["token"]).decode() == new
    parent = client_pb2.ListLeasesRequest(parent=f"namespaces/{NS}")
    key = load_key(base64.b64decode((await lab.kube.get(SECRET, OPS, "lessor-jumpstarter-signing-key"))["data"][
        "key.pem"]))
    expired = mint(key, Subject("client", NS, "wes", client["metadata"]["uid"]), lifetime=-60)
    async with channel(lab) as ch:
        clients = client_pb2_grpc.ClientServiceStub(ch)
        for token in (old, new):
            await clients.ListLeases(parent, metadata=metadata("Client", "wes", token))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await clients.ListLeases(parent, metadata=metadata("Client", "wes", expired))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert caught.value.details() == "the bearer token has expired"


@pytest.fixture
def check_at_every_observation(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each observation of a Client reads its Secret (not at most once a minute): the test's observation heals."""
    monkeypatch.setattr("lessor.actors.leasing.credentials.CHECK_EVERY", 0.0, raising=False)  # raising: the old code had none


async def observe(lab: Lab, name: str, mark: str) -> None:
    """A change of the Client's, so that its actor observes it (as any edit of the user's would)."""
    await lab.kube.merge_patch(CLIENT, NS, name, {"metadata": {"annotations": {"test/mark": mark}}})


async def secret_token(lab: Lab, name: str) -> str | None:
    try:
        secret = await lab.kube.get(SECRET, NS, name)
    except ApiError as err:
        assert err.not_found
        return None
    return base64.b64decode((secret.get("data") or {}).get("token") or "").decode() or None


async def expired_token(lab: Lab, client: Mapping[str, Any]) -> str:
    key = load_key(base64.b64decode((await lab.kube.get(SECRET, OPS, "lessor-jumpstarter-signing-key"))["data"][
        "key.pem"]))
    return mint(key, Subject("client", NS, client["metadata"]["name"], client["metadata"]["uid"]), lifetime=-60)


@pytest.mark.usefixtures("check_at_every_observation")
async def test_a_deleted_or_emptied_credential_secret_is_made_again_at_the_next_observation(lab: Lab) -> None:
    await a_client(lab, "ivy")
    first = await secret_token(lab, "ivy-client")
    await lab.kube.delete(SECRET, NS, "ivy-client")
    await observe(lab, "ivy", "1")
    again = await eventually(lambda: secret_token(lab, "ivy-client"), lambda t: t is not None, "ivy's Secret again")
    assert again != first
    await lab.kube.merge_patch(SECRET, NS, "ivy-client", {"data": {"token": None}})
    await observe(lab, "ivy", "2")
    await eventually(lambda: secret_token(lab, "ivy-client"), lambda t: t is not None, "ivy's token again")
    assert token_of(await credentials(lab, "client", "ivy")) == await secret_token(lab, "ivy-client")


@pytest.mark.usefixtures("check_at_every_observation")
async def test_an_expired_token_is_minted_again_by_the_clients_actor(lab: Lab) -> None:
    client = await a_client(lab, "jay")
    expired = await expired_token(lab, client)
    await lab.kube.merge_patch(SECRET, NS, "jay-client", {"data": {"token": base64.b64encode(expired.encode()).decode()}})
    await observe(lab, "jay", "1")
    fresh = await eventually(lambda: secret_token(lab, "jay-client"), lambda t: t is not None and t != expired,
                             "a new token for jay")
    async with channel(lab) as ch:
        await client_pb2_grpc.ClientServiceStub(ch).ListLeases(
            client_pb2.ListLeasesRequest(parent=f"namespaces/{NS}"), metadata=metadata("Client", "jay", fresh))


async def test_credentials_names_what_is_missing_and_never_writes_an_expired_token(lab: Lab) -> None:
    """The actor reads its Secret again only at an observation a minute after its last read: before that, the
    command meets the Secret as the test left it."""
    client = await a_client(lab, "kit")
    out = lab.folder / "kit.yaml"
    command = (str(LESSOR), "credentials", "client", "kit", "-n", NS, "--kubeconfig", str(lab.kubeconfig), "-o",
               str(out))
    expired = await expired_token(lab, client)
    await lab.kube.merge_patch(SECRET, NS, "kit-client", {"data": {"token": base64.b64encode(expired.encode()).decode()}})
    done = await run(*command)
    assert done.returncode == 1 and "expired at" in done.stdout and "Traceback" not in done.stdout, done.stdout
    assert not out.exists()
    await lab.kube.merge_patch(SECRET, NS, "kit-client", {"data": {"token": None}})
    done = await run(*command)
    assert done.returncode == 1 and "has no key 'token'" in done.stdout, done.stdout
    await lab.kube.delete(SECRET, NS, "kit-client")
    done = await run(*command)
    assert done.returncode == 1 and "Secret lab/kit-client" in done.stdout and "does not exist" in done.stdout, \
        done.stdout
    assert not out.exists()


async def test_rotating_the_key_mints_every_credential_again_and_refuses_the_old_tokens(lab: Lab) -> None:
    """Last in this module: every token before it is replaced."""
    await a_client(lab, "zed")
    old = token_of(await credentials(lab, "client", "zed"))
    parent = client_pb2.ListLeasesRequest(parent=f"namespaces/{NS}")
    async with channel(lab) as ch:
        clients = client_pb2_grpc.ClientServiceStub(ch)
        await clients.ListLeases(parent, metadata=metadata("Client", "zed", old))
        done = await run(str(LESSOR), "credentials", "rotate-key", "--kubeconfig", str(lab.kubeconfig),
                         "--operator-namespace", OPS)
        assert done.returncode == 0, done.stdout
        assert "replaced the signing key" in done.stdout and "minted again" in done.stdout

        async def token() -> str | None:
            try:
                secret = await lab.kube.get(SECRET, NS, "zed-client")
            except ApiError as err:
                assert err.not_found
                return None
            return base64.b64decode(secret["data"]["token"]).decode()

        new = await eventually(token, lambda t: t is not None and t != old, "a new token for zed")
        await until(lab.kube, CLIENT, NS, "zed", lambda o: (o.get("status") or {}).get("credential"))
        await clients.ListLeases(parent, metadata=metadata("Client", "zed", new))
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await clients.ListLeases(parent, metadata=metadata("Client", "zed", old))
        assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED and "signature" in (caught.value.details() or "")
