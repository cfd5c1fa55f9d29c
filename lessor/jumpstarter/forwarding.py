"""A follower forwards Jumpstarter's gRPC calls to the leader, so that every replica behind the Service answers.

Only the leader's actors lease and only its router pairs `jmp shell`'s streams, yet the Service (and an
Ingress or Route in front of it) sends a connection to any replica. A follower therefore relays each call,
unary or streaming, to the address the leader advertises in the leader Lease (`lessor.dev/holder-grpc`) and
hands the leader's answer back unchanged: messages, status, details, initial and trailing metadata. It relays
bytes (no (de)serialiser), so it knows nothing of the methods, and the caller's metadata as is: the leader
authenticates the caller's own token, the follower adds no authority. A relayed call carries
`lessor-forwarded-by`, and a replica that gets one while not leading refuses it instead of relaying it again,
so two replicas with stale views of the Lease cannot bounce a call between them.

A leader that stops answering (it crashed, or lost its Lease) does not fail the follower's calls: a call is
held, up to `--grpc-leader-wait`, until the Lease names a leader whose channel connects, or this replica
leads (it then serves the call itself). Leadership is read from the Lease as the election last saw it, never
guessed from a slow answer. A call is sent again only when the leader cannot have acted on it: a refusal by
a replica that does not lead, or a stream with a single request (Listen, Status) that had delivered nothing
yet, which asking again merely re-subscribes. A stream that delivered messages ends UNAVAILABLE, which the
tools call again at once (a stream that delivered data is not counted among their failures), and that call
is held in turn.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
from cryptography import x509
from prometheus_client import CollectorRegistry, Counter

from lessor.tls.certs import CA_FILE, CERT_FILE
from lessor.leadership.election import Leadership
from lessor.model.labels import HOLDER_GRPC, HOLDER_POD

from .settings import GrpcSettings

log = logging.getLogger(__name__)

LEADER_METADATA = "lessor-leader"
"""Trailing metadata of a follower's UNAVAILABLE: the leader's HOST:PORT, for tools that can follow it."""

FORWARDED_BY = "lessor-forwarded-by"
"""Metadata of a relayed call: the identity of the replica that relayed it."""

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


Refuse = Callable[[grpc.aio.ServicerContext], Awaitable[None]]
"""Ends a call UNAVAILABLE naming the leader, as a follower that does not relay answers (it raises)."""

POLL = (0.05, 0.1)
"""Seconds between two looks at the election's view of the Lease while calls are held: a look reads memory."""
BACKOFF = (0.1, 2.0)
"""Base and cap of the jittered exponential backoff between two sends of a call a non-leader refused."""


@dataclass(frozen=True)
class LeaderView:
    """The leadership as the election last read the Lease: this replica leads, or the leader's address (None:
    nobody leads, or the Lease names this replica, which does not lead) and whether its channel is connected."""

    leading: bool
    address: str | None = None
    connected: bool = False


class ForwardToLeader(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """On a follower, relay every call to the leader, holding it (up to `wait` seconds) while no leader
    answers; refuse it (`refuse`) when it was relayed already, or no leader came within `wait`."""

    def __init__(self, leadership: Leadership, own_address: str, link: LeaderLink, refuse: Refuse,
                 registry: CollectorRegistry | None = None, *, wait: float = 0.0) -> None:
        self.leadership = leadership
        self.own_address = own_address
        self.link = link
        self.refuse = refuse
        self.wait = wait
        self._forwarded = Counter("lessor_grpc_forwarded_calls", "Jumpstarter gRPC calls a follower relayed to "
                                  "the leader, by method and the status they ended with", ["method", "code"],
                                  registry=registry)
        self._held_calls = Counter("lessor_grpc_held_calls", "Jumpstarter gRPC calls a follower held while no "
                                   "leader answered, by how the wait ended (relayed, served here, refused)",
                                   ["outcome"], registry=registry)
        self._holding = 0  # calls waiting for a leader
        self._changed: asyncio.Event | None = None  # set (and replaced) when the view changes
        self._poller: asyncio.Task[None] | None = None

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or self.leadership.leading():
            return handler
        if any(key == FORWARDED_BY for key, _ in details.invocation_metadata or ()):
            return _relaying(handler, lambda requests, context: self._refused(context))
        return _relaying(handler, lambda requests, context: self._relay(details.method, handler, requests, context))

    async def _refused(self, context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        await self.refuse(context)
        yield b""  # pragma: no cover - refuse raises

    def view(self) -> LeaderView:
        """The leadership now; a new address replaces the link's channel (ending the calls relayed through the
        old one) and starts connecting to it."""
        if self.leadership.leading():
            return LeaderView(True)
        address = self.leadership.leader_says(HOLDER_GRPC)
        if address is None or address == self.own_address:
            return LeaderView(False)
        state = self.link.channel(address).get_state(try_to_connect=True)
        return LeaderView(False, address, state == grpc.ChannelConnectivity.READY)

    async def _hold(self, until: float) -> LeaderView:
        """The view once this replica leads or the leader's channel is connected, else as it is at `until`."""
        loop = asyncio.get_running_loop()
        self._holding += 1
        try:
            while True:
                view = self.view()
                remaining = until - loop.time()
                if view.leading or view.connected or remaining <= 0:
                    return view
                if self._poller is None:
                    self._poller = asyncio.create_task(self._poll(), name="gRPC relay: leader view")
                if self._changed is None:
                    self._changed = asyncio.Event()
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(remaining):
                        await self._changed.wait()
        finally:
            self._holding -= 1

    async def _poll(self) -> None:
        """While calls are held: one look at the view per POLL for all of them, waking them when it changed."""
        last = None
        try:
            while self._holding:
                view = self.view()
                if view != last and self._changed is not None:
                    self._changed.set()
                    self._changed = asyncio.Event()
                last = view
                await asyncio.sleep(random.uniform(*POLL))
        finally:
            self._poller = None

    async def _relay(self, method: str, handler: grpc.RpcMethodHandler,
                     requests: AsyncIterable[bytes] | Iterable[bytes],
                     context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
        """The leader's answer to `requests`, relayed into `context`; its status (non-OK) by `context.abort`.
        Held while no leader answers; served by `handler` itself once this replica leads."""
        loop = asyncio.get_running_loop()
        until = loop.time() + self.wait
        replayable = not handler.request_streaming  # its single request can be sent again
        subscription = replayable and bool(handler.response_streaming)
        delivered = held = False
        attempt, code = 0, None  # None: never relayed
        try:
            while True:
                view = self.view()
                if not (view.leading or view.connected):
                    held = True
                    view = await self._hold(until)
                if view.leading:
                    if held:
                        self._held_calls.labels("served").inc()
                    async for message in _served(handler, requests, context):
                        yield message
                    return
                if view.address is None:
                    if held:
                        self._held_calls.labels("refused").inc()
                    await self.refuse(context)
                    return  # pragma: no cover - refuse raises
                if held:
                    self._held_calls.labels("relayed").inc()
                    held = False
                address = view.address
                channel = self.link.channel(address)
                metadata = [(key, value) for key, value in context.invocation_metadata() or ()
                            if key not in _NOT_RELAYED and not key.startswith((":", "grpc-"))]
                metadata.append((FORWARDED_BY, self.leadership.identity))
                log.debug("relaying %s to the leader at %s", method, address)
                call = channel.stream_stream(method)(requests, metadata=metadata, timeout=context.time_remaining())
                code = grpc.StatusCode.CANCELLED  # unless set below: closed by the server as the caller went away
                try:
                    initial = tuple(await call.initial_metadata() or ())  # the server's calls take tuples only
                    if initial:
                        await context.send_initial_metadata(initial)
                        delivered = True
                    async for message in call:
                        delivered = True
                        yield message
                    code = await call.code()
                    context.set_trailing_metadata(tuple(await call.trailing_metadata() or ()))
                    return
                except grpc.aio.AioRpcError as err:
                    code = err.code()
                    if not delivered and replayable and loop.time() < until and _unanswered(err, subscription):
                        attempt += 1
                        await asyncio.sleep(_backoff(attempt, until - loop.time()))
                        continue
                    await context.abort(code, self._details(err, address, channel),
                                        tuple(err.trailing_metadata() or ()))
                except asyncio.CancelledError:
                    task = asyncio.current_task()
                    if task is not None and task.cancelling():  # the caller went away
                        code = grpc.StatusCode.CANCELLED
                        raise
                    code = grpc.StatusCode.UNAVAILABLE  # the channel was closed under the call: the leader moved
                    if not delivered and subscription and loop.time() < until:
                        continue
                    await context.abort(code, f"the leader moved from {address} to {self.link.address}: call again")
                finally:
                    call.cancel()  # no effect once it ended; else the caller's cancellation reaches the leader
        finally:
            if code is not None:
                self._forwarded.labels(method, code.name).inc()
                log.debug("relayed %s: %s", method, code.name)

    def _details(self, err: grpc.aio.AioRpcError, address: str, channel: grpc.aio.Channel) -> str:
        """The leader's own details, or what kept its answer from arriving (it did not answer: the channel
        is not connected)."""
        details = err.details() or ""
        if err.code() != grpc.StatusCode.UNAVAILABLE or channel.get_state() == grpc.ChannelConnectivity.READY:
            return details
        pod = self.leadership.leader_says(HOLDER_POD)
        return (f"this lessor replica relays calls to the leader{f' (pod {pod})' if pod else ''} at {address}, "
                f"which did not answer: {details}")


def _unanswered(err: grpc.aio.AioRpcError, subscription: bool) -> bool:
    """Whether an UNAVAILABLE call may be sent again: a replica that does not lead refused it (it names the
    leader in `lessor-leader`), so none acted on it; or it subscribes (one request, a stream of answers)."""
    if err.code() != grpc.StatusCode.UNAVAILABLE:
        return False
    return subscription or any(key == LEADER_METADATA for key, _ in err.trailing_metadata() or ())


def _backoff(attempt: int, remaining: float) -> float:
    """Seconds before the `attempt`-th send again: exponential, jittered (so that held calls do not all come
    back at once), never past the wait."""
    base, cap = BACKOFF
    return max(0.0, min(remaining, min(cap, base * 2.0 ** (attempt - 1)) * random.uniform(0.5, 1.0)))


async def _served(handler: grpc.RpcMethodHandler, requests: AsyncIterable[bytes] | Iterable[bytes],
                  context: grpc.aio.ServicerContext) -> AsyncIterator[bytes]:
    """`handler` itself on the call's bytes, (de)serialised as the server would: this replica leads now."""
    decode: Callable[[bytes], Any] = handler.request_deserializer or (lambda raw: raw)
    encode: Callable[[Any], bytes] = handler.response_serializer or (lambda message: message)

    async def decoded() -> AsyncIterator[Any]:
        if isinstance(requests, AsyncIterable):
            async for raw in requests:
                yield decode(raw)
        else:
            for raw in requests:
                yield decode(raw)

    if handler.request_streaming:
        request: Any = decoded()
    else:
        request = decode(next(iter(requests)))  # type: ignore[arg-type]
    behaviour = handler.unary_unary or handler.unary_stream or handler.stream_unary or handler.stream_stream
    if handler.response_streaming:
        async for message in behaviour(request, context):
            yield encode(message)
    elif (answer := await behaviour(request, context)) is not None:
        yield encode(answer)


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
