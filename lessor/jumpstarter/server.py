"""The gRPC server of `lessor run --grpc-port`: Jumpstarter's services on the operator's actors and caches.

Imported only when the port is enabled: it needs grpc and the `jumpstarter-protocol` stubs (the
`[jumpstarter]` extra). TLS always, as the tools require: the certificate of `--grpc-cert-dir`, or a
development CA's certificate for localhost and 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import jumpstarter_pb2_grpc, router_pb2_grpc

from lessor.actors.api import Api
from lessor.admission.server import CERT_FILE, DEVELOPMENT_HOSTS, KEY_FILE
from lessor.certs import CertificateAuthority
from lessor.leader import NotLeader

from .router import Router, RouterService
from .service import ClientService, ControllerService
from .settings import GrpcSettings
from .tokens import Minter, SigningKey

if TYPE_CHECKING:
    from lessor.operator import Operator

log = logging.getLogger(__name__)

KEEPALIVE = (
    # The tools ping every 20 s, with or without calls in flight: allow it (gRPC's default policy answers
    # pings more often than every 5 min with GOAWAY "too_many_pings").
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
)


class OperatorBackend:
    """`service.Backend` on a running operator: the leader's actor system, its API and its informer caches."""

    def __init__(self, operator: Operator, signing_key: SigningKey) -> None:
        self.operator = operator
        self.api: Api = operator.context.api
        self.signing_key = signing_key
        self.heartbeat_timeout: timedelta = operator.context.heartbeat_timeout

    async def ask(self, address: str, message: Any) -> Any:
        system = self.operator.system
        if system is None or not self.operator.leadership.leading():
            raise NotLeader("a follower does not serve exporters; connect to the leader")
        return await system.ask(address, message)

    def cached(self, kind: str, namespace: str) -> list[Mapping[str, Any]]:
        return [obj for informer in self.operator.informers if informer.resource.kind == kind
                for (ns, _), obj in list(informer.store.items()) if ns == namespace]

    def cached_one(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        for informer in self.operator.informers:
            if informer.resource.kind == kind:
                return informer.store.get((namespace, name))
        return None

    def now(self) -> datetime:
        return self.operator.context.now()


def server_credentials(settings: GrpcSettings) -> grpc.ServerCredentials:
    """The cert dir's pair, or a fresh development CA's certificate (its PEM written to `ca_out`)."""
    if settings.cert_dir is not None:
        cert = (settings.cert_dir / CERT_FILE).read_bytes()
        key = (settings.cert_dir / KEY_FILE).read_bytes()
    else:
        ca = CertificateAuthority("lessor-grpc-ca")
        pair = ca.issue("lessor-grpc", hosts=DEVELOPMENT_HOSTS, server=True)
        cert, key = pair.cert_pem, pair.key_pem
        if settings.ca_out is not None:
            settings.ca_out.write_bytes(ca.cert_pem)
    return grpc.ssl_server_credentials([(key, cert)])


@contextlib.asynccontextmanager
async def serving(operator: Operator, settings: GrpcSettings, bind_address: str) -> AsyncIterator[grpc.aio.Server]:
    """Serve ControllerService, ClientService and RouterService on `bind_address:port` while the context is open."""
    minter = operator.context.credentials
    key = minter.key if isinstance(minter, Minter) else SigningKey(operator.context.api,
                                                                   operator.config.operator_namespace)
    backend = OperatorBackend(operator, key)
    server = grpc.aio.server(options=KEEPALIVE)
    router = Router(settings.endpoint)
    jumpstarter_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerService(backend, router), server)
    router_pb2_grpc.add_RouterServiceServicer_to_server(RouterService(router), server)
    client_pb2_grpc.add_ClientServiceServicer_to_server(ClientService(backend), server)
    host = f"[{bind_address}]" if ":" in bind_address else bind_address
    server.add_secure_port(f"{host}:{settings.port}", server_credentials(settings))
    await server.start()
    log.info("Jumpstarter gRPC on :%d (endpoint %s)", settings.port, settings.endpoint)
    try:
        yield server
    finally:
        await server.stop(grace=1.0)
