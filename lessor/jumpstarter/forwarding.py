"""A follower forwards Jumpstarter's gRPC calls to the leader, so that every replica behind the Service answers.

Only the leader's actors lease and only its router pairs `jmp shell`'s streams, yet the Service (and an
Ingress or Route in front of it) sends a connection to any replica. A follower therefore relays each call,
unary or streaming, to the address the leader advertises in the leader Lease (`lessor.dev/holder-grpc`) and
hands the leader's answer back unchanged: messages, status, details, initial and trailing metadata. It relays
bytes (no (de)serialiser), so it knows nothing of the methods, and the caller's metadata as is: the leader
authenticates the caller's own token, the follower adds no authority. A relayed call carries
`lessor-forwarded-by`, and a replica that gets one while not leading refuses it instead of relaying it again,
so two replicas with stale views of the Lease cannot bounce a call between them.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from prometheus_client import CollectorRegistry, Counter

from lessor.admission.server import CERT_FILE
from lessor.leader import Leadership
from lessor.model.labels import HOLDER_GRPC, HOLDER_POD

from .settings import GrpcSettings

log = logging.getLogger(__name__)

FORWARDED_BY = "lessor-forwarded-by"
"""Metadata of a relayed call: the identity of the replica that relayed it."""

CA_FILE = "ca.crt"
"""The CA that signed `--grpc-cert-dir`'s tls.crt, as cert-manager writes it into the Secret."""

_NOT_RELAYED = frozenset({"user-agent", "content-type", "te", "host", FORWARDED_BY})
"""Metadata that describes the connection to this replica, not the caller; gRPC sets its own on the next hop."""

CHANNEL_OPTIONS = (
    # Exporters keep Listen and Status open for hours: keep the relay's connection alive as the tools do theirs.
    ("grpc.keepalive_time_ms", 20_000),
    ("grpc.keepalive_permit_without_calls", 1),
)


@dataclass(frozen=True)
class LeaderTrust:
    """How a follower checks the leader's certificate: the CA the replicas share, and a name that the
    certificate holds (the leader is dialled by pod IP, which it does not)."""

    ca_pem: bytes
    server_name: str


def leader_trust(settings: GrpcSettings) -> LeaderTrust | str:
    """The trust to relay with, or why there is none (the follower then refuses calls as before)."""
    if settings.cert_dir is None:
        return ("without --grpc-cert-dir every replica makes a development CA of its own, which the others "
                "cannot verify: give the replicas one --grpc-cert-dir (with its ca.crt)")
    return trust_of_folder(settings.cert_dir)


def trust_of_folder(folder: Path) -> LeaderTrust | str:
    """`folder`'s ca.crt, and a DNS name (else an IP address) of the certificate in its tls.crt."""
    try:
        ca = (folder / CA_FILE).read_bytes()
    except OSError as err:
        return (f"{folder} has no readable {CA_FILE} (the CA that signed {CERT_FILE}; cert-manager writes it "
                f"into the Secret): {err.strerror or err}")
    try:
        certificate = x509.load_pem_x509_certificate((folder / CERT_FILE).read_bytes())
        names = certificate.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except (OSError, ValueError, x509.ExtensionNotFound) as err:
        return f"no subject alternative name read from {folder / CERT_FILE}: {err}"
    hosts = [*names.get_values_for_type(x509.DNSName), *map(str, names.get_values_for_type(x509.IPAddress))]
    if not hosts:
        return f"{folder / CERT_FILE} names no DNS name or IP address"
    return LeaderTrust(ca, hosts[0])


class LeaderLink:
    """One channel to the leader, for its current address: replaced (and the old one closed, ending the
    calls relayed through it) when another replica leads."""

    def __init__(self, trust: LeaderTrust) -> None:
        self.trust = trust
        self.address: str | None = None
        self._channel: grpc.aio.Channel | None = None
        self._closing: set[asyncio.Task[None]] = set()

    def channel(self, address: str) -> grpc.aio.Channel:
        if self._channel is None or address != self.address:
            old, self.address = self._channel, address
            credentials = grpc.ssl_channel_credentials(root_certificates=self.trust.ca_pem)
            options = (*CHANNEL_OPTIONS, ("grpc.ssl_target_name_override", self.trust.server_name))
            self._channel = grpc.aio.secure_channel(address, credentials, options=options)
            log.info("relaying gRPC calls to the leader at %s (its certificate checked for %s)", address,
                     self.trust.server_name)
            if old is not None:
                task = asyncio.create_task(old.close())
                self._closing.add(task)
                task.add_done_callback(self._closing.discard)
        return self._channel

    async def close(self) -> None:
        if self._channel is not None:
            await self._channel.close()
        await asyncio.gather(*self._closing, return_exceptions=True)


Refuse = Callable[[grpc.RpcMethodHandler], grpc.RpcMethodHandler]


class ForwardToLeader(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """On a follower, relay every call to the leader; refuse it (`refuse`) when the call was relayed already,
    no leader is known, or the Lease names this replica's own address."""

    def __init__(self, leadership: Leadership, own_address: str, link: LeaderLink, refuse: Refuse,
                 registry: CollectorRegistry | None = None) -> None:
        self.leadership = leadership
        self.own_address = own_address
        self.link = link
        self.refuse = refuse
        self._forwarded = Counter("lessor_grpc_forwarded_calls", "Jumpstarter gRPC calls a follower relayed to "
                                  "the leader, by method and the status they ended with", ["method", "code"],
                                  registry=registry)

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or self.leadership.leading():
            return handler
        leader = self.leadership.leader_says(HOLDER_GRPC)
        relayed = any(key == FORWARDED_BY for key, _ in details.invocation_metadata or ())
        if relayed or leader is None or leader == self.own_address:
            return self.refuse(handler)
        return _relaying(handler, lambda requests, context: self._relay(details.method, leader, requests, context))

    async def _relay(self, method: str, address: str, requests: AsyncIterable[bytes] | Iterable[bytes],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """The leader's answer to `requests`, relayed into `context`; its status (non-OK) by `context.abort`."""
        channel = self.link.channel(address)
        metadata = [(key, value) for key, value in context.invocation_metadata() or ()
                    if key not in _NOT_RELAYED and not key.startswith((":", "grpc-"))]
        metadata.append((FORWARDED_BY, self.leadership.identity))
        log.debug("relaying %s to the leader at %s", method, address)
        call = channel.stream_stream(method)(requests, metadata=metadata, timeout=context.time_remaining())
        code = grpc.StatusCode.CANCELLED  # unless set below: closed by the server as the caller went away
        try:
            try:
                initial = tuple(await call.initial_metadata() or ())  # the server's calls take tuples only
                if initial:
                    await context.send_initial_metadata(initial)
                async for message in call:
                    yield message
                code = await call.code()
                context.set_trailing_metadata(tuple(await call.trailing_metadata() or ()))
            except grpc.aio.AioRpcError as err:
                code = err.code()
                await context.abort(code, self._details(err, address, channel), tuple(err.trailing_metadata() or ()))
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if task is not None and task.cancelling():  # the caller went away
                    code = grpc.StatusCode.CANCELLED
                    raise
                code = grpc.StatusCode.UNAVAILABLE  # the channel was closed under the call: the leader moved
                await context.abort(code, f"the leader moved from {address} to {self.link.address}: call again")
        finally:
            call.cancel()  # no effect once it ended; else the caller's cancellation reaches the leader
            self._forwarded.labels(method, code.name).inc()
            log.debug("relayed %s to the leader at %s: %s", method, address, code.name)

    def _details(self, err: grpc.aio.AioRpcError, address: str, channel: grpc.aio.Channel) -> str:
        """The leader's own details, or what kept its answer from arriving (it did not answer: the channel
        is not connected)."""
        details = err.details() or ""
        if err.code() != grpc.StatusCode.UNAVAILABLE or channel.get_state() == grpc.ChannelConnectivity.READY:
            return details
        pod = self.leadership.leader_says(HOLDER_POD)
        return (f"this lessor replica relays calls to the leader{f' (pod {pod})' if pod else ''} at {address}, "
                f"which did not answer: {details}")


def _relaying(handler: grpc.RpcMethodHandler,
              relay: Callable[[Any, grpc.aio.ServicerContext], AsyncIterator[bytes]]) -> grpc.RpcMethodHandler:
    """A handler of `handler`'s shape that relays bytes (no (de)serialisers) through `relay`."""

    async def unary_in(request: bytes, context: grpc.aio.ServicerContext) -> bytes | None:
        return await _last(relay((request,), context))

    async def stream_in(requests: AsyncIterator[bytes], context: grpc.aio.ServicerContext) -> bytes | None:
        return await _last(relay(requests, context))

    async def unary_in_stream_out(request: bytes, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for message in relay((request,), context):
            yield message

    async def stream_in_stream_out(requests: AsyncIterator[bytes],
                                   context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        async for message in relay(requests, context):
            yield message

    shape = (bool(handler.request_streaming), bool(handler.response_streaming))
    make: dict[tuple[bool, bool], tuple[Callable[..., grpc.RpcMethodHandler], Callable[..., Any]]] = {
        (False, False): (grpc.unary_unary_rpc_method_handler, unary_in),
        (True, False): (grpc.stream_unary_rpc_method_handler, stream_in),
        (False, True): (grpc.unary_stream_rpc_method_handler, unary_in_stream_out),
        (True, True): (grpc.stream_stream_rpc_method_handler, stream_in_stream_out),
    }
    factory, behaviour = make[shape]
    return factory(behaviour)


async def _last(messages: AsyncIterator[bytes]) -> bytes | None:
    last = None
    async for message in messages:
        last = message
    return last
