"""A leader change moves Jumpstarter's gRPC service with the leader: replicas of `lessor run --grpc-port`
against the real API server, each serving on its own port. A follower relays every call to the leader's address
(read from the leader Lease, where the leader writes it) and hands back the leader's own answer; with
`--no-grpc-forward-to-leader` it answers UNAVAILABLE naming that address instead. Once the leader stops, the
other replica serves, and a new replica relays to it (or names it) in turn."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import (common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc, router_pb2,
                                                 router_pb2_grpc)
from prometheus_client import CollectorRegistry

from lessor.tls.certs import CertificateAuthority
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE
from lessor.jumpstarter.forwarding import FORWARDED_BY, LeaderTrust, trust_of_folder
from lessor.jumpstarter.server import LEADER_METADATA
from lessor.leadership.election import COORDINATION_LEASE
from lessor.jumpstarter.settings import GrpcSettings
from lessor.model.labels import HOLDER_GRPC, HOLDER_POD
from lessor.tools.controlplane.processes import free_port
from tests.jumpstarter.test_grpc import JMP, LESSOR, run
from tests.app.test_leader import OPS, _held_elsewhere, _operator, _settings, _stop
from tests.polling import until
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver

Md = tuple[tuple[str, str], ...]


def _grpc(folder: Path, *, forward: bool = True, wait: float | None = None) -> GrpcSettings:
    """A replica's own port; the certificate (for localhost) and the endpoint the configs name are shared.
    `wait`: how long it holds a call while no leader answers (None: the Lease's duration + 10 s)."""
    port = free_port()
    return GrpcSettings(port=port, endpoint=f"localhost:{port}", cert_dir=folder / "certs",
                        advertise=f"localhost:{port}", forward_to_leader=forward, leader_wait=wait)


def _certificates(folder: Path) -> bytes:
    """The replicas' shared cert dir, with the CA beside the pair as cert-manager writes it; the CA's PEM."""
    ca = CertificateAuthority("test-ca")
    (folder / "certs").mkdir()
    ca.issue("lessor-grpc", hosts=("localhost",), server=True).write(folder / "certs", "tls")
    (folder / "certs" / "ca.crt").write_bytes(ca.cert_pem)
    return ca.cert_pem


def _md(kind: str, name: str, namespace: str, token: str | None) -> Md:
    bearer = (("authorization", f"Bearer {token}"),) if token else ()
    return (*bearer, ("jumpstarter-kind", kind), ("jumpstarter-namespace", namespace), ("jumpstarter-name", name))


def _channel(address: str, ca: bytes) -> grpc.aio.Channel:
    return grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(ca))


async def _list(address: str, ca: bytes, namespace: str, token: str | None,
                extra: Md = ()) -> tuple[grpc.StatusCode, str, str | None, list[str]]:
    """ListLeases as the client alice: its status code, details, the `lessor-leader` trailing metadata and the
    lease names."""
    async with _channel(address, ca) as channel:
        call = client_pb2_grpc.ClientServiceStub(channel).ListLeases(
            client_pb2.ListLeasesRequest(parent=f"namespaces/{namespace}"),
            metadata=(*_md("Client", "alice", namespace, token), *extra))
        try:
            answer = await call
        except grpc.aio.AioRpcError as err:
            trailing = dict(err.trailing_metadata() or ())
            return err.code(), err.details() or "", trailing.get(LEADER_METADATA), []
        return grpc.StatusCode.OK, "", None, sorted(lease.name for lease in answer.leases)


async def _answers(address: str, ca: bytes, namespace: str, token: str, code: grpc.StatusCode, *,
                   relayed: bool = False) -> tuple[str, str | None, list[str]]:
    """Poll until the replica at `address` answers `code` (a follower learns the leader's address from the Lease
    within one retry period of its campaign); an UNAVAILABLE of its own names the leader, one of a relay that
    failed says so."""
    deadline = asyncio.get_running_loop().time() + scaled(20)
    while True:
        got, details, leader, names = await _list(address, ca, namespace, token)
        if got == code and (code != grpc.StatusCode.UNAVAILABLE or (
                "relays calls to the leader" in details if relayed else leader is not None)):
            return details, leader, names
        assert asyncio.get_running_loop().time() < deadline, (address, got, details, leader)
        await asyncio.sleep(0.1)


async def _token(kube: Gateway, namespace: str, kind: Any, body: Mapping[str, Any]) -> str:
    """Create the Client or Exporter `body` and read the token lessor mints for it."""
    name = body["metadata"]["name"]
    await kube.create(kind, namespace, {"apiVersion": "lessor.dev/v1alpha1", **body})
    obj = await until(kube, kind, namespace, name, lambda o: bool((o.get("status") or {}).get("credential")))
    secret = await kube.get(await kube.resolve("v1", "Secret"), namespace, obj["status"]["credential"]["name"])
    return token_of_secret(secret)


def _forwarded(registry: CollectorRegistry, method: str, code: str) -> float:
    return registry.get_sample_value("lessor_grpc_forwarded_calls_total", {"method": method, "code": code}) or 0.0


def _relayed_at_all(registry: CollectorRegistry, method: str) -> bool:
    return any(_forwarded(registry, f"/{method}", code) for code in ("OK", "CANCELLED", "ABORTED", "UNAVAILABLE"))


LIST_LEASES = "/jumpstarter.client.v1.ClientService/ListLeases"


async def test_a_follower_relays_every_call_to_the_leader_and_then_to_the_next_leader(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    ca = _certificates(tmp_path)
    settings = _settings(lease_duration=30.0, renew_deadline=3.0)  # only a release explains a quick takeover
    first_grpc, second_grpc, third_grpc = _grpc(tmp_path), _grpc(tmp_path), _grpc(tmp_path)
    leader, follower = first_grpc.advertise or "", second_grpc.advertise or ""
    common: Mapping[str, Any] = {"leader_election": settings, "exporter_heartbeat_timeout": 15.0}
    async with _operator(kubeconfig, grpc=first_grpc, **common) as (first, _):
        await asyncio.wait_for(first.leadership.wait_leading(), scaled(30))
        async with _operator(kubeconfig, grpc=second_grpc, **common) as (second, relayed):
            alice = await _token(kube, namespace, CLIENT, {"kind": "Client", "metadata": {"name": "alice"}})
            board = await _token(kube, namespace, EXPORTER, {"kind": "Exporter", "metadata": {
                "name": "board", "labels": {"board": "relayed"}}})
            agent = _md("Exporter", "board", namespace, board)
            client = _md("Client", "alice", namespace, alice)
            await _answers(follower, ca, namespace, alice, grpc.StatusCode.OK)
            assert not second.leadership.leading()

            async with _channel(follower, ca) as channel:
                controller = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
                clients = client_pb2_grpc.ClientServiceStub(channel)
                router = router_pb2_grpc.RouterServiceStub(channel)
                # Unary calls through the follower: the leader's actors decide them.
                await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
                    status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)
                lease = client_pb2.Lease(selector="board=relayed")
                lease.duration.FromTimedelta(timedelta(minutes=5))
                made = await clients.CreateLease(client_pb2.CreateLeaseRequest(
                    parent=f"namespaces/{namespace}", lease=lease), metadata=client)
                name = made.name.rsplit("/", 1)[-1]
                await until(kube, LEASE, namespace, name, lambda o: any(
                    c["type"] == "Ready" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions") or ()))
                through_follower = await _list(follower, ca, namespace, alice)
                assert through_follower == await _list(leader, ca, namespace, alice)
                assert through_follower[0] == grpc.StatusCode.OK and through_follower[3] == [made.name]

                # A server stream through the follower: what the leader tells the agent.
                status = controller.Status(jumpstarter_pb2.StatusRequest(), metadata=agent)
                told = await asyncio.wait_for(status.read(), scaled(10))
                assert (told.leased, told.lease_name, told.client_name) == (True, name, "alice")
                async with _channel(leader, ca) as direct:
                    asked = jumpstarter_pb2_grpc.ControllerServiceStub(direct).Status(
                        jumpstarter_pb2.StatusRequest(), metadata=agent)
                    assert await asyncio.wait_for(asked.read(), scaled(10)) == told
                    asked.cancel()
                status.cancel()  # the caller's cancellation ends the relayed call on the leader too
                await _eventually(lambda: _forwarded(relayed, "/jumpstarter.v1.ControllerService/Status",
                                                     "CANCELLED") == 1)
                with pytest.raises(grpc.aio.AioRpcError) as caught:  # a deadline reaches the leader's stream
                    async for _ in controller.Status(jumpstarter_pb2.StatusRequest(), metadata=agent,
                                                     timeout=scaled(1)):
                        pass
                assert caught.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED

                # Listen, Dial and the router's bidi streams, all through the follower: paired in the leader.
                listen = controller.Listen(jumpstarter_pb2.ListenRequest(lease_name=name), metadata=agent)
                dialled = await _dial(controller, name, client)
                announced = await asyncio.wait_for(listen.read(), scaled(10))
                assert announced.router_endpoint == dialled.router_endpoint == first_grpc.endpoint
                bearer = (("authorization", f"Bearer {dialled.router_token}"),)
                client_side = router.Stream(metadata=bearer)
                exporter_side = router.Stream(metadata=(("authorization", f"Bearer {announced.router_token}"),))
                await client_side.write(router_pb2.StreamRequest(payload=b"ping"))
                assert (await asyncio.wait_for(exporter_side.read(), scaled(10))).payload == b"ping"
                for i in range(50):
                    await exporter_side.write(router_pb2.StreamRequest(payload=f"pong {i}".encode()))
                assert [(await client_side.read()).payload for _ in range(50)] == [
                    f"pong {i}".encode() for i in range(50)]
                await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=made.name), metadata=client)
                for side in (client_side, exporter_side):  # the leader's status and details, unchanged
                    with pytest.raises(grpc.aio.AioRpcError) as caught:
                        await asyncio.wait_for(side.read(), scaled(10))
                    assert caught.value.code() == grpc.StatusCode.ABORTED and "ended" in (caught.value.details() or "")
                assert await asyncio.wait_for(listen.read(), scaled(10)) == grpc.aio.EOF

            # The leader authenticates the caller: its own refusals come back through the follower.
            for token in (None, "forged"):
                refused = await _list(follower, ca, namespace, token)
                assert refused[0] == grpc.StatusCode.UNAUTHENTICATED, refused
                assert refused[:2] == (await _list(leader, ca, namespace, token))[:2]
            as_exporter = (("authorization", f"Bearer {board}"), ("jumpstarter-kind", "Exporter"),
                           ("jumpstarter-namespace", namespace), ("jumpstarter-name", "board"))
            denied = await _unary_list(follower, ca, namespace, as_exporter)
            assert denied[0] == grpc.StatusCode.PERMISSION_DENIED, denied
            assert denied == await _unary_list(leader, ca, namespace, as_exporter)
            assert _forwarded(relayed, LIST_LEASES, "OK") >= 2
            assert _forwarded(relayed, LIST_LEASES, "UNAUTHENTICATED") >= 2

            # A call relayed once is never relayed again: a replica that does not lead refuses it.
            code, details, named, _ = await _list(follower, ca, namespace, alice, ((FORWARDED_BY, "elsewhere"),))
            assert code == grpc.StatusCode.UNAVAILABLE and named == leader and f"at {leader}" in details, details

            await _stop(first)  # as SIGTERM does: actors stop, then the Lease is released
            await asyncio.wait_for(second.leadership.wait_leading(), scaled(20, at_most=25))  # within the 30 s lease
            _, _, names = await _answers(follower, ca, namespace, alice, grpc.StatusCode.OK)  # serves by itself
            served = _forwarded(relayed, LIST_LEASES, "OK")
            assert (await _list(follower, ca, namespace, alice))[0] == grpc.StatusCode.OK
            assert _forwarded(relayed, LIST_LEASES, "OK") == served  # not relayed: it leads

            async with _operator(kubeconfig, grpc=third_grpc, **common) as (third, relaying):
                newcomer = third_grpc.advertise or ""
                assert (await _answers(newcomer, ca, namespace, alice, grpc.StatusCode.OK))[2] == names
                assert not third.leadership.leading() and _forwarded(relaying, LIST_LEASES, "OK") >= 1
                code, details, named, _ = await _list(newcomer, ca, namespace, alice, ((FORWARDED_BY, "elsewhere"),))
                assert code == grpc.StatusCode.UNAVAILABLE and named == follower, details


async def _unary_list(address: str, ca: bytes, namespace: str, md: Md) -> tuple[grpc.StatusCode, str]:
    async with _channel(address, ca) as channel:
        try:
            await client_pb2_grpc.ClientServiceStub(channel).ListLeases(
                client_pb2.ListLeasesRequest(parent=f"namespaces/{namespace}"), metadata=md)
        except grpc.aio.AioRpcError as err:
            return err.code(), err.details() or ""
        return grpc.StatusCode.OK, ""


async def _dial(controller: Any, lease: str, md: Md) -> Any:
    """Dial until the exporter's Listen has reached the leader's router (UNAVAILABLE until then: the tools retry)."""
    deadline = asyncio.get_running_loop().time() + scaled(10)
    while True:
        try:
            return await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=lease), metadata=md)
        except grpc.aio.AioRpcError as err:
            assert err.code() == grpc.StatusCode.UNAVAILABLE, err
            assert asyncio.get_running_loop().time() < deadline, err
            await asyncio.sleep(0.1)


async def _eventually(check: Any, seconds: float = 10, why: Any = None) -> None:
    """Until `check()` holds, within `seconds` (scaled); `why()`, if given, says what is missing when it fails."""
    deadline = asyncio.get_running_loop().time() + scaled(seconds)
    while not check():
        assert asyncio.get_running_loop().time() < deadline, why() if why is not None else None
        await asyncio.sleep(0.05)


async def test_the_real_tools_lease_and_reach_a_board_through_the_follower_alone(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    """As behind a Service that always picks the follower: the endpoint the tools dial (and the router's, which
    Dial announces) is the follower's. `jmp run` registers and listens through it, and `jmp shell -l ...`
    leases the board, dials it and reaches its mock driver through the follower's relay to the leader."""
    ca = _certificates(tmp_path)
    (tmp_path / "ca.pem").write_bytes(ca)
    settings = _settings(lease_duration=30.0, renew_deadline=3.0)
    follower = f"localhost:{free_port()}"
    first_grpc, second_grpc = (GrpcSettings(port=int(address.rsplit(":", 1)[1]), endpoint=follower,
                                            cert_dir=tmp_path / "certs", advertise=address)
                               for address in (f"localhost:{free_port()}", follower))
    common: Mapping[str, Any] = {"leader_election": settings, "exporter_heartbeat_timeout": 15.0}
    async with _operator(kubeconfig, grpc=first_grpc, **common) as (first, _):
        await asyncio.wait_for(first.leadership.wait_leading(), scaled(30))
        async with _operator(kubeconfig, grpc=second_grpc, **common) as (second, relayed):
            await _token(kube, namespace, EXPORTER, {"kind": "Exporter", "metadata": {
                "name": "board-jmp", "labels": {"board": "jmp"}}})
            alice = await _token(kube, namespace, CLIENT, {"kind": "Client", "metadata": {"name": "alice"}})
            await _answers(follower, ca, namespace, alice, grpc.StatusCode.OK)  # it relays: it has read the Lease

            async def config(kind: str, name: str, extra: Mapping[str, Any]) -> Path:
                out = tmp_path / f"{kind}-{name}.yaml"
                done = await run(str(LESSOR), "credentials", kind, name, "-n", namespace, "--kubeconfig",
                                 str(kubeconfig), "--ca-file", str(tmp_path / "ca.pem"), "-o", str(out))
                assert done.returncode == 0, done.stdout
                body = yaml.safe_load(out.read_text())
                assert body["endpoint"] == follower, body
                out.write_text(yaml.safe_dump({**body, **extra}))
                return out

            exporter = await config("exporter", "board-jmp", {"export": {"power": {
                "type": "jumpstarter_driver_power.driver.MockPower"}}})
            client = await config("client", "alice", {"drivers": {"allow": [
                "jumpstarter_driver_power.*", "jumpstarter_driver_composite.*"]}})
            log_path = tmp_path / "board-jmp.log"
            with log_path.open("wb") as log:
                agent = subprocess.Popen([str(JMP), "run", "--exporter-config", str(exporter)],
                                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
                try:
                    await until(kube, EXPORTER, namespace, "board-jmp", lambda o: (o.get("status") or {}).get(
                        "exporterStatus") == "Available", timeout=60)
                    shell = await run(str(JMP), "shell", "--client-config", str(client), "-l", "board=jmp",
                                      "--duration", "10m", "--", "j", "power", "on")
                    assert shell.returncode == 0, shell.stdout + "\n--- exporter:\n" + log_path.read_text()
                    assert "power on" in log_path.read_text()  # the mock driver itself was called
                finally:
                    os.killpg(agent.pid, signal.SIGTERM)
                    try:
                        agent.wait(timeout=scaled(20))
                    except subprocess.TimeoutExpired:
                        os.killpg(agent.pid, signal.SIGKILL)
                        agent.wait()
            assert not second.leadership.leading()
            # A relayed call is counted when it ends; the agent's Listen ends when the follower sees its
            # connection close, which may come after the agent's exit.
            methods = ("jumpstarter.v1.ControllerService/Register", "jumpstarter.v1.ControllerService/Listen",
                       "jumpstarter.v1.ControllerService/Dial", "jumpstarter.v1.RouterService/Stream")
            def missing() -> list[str]:
                return [m for m in methods if not _relayed_at_all(relayed, m)]

            await _eventually(lambda: not missing(), 20, lambda: f"not relayed through the follower: {missing()}")


async def test_without_forwarding_a_follower_names_the_leaders_grpc_address_and_the_service_moves_with_the_leader(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    ca = _certificates(tmp_path)
    settings = _settings(lease_duration=30.0, renew_deadline=3.0)  # only a release explains a quick takeover
    first_grpc, second_grpc, third_grpc = (_grpc(tmp_path, forward=False) for _ in range(3))
    common: Mapping[str, Any] = {"leader_election": settings, "exporter_heartbeat_timeout": 15.0}
    async with _operator(kubeconfig, grpc=first_grpc, **common) as (first, _):
        await asyncio.wait_for(first.leadership.wait_leading(), scaled(30))
        async with _operator(kubeconfig, grpc=second_grpc, **common) as (second, _):
            token = await _token(kube, namespace, CLIENT, {"kind": "Client", "metadata": {"name": "alice"}})
            lease = await kube.get(COORDINATION_LEASE, OPS, settings.name)
            assert lease["metadata"]["annotations"][HOLDER_GRPC] == first_grpc.advertise
            details, leader, _ = await _answers(second_grpc.advertise or "", ca, namespace, token,
                                                grpc.StatusCode.UNAVAILABLE)
            assert leader == first_grpc.advertise
            assert "is not the leader; the leader" in details and f"at {first_grpc.advertise}" in details, details
            await _answers(first_grpc.advertise or "", ca, namespace, token, grpc.StatusCode.OK)

            await _stop(first)  # as SIGTERM does: actors stop, then the Lease is released
            await asyncio.wait_for(second.leadership.wait_leading(), scaled(20, at_most=25))  # within the 30 s lease
            await _answers(second_grpc.advertise or "", ca, namespace, token, grpc.StatusCode.OK)
            lease = await kube.get(COORDINATION_LEASE, OPS, settings.name)
            assert lease["metadata"]["annotations"][HOLDER_GRPC] == second_grpc.advertise

            # A lease made over gRPC on the new leader is decided by its actors (no exporter matches: it ends).
            made = await _create_lease(second_grpc.advertise or "", ca, namespace, token)
            await until(kube, LEASE, namespace, made, lambda o: any(
                c["type"] == "Ready" and c["reason"] == "ExporterNotFound"
                for c in (o.get("status") or {}).get("conditions") or ()))

            async with _operator(kubeconfig, grpc=third_grpc, **common) as (third, _):
                details, leader, _ = await _answers(third_grpc.advertise or "", ca, namespace, token,
                                                    grpc.StatusCode.UNAVAILABLE)
                assert leader == second_grpc.advertise and f"at {second_grpc.advertise}" in details, details
                assert not third.leadership.leading()


async def test_what_a_relay_meets_comes_back_and_a_replica_never_relays_to_itself(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    """Two followers of a Lease held elsewhere, whose annotation the test points: at an address where nothing
    listens (UNAVAILABLE naming it and the failure, once the follower held the call for its wait), at the
    other follower (its refusal and trailing metadata come back unchanged), at the replica's own address
    (refused as before, never relayed to itself)."""
    ca = _certificates(tmp_path)
    settings = await _held_elsewhere(kube)  # held by another holder for an hour: the replicas only follow
    nowhere, one, other = f"localhost:{free_port()}", _grpc(tmp_path, wait=0.5), _grpc(tmp_path, wait=0.5)

    replicas: list[Any] = []

    async def point(address: str) -> None:
        """Point the Lease's annotation at `address`, and wait until both replicas have read it."""
        await kube.merge_patch(COORDINATION_LEASE, OPS, settings.name, {"metadata": {"annotations": {
            HOLDER_GRPC: address, HOLDER_POD: "lessor-gone"}}})
        await _eventually(lambda: all(r.leadership.leader_says(HOLDER_GRPC) == address for r in replicas),
                          seconds=20)

    async with (_operator(kubeconfig, grpc=one, leader_election=settings) as (first, relaying),
                _operator(kubeconfig, grpc=other, leader_election=settings) as (second, relayed_to)):
        replicas.extend((first, second))
        await point(nowhere)
        details, _, _ = await _answers(one.own_address, ca, namespace, "any", grpc.StatusCode.UNAVAILABLE,
                                       relayed=True)
        assert f"relays calls to the leader (pod lessor-gone) at {nowhere}, which did not answer:" in details
        assert "Connection refused" in details, details
        assert _forwarded(relaying, LIST_LEASES, "UNAVAILABLE") >= 1

        await point(other.own_address)
        relays, onwards = (_forwarded(r, LIST_LEASES, "UNAVAILABLE") for r in (relaying, relayed_to))
        code, details, leader, _ = await _list(one.own_address, ca, namespace, "any")
        assert (code, leader) == (grpc.StatusCode.UNAVAILABLE, other.own_address), details
        assert "is not the leader" in details and _forwarded(relaying, LIST_LEASES, "UNAVAILABLE") == relays + 1
        assert _forwarded(relayed_to, LIST_LEASES, "UNAVAILABLE") == onwards  # refused there, not relayed on

        # A stream relayed to a leader that is still up when another replica takes over (a leader that lost
        # its Lease) ends UNAVAILABLE at the next call relayed to the new one, so that the caller calls again.
        async with _stand_in_leader(tmp_path / "certs") as stand_in:
            await point(stand_in)
            async with _channel(one.own_address, ca) as channel:
                controller = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
                status = controller.Status(jumpstarter_pb2.StatusRequest())
                assert (await asyncio.wait_for(status.read(), scaled(10))).lease_name == "stand-in"
                await point(other.own_address)
                await _list(one.own_address, ca, namespace, "any")
                with pytest.raises(grpc.aio.AioRpcError) as caught:
                    while True:
                        await asyncio.wait_for(status.read(), scaled(10))
                assert caught.value.code() == grpc.StatusCode.UNAVAILABLE
                assert f"the leader moved from {stand_in} to {other.own_address}" in (caught.value.details() or "")

        await point(one.own_address)
        relays = _forwarded(relaying, LIST_LEASES, "UNAVAILABLE")
        code, details, leader, _ = await _list(one.own_address, ca, namespace, "any")
        assert (code, leader) == (grpc.StatusCode.UNAVAILABLE, one.own_address) and "is not the leader" in details
        assert _forwarded(relaying, LIST_LEASES, "UNAVAILABLE") == relays  # refused, not relayed to itself


async def test_a_follower_holds_a_call_until_the_lease_names_a_leader_that_answers(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    """The leader the Lease names does not listen (it crashed): the follower holds the agent's Status instead
    of failing it, and relays it to the next leader the Lease names, whose first message is the caller's first."""
    ca = _certificates(tmp_path)
    settings = await _held_elsewhere(kube)
    nowhere, one = f"localhost:{free_port()}", _grpc(tmp_path, wait=scaled(60))
    async with (_operator(kubeconfig, grpc=one, leader_election=settings) as (follower, relaying),
                _stand_in_leader(tmp_path / "certs") as stand_in):
        async def point(address: str) -> None:
            await kube.merge_patch(COORDINATION_LEASE, OPS, settings.name, {"metadata": {"annotations": {
                HOLDER_GRPC: address}}})
            await _eventually(lambda: follower.leadership.leader_says(HOLDER_GRPC) == address, seconds=20)

        await point(nowhere)
        async with _channel(one.own_address, ca) as channel:
            status = jumpstarter_pb2_grpc.ControllerServiceStub(channel).Status(jumpstarter_pb2.StatusRequest())
            first = asyncio.ensure_future(status.read())
            await asyncio.sleep(0.5)  # the call reaches the follower, which holds it (the leader does not listen)
            assert not first.done() or first.exception() is None, first.exception()
            await point(stand_in)
            assert (await asyncio.wait_for(first, scaled(20))).lease_name == "stand-in"
            status.cancel()
        held = relaying.get_sample_value("lessor_grpc_held_calls_total", {"outcome": "relayed"})
        assert held == 1, held


@contextlib.asynccontextmanager
async def _stand_in_leader(certs: Path) -> AsyncIterator[str]:
    """A gRPC server with the replicas' certificate whose ControllerService.Status tells `stand-in`
    for ever, until cancelled: a leader whose streams outlive its leadership."""

    async def status(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        while True:
            yield jumpstarter_pb2.StatusResponse(leased=True, lease_name="stand-in").SerializeToString()
            await asyncio.sleep(0.1)

    handlers = grpc.method_handlers_generic_handler("jumpstarter.v1.ControllerService", {
        "Status": grpc.unary_stream_rpc_method_handler(status)})
    server = grpc.aio.server()
    server.add_generic_rpc_handlers((handlers,))
    port = server.add_secure_port("localhost:0", grpc.ssl_server_credentials(
        [((certs / "tls.key").read_bytes(), (certs / "tls.crt").read_bytes())]))
    await server.start()
    try:
        yield f"localhost:{port}"
    finally:
        await server.stop(None)


def test_the_leader_is_checked_with_the_cert_dirs_ca_under_a_name_its_certificate_holds(tmp_path: Path) -> None:
    """Without the CA (a cert dir of tls.crt and tls.key alone) a follower refuses as before, and says why."""
    ca = CertificateAuthority("test-ca")
    ca.issue("lessor-grpc", hosts=("10.0.0.7", "lessor-grpc.lessor-system.svc"), server=True).write(tmp_path, "tls")
    missing = trust_of_folder(tmp_path)
    assert isinstance(missing, str) and "ca.crt" in missing, missing
    (tmp_path / "ca.crt").write_bytes(ca.cert_pem)
    assert trust_of_folder(tmp_path) == LeaderTrust(ca.cert_pem, "lessor-grpc.lessor-system.svc")


def token_of_secret(secret: Mapping[str, Any]) -> str:
    return base64.b64decode(secret["data"]["token"]).decode()


async def _create_lease(address: str, ca: bytes, namespace: str, token: str) -> str:
    md = (("authorization", f"Bearer {token}"), ("jumpstarter-kind", "Client"),
          ("jumpstarter-namespace", namespace), ("jumpstarter-name", "alice"))
    async with grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(ca)) as channel:
        lease = client_pb2.Lease(selector="board=none")
        lease.duration.FromSeconds(600)
        made = await client_pb2_grpc.ClientServiceStub(channel).CreateLease(
            client_pb2.CreateLeaseRequest(parent=f"namespaces/{namespace}", lease=lease), metadata=md)
        return str(made.name).rsplit("/", 1)[-1]

