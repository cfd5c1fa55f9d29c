"""The gRPC server of `lessor run --grpc-port`: Jumpstarter's services on the operator's actors and caches.

Imported only when the port is enabled: it needs grpc and the `jumpstarter-protocol` stubs (the
`[jumpstarter]` extra). TLS always, as the tools require: the certificate of `--grpc-cert-dir`, or a
development CA's certificate for localhost and 127.0.0.1.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import jumpstarter_pb2_grpc, router_pb2_grpc

from prometheus_client import CollectorRegistry

from lessor.leadership.election import Leadership
from lessor.model.labels import HOLDER_GRPC, HOLDER_POD
from lessor.tls.certs import CA_FILE, CERT_FILE, DEVELOPMENT_HOSTS, KEY_FILE, CertificateAuthority

from .backend import Backend
from .client import ClientService
from .controller import ControllerService
from .forwarding import LEADER_METADATA, ForwardToLeader, LeaderLink, leader_trust
from .guard import CallGuard
from .login import auth_config_body, login_service, server_ssl
from .oidc import AuthConfig
from .router import Router, RouterService
from .settings import LEADER_WAIT_MARGIN, GrpcSettings

log = logging.getLogger(__name__)

KEEPALIVE = (
    # The tools ping every 20 s, with or without calls in flight: allow it (gRPC's default policy answers
    # pings more often than every 5 min with GOAWAY "too_many_pings").
    ("grpc.keepalive_permit_without_calls", 1),
    ("grpc.http2.min_recv_ping_interval_without_data_ms", 10_000),
    ("grpc.http2.max_ping_strikes", 0),
)


def not_leading(leadership: Leadership) -> str:
    """Why this replica turns a call away, naming the leader's gRPC address as the Lease says it."""
    address = leadership.leader_says(HOLDER_GRPC)
    if address is None:
        return "no lessor replica leads at the moment (an election is under way): try again in a few seconds"
    pod = leadership.leader_says(HOLDER_POD)
    return (f"this lessor replica is not the leader; the leader{f' (pod {pod})' if pod else ''} serves "
            f"Jumpstarter's protocol at {address}: connect there, or try again through an endpoint that reaches it")


class FollowerRefusal(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """On a follower, every call (exporters', clients', the router's) is UNAVAILABLE with the leader's address
    in its message and in the trailing metadata `lessor-leader`: only the leader's actors lease, and the
    router pairs streams in the leader's process. With `--no-grpc-forward-to-leader` (or no CA to check the
    leader with) for every call; else for the calls `ForwardToLeader` does not relay."""

    def __init__(self, leadership: Leadership) -> None:
        self.leadership = leadership

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or self.leadership.leading():
            return handler
        return self.refused(handler)

    def refused(self, handler: grpc.RpcMethodHandler) -> grpc.RpcMethodHandler:
        """`handler`'s shape, answering UNAVAILABLE with the leader's address."""
        return _refusing(handler, self.refuse)

    async def refuse(self, context: grpc.aio.ServicerContext) -> None:
        """End the call UNAVAILABLE, naming the leader as the Lease says now (raises)."""
        leader = self.leadership.leader_says(HOLDER_GRPC)
        if leader is not None:
            context.set_trailing_metadata(((LEADER_METADATA, leader),))
        await context.abort(grpc.StatusCode.UNAVAILABLE, not_leading(self.leadership))


def _refusing(handler: grpc.RpcMethodHandler,
              refuse: Callable[[grpc.aio.ServicerContext], Awaitable[None]]) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s shape that answers as `refuse` does."""

    async def unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
        await refuse(context)

    async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        await refuse(context)
        yield  # pragma: no cover - abort raises

    make = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}
    behaviour = streaming if handler.response_streaming else unary
    return make[(bool(handler.request_streaming), bool(handler.response_streaming))](
        behaviour, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer)


def tls_material(settings: GrpcSettings) -> tuple[bytes, bytes, bytes | None]:
    """(certificate, key, CA PEM or None): the cert dir's pair and its ca.crt, or a certificate of the
    development CA kept in `ca_dir` (its PEM written to `ca_out`): the same CA at every start, so the
    configs that trust it keep working."""
    if settings.cert_dir is not None:
        ca_file = settings.cert_dir / CA_FILE
        return ((settings.cert_dir / CERT_FILE).read_bytes(), (settings.cert_dir / KEY_FILE).read_bytes(),
                ca_file.read_bytes() if ca_file.is_file() else None)
    ca = CertificateAuthority.kept_in(settings.ca_dir, "lessor-grpc-ca")
    log.info("Jumpstarter gRPC: a certificate of the development CA kept in %s (%s)", settings.ca_dir,
             settings.ca_dir / CA_FILE)
    pair = ca.issue("lessor-grpc", hosts=DEVELOPMENT_HOSTS, server=True)
    if settings.ca_out is not None:
        settings.ca_out.write_bytes(ca.cert_pem)
    return pair.cert_pem, pair.key_pem, ca.cert_pem


def server_credentials(settings: GrpcSettings) -> grpc.ServerCredentials:
    """The server's TLS credentials from `tls_material`."""
    cert, key, _ = tls_material(settings)
    return grpc.ssl_server_credentials([(key, cert)])


@contextlib.asynccontextmanager
async def serving(backend: Backend, leadership: Leadership, registry: CollectorRegistry, settings: GrpcSettings,
                  bind_address: str, *, lease_duration: float | None) -> AsyncIterator[grpc.aio.Server]:
    """Serve ControllerService, ClientService and RouterService on `bind_address:port` while the context is open.

    `lease_duration` is the leader Lease's (None without leader election): a follower relays calls for that
    long, plus a margin, while no leader is known."""
    refusal = FollowerRefusal(leadership)
    link = _leader_link(settings, elected=lease_duration is not None)
    wait = settings.leader_wait if settings.leader_wait is not None else (
        lease_duration + LEADER_WAIT_MARGIN if lease_duration is not None else 0.0)
    interceptor = refusal if link is None else ForwardToLeader(
        leadership, settings.own_address, link, refusal.refuse, registry, wait=wait)
    server = grpc.aio.server(options=KEEPALIVE, interceptors=[CallGuard(registry), interceptor])
    router = Router(settings.endpoint)
    jumpstarter_pb2_grpc.add_ControllerServiceServicer_to_server(ControllerService(backend, router), server)
    router_pb2_grpc.add_RouterServiceServicer_to_server(RouterService(router), server)
    client_pb2_grpc.add_ClientServiceServicer_to_server(ClientService(backend), server)
    host = f"[{bind_address}]" if ":" in bind_address else bind_address
    cert, key, ca_pem = tls_material(settings)
    server.add_secure_port(f"{host}:{settings.port}", grpc.ssl_server_credentials([(key, cert)]))
    await server.start()
    log.info("Jumpstarter gRPC on :%d (endpoint %s, this replica %s)", settings.port, settings.endpoint,
             settings.own_address)
    try:
        async with contextlib.AsyncExitStack() as stack:
            if settings.login_port is not None:
                config = backend.issuers.config if backend.issuers is not None else AuthConfig()
                body = auth_config_body(config, settings.endpoint, settings.login_namespace, ca_pem)
                await stack.enter_async_context(login_service(body, bind_address, settings.login_port,
                                                              server_ssl(cert, key)))
                log.info("jmp login service (/v1/auth/config) on :%d", settings.login_port)
            yield server
    finally:
        await server.stop(grace=1.0)
        if link is not None:
            await link.close()


def _leader_link(settings: GrpcSettings, *, elected: bool) -> LeaderLink | None:
    """The channel a follower relays through, or None (refusing instead): a single unelected replica, forwarding
    turned off, or no CA to check the leader with (said once, here: a warning when a cert dir lacks it, as a
    deployment's would; only a note for the development CA of `lessor dev`)."""
    if not elected or not settings.forward_to_leader:
        return None
    trust = leader_trust(settings)
    if isinstance(trust, str):
        log.log(logging.WARNING if settings.cert_dir is not None else logging.INFO,
                "as a follower, this replica will refuse Jumpstarter's gRPC calls (UNAVAILABLE naming the leader) "
                "instead of relaying them to the leader: %s", trust)
        return None
    return LeaderLink(trust)
