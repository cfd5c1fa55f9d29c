"""A leader change moves Jumpstarter's gRPC service with the leader: two replicas of `lessor run --grpc-port`
against the real API server, each serving on its own port. The follower answers every call UNAVAILABLE with the
leader's address (read from the leader Lease, where the leader writes it); once the leader stops, the other
replica serves, and a new replica names it in turn."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import grpc
import pytest
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc

from lessor.certs import CertificateAuthority
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, LEASE
from lessor.jumpstarter.server import LEADER_METADATA
from lessor.leader import COORDINATION_LEASE
from lessor.jumpstarter.settings import GrpcSettings
from lessor.model.labels import HOLDER_GRPC
from lessor.tools.controlplane.processes import free_port
from tests.app.test_leader import OPS, _operator, _settings, _stop
from tests.polling import until
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver


def _grpc(folder: Path) -> GrpcSettings:
    """A replica's own port; the certificate (for localhost) and the endpoint the configs name are shared."""
    port = free_port()
    return GrpcSettings(port=port, endpoint=f"localhost:{port}", cert_dir=folder / "certs",
                        advertise=f"localhost:{port}")


async def _list(address: str, ca: bytes, namespace: str, token: str) -> tuple[grpc.StatusCode, str, str | None]:
    """ListLeases as the client: its status code, details and the `lessor-leader` trailing metadata."""
    md = (("authorization", f"Bearer {token}"), ("jumpstarter-kind", "Client"),
          ("jumpstarter-namespace", namespace), ("jumpstarter-name", "alice"))
    async with grpc.aio.secure_channel(address, grpc.ssl_channel_credentials(ca)) as channel:
        call = client_pb2_grpc.ClientServiceStub(channel).ListLeases(
            client_pb2.ListLeasesRequest(parent=f"namespaces/{namespace}"), metadata=md)
        try:
            await call
        except grpc.aio.AioRpcError as err:
            trailing = dict(err.trailing_metadata() or ())
            return err.code(), err.details() or "", trailing.get(LEADER_METADATA)
        return grpc.StatusCode.OK, "", None


async def _answers(address: str, ca: bytes, namespace: str, token: str, code: grpc.StatusCode) -> tuple[str, str | None]:
    """Poll until the replica at `address` answers `code` (a follower learns the leader's address from the Lease
    within one retry period of its campaign)."""
    deadline = asyncio.get_running_loop().time() + scaled(20)
    while True:
        got, details, leader = await _list(address, ca, namespace, token)
        if got == code and (code != grpc.StatusCode.UNAVAILABLE or leader is not None):
            return details, leader
        assert asyncio.get_running_loop().time() < deadline, (address, got, details, leader)
        await asyncio.sleep(0.1)


async def test_a_follower_names_the_leaders_grpc_address_and_the_service_moves_with_the_leader(
        kube: Gateway, kubeconfig: Path, namespace: str, tmp_path: Path) -> None:
    ca = CertificateAuthority("test-ca")
    (tmp_path / "certs").mkdir()
    ca.issue("lessor-grpc", hosts=("localhost",), server=True).write(tmp_path / "certs", "tls")
    settings = _settings(lease_duration=30.0, renew_deadline=3.0)  # only a release explains a quick takeover
    first_grpc, second_grpc, third_grpc = _grpc(tmp_path), _grpc(tmp_path), _grpc(tmp_path)
    common: Mapping[str, Any] = {"leader_election": settings, "exporter_heartbeat_timeout": 15.0}
    async with _operator(kubeconfig, grpc=first_grpc, **common) as (first, _):
        await asyncio.wait_for(first.leadership.wait_leading(), scaled(30))
        async with _operator(kubeconfig, grpc=second_grpc, **common) as (second, _):
            await kube.create(CLIENT, namespace, {"apiVersion": "lessor.dev/v1alpha1", "kind": "Client",
                                                  "metadata": {"name": "alice"}})
            client = await until(kube, CLIENT, namespace, "alice",
                                 lambda o: bool((o.get("status") or {}).get("credential")))
            secret = await kube.get(await kube.resolve("v1", "Secret"), namespace,
                                    client["status"]["credential"]["name"])
            token = token_of_secret(secret)

            lease = await kube.get(COORDINATION_LEASE, OPS, settings.name)
            assert lease["metadata"]["annotations"][HOLDER_GRPC] == first_grpc.advertise
            details, leader = await _answers(second_grpc.advertise or "", ca.cert_pem, namespace, token,
                                             grpc.StatusCode.UNAVAILABLE)
            assert leader == first_grpc.advertise
            assert "is not the leader; the leader" in details and f"at {first_grpc.advertise}" in details, details
            await _answers(first_grpc.advertise or "", ca.cert_pem, namespace, token, grpc.StatusCode.OK)

            await _stop(first)  # as SIGTERM does: actors stop, then the Lease is released
            await asyncio.wait_for(second.leadership.wait_leading(), scaled(20, at_most=25))  # within the 30 s lease
            await _answers(second_grpc.advertise or "", ca.cert_pem, namespace, token, grpc.StatusCode.OK)
            lease = await kube.get(COORDINATION_LEASE, OPS, settings.name)
            assert lease["metadata"]["annotations"][HOLDER_GRPC] == second_grpc.advertise

            # A lease made over gRPC on the new leader is decided by its actors (no exporter matches: it ends).
            made = await _create_lease(second_grpc.advertise or "", ca.cert_pem, namespace, token)
            await until(kube, LEASE, namespace, made, lambda o: any(
                c["type"] == "Ready" and c["reason"] == "ExporterNotFound"
                for c in (o.get("status") or {}).get("conditions") or ()))

            async with _operator(kubeconfig, grpc=third_grpc, **common) as (third, _):
                details, leader = await _answers(third_grpc.advertise or "", ca.cert_pem, namespace, token,
                                                 grpc.StatusCode.UNAVAILABLE)
                assert leader == second_grpc.advertise and f"at {second_grpc.advertise}" in details, details
                assert not third.leadership.leading()


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

