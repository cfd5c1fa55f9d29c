"""Every call's guard: who is calling (`authenticate`), and every failure answered as a gRPC status with a
message the caller can act on (`guarded`), never a traceback.

A token lessor did not sign, or one for an object that no longer exists, is UNAUTHENTICATED; a token of the
wrong kind for the service (an exporter asking for a lease) or for another namespace is PERMISSION_DENIED.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

import grpc
from prometheus_client import CollectorRegistry, Counter

from lessor.actors.api import AlreadyExists, ApiFailure, NotFound
from lessor.leadership.election import NotLeader
from lessor.mailbox import AskTimeout, MailboxError
from lessor.model.kinds import CLIENT, EXPORTER
from lessor.model.views import Meta

from .backend import Backend, Object
from .oidc import unverified_issuer
from .tokens import ISSUER, KINDS, InvalidToken, Subject, verify

log = logging.getLogger(__name__)


class Refusal(Exception):
    """Answer the call with `code` and `message`."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


def _api_code(err: ApiFailure) -> grpc.StatusCode:
    if isinstance(err, NotFound):
        return grpc.StatusCode.NOT_FOUND
    if isinstance(err, AlreadyExists):
        return grpc.StatusCode.ALREADY_EXISTS
    # UNAVAILABLE only for what calling again can fix (the tools retry it without end): a request the API
    # server will never take (413: too large; 400, 422: invalid) is the caller's to change.
    return {400: grpc.StatusCode.INVALID_ARGUMENT, 413: grpc.StatusCode.INVALID_ARGUMENT,
            422: grpc.StatusCode.INVALID_ARGUMENT, 403: grpc.StatusCode.PERMISSION_DENIED,
            409: grpc.StatusCode.ABORTED, 429: grpc.StatusCode.RESOURCE_EXHAUSTED}.get(
                err.status, grpc.StatusCode.UNAVAILABLE)


def _refusal(err: BaseException, method: str) -> Refusal:
    """The status a failure is answered with: what the caller can act on, never a traceback."""
    match err:
        case Refusal():
            return err
        case NotLeader():
            return Refusal(grpc.StatusCode.UNAVAILABLE, f"this lessor replica cannot serve the call, {err}")
        case ApiFailure():
            return Refusal(_api_code(err), f"the Kubernetes API refused: {err}")
        case AskTimeout():
            return Refusal(grpc.StatusCode.UNAVAILABLE, "lessor's actors did not answer in time; try again")
        case MailboxError():
            return Refusal(grpc.StatusCode.UNAVAILABLE, f"lessor is busy: {err}")
    log.exception("jumpstarter %s failed", method, exc_info=err)
    return Refusal(grpc.StatusCode.INTERNAL, f"lessor failed on {method}: {type(err).__name__}: {err}")


async def _abort(context: grpc.aio.ServicerContext, err: BaseException, method: str) -> None:
    """End the call with the status `err` is answered with (`abort` raises)."""
    refusal = _refusal(err, method)
    log.debug("jumpstarter %s refused: %s %s", method, refusal.code.name, refusal.message)
    await context.abort(refusal.code, refusal.message)


R = TypeVar("R")
Handler = Callable[[Any, Any, grpc.aio.ServicerContext], Awaitable[R]]


def guarded(method: Handler[R]) -> Handler[R]:
    """A unary handler whose every failure is a status with a message."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> R:
        try:
            return await method(self, request, context)
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes a status
            await _abort(context, err, method.__name__)
            raise AssertionError("unreachable: abort raises") from None

    return wrapper


StreamHandler = Callable[[Any, Any, grpc.aio.ServicerContext], AsyncIterator[R]]


def guarded_stream(method: StreamHandler[R]) -> StreamHandler[R]:
    """A streaming handler whose every failure is a status with a message."""

    @functools.wraps(method)
    async def wrapper(self: Any, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[R]:
        try:
            async for item in method(self, request, context):
                yield item
        except asyncio.CancelledError:
            raise
        except Exception as err:  # noqa: BLE001 - every failure becomes a status
            await _abort(context, err, method.__name__)

    return wrapper


def _metadata(context: grpc.aio.ServicerContext) -> dict[str, str]:
    return {key.lower(): value for key, value in context.invocation_metadata() or ()
            if isinstance(value, str)}


async def authenticate(backend: Backend, context: grpc.aio.ServicerContext, kind: str) -> Subject:
    """The caller, if its bearer token is lessor's and names a live object of `kind` ("client", "exporter")."""
    metadata = _metadata(context)
    scheme, _, token = metadata.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or not token:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      "no bearer token: send the metadata 'authorization: Bearer <token>' "
                      "(lessor credentials client|exporter NAME writes a config with it)")
    if backend.issuers is not None and backend.issuers.handles(unverified_issuer(token)):
        return await _oidc_subject(backend, metadata, token, kind)
    key = await backend.signing_key.get()
    if key is None:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED, "lessor has issued no token yet, so this one is not lessor's")
    try:
        subject = verify(key.public_key(), token)
    except InvalidToken as err:
        fresh = await backend.signing_key.get(refresh=True)  # the key may have been rotated since it was read
        if fresh is None or fresh is key:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, _not_lessors(backend, token, err)) from None
        try:
            subject = verify(fresh.public_key(), token)
        except InvalidToken as again:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, _not_lessors(backend, token, again)) from None
    said = (metadata.get("jumpstarter-kind", KINDS[subject.kind]), metadata.get("jumpstarter-namespace",
            subject.namespace), metadata.get("jumpstarter-name", subject.name))
    if said != (KINDS[subject.kind], subject.namespace, subject.name):
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      f"the token is for {KINDS[subject.kind]} {subject.namespace}/{subject.name}, but the call says "
                      f"{said[0]} {said[1]}/{said[2]} (jumpstarter-kind, -namespace, -name)")
    of = CLIENT if subject.kind == "client" else EXPORTER
    # The informers' copy (no request per call), else the API (an object created a moment ago).
    obj = backend.cached_one(of.kind, subject.namespace, subject.name) or \
        await backend.api.get(of, subject.namespace, subject.name)
    if obj is None or Meta.of(obj).uid != subject.uid:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      f"the token's {KINDS[subject.kind]} {subject.namespace}/{subject.name} no longer exists "
                      "(the token was made for an object since deleted)")
    if subject.kind != kind:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      "an exporter's token cannot lease: this service is for clients" if kind == "client" else
                      "a client's token cannot act as an exporter: this service is for exporters")
    return subject


def _not_lessors(backend: Backend, token: str, err: InvalidToken) -> str:
    """Why a token lessor did not sign is refused: where OIDC issuers are configured, the issuer it names."""
    iss = unverified_issuer(token)
    if backend.issuers is None or iss is None or iss == ISSUER:
        return str(err)
    trusted = ", ".join(a.issuer for a in backend.issuers.config.jwt) or "none"
    return f"{err}, and its issuer {iss!r} is not one lessor trusts (configured OIDC issuers: {trusted})"


async def _oidc_subject(backend: Backend, metadata: Mapping[str, str], token: str, kind: str) -> Subject:
    """The Client or Exporter that the call names (metadata jumpstarter-namespace and -name), if the token is
    valid for a configured issuer and its mapped username is that object's `spec.username`, as upstream."""
    assert backend.issuers is not None
    try:
        username = await backend.issuers.username(token)
    except InvalidToken as err:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(err)) from None
    said_kind = metadata.get("jumpstarter-kind", KINDS[kind])
    namespace, name = metadata.get("jumpstarter-namespace"), metadata.get("jumpstarter-name")
    subject_kind = next((k for k, v in KINDS.items() if v == said_kind), None)
    if subject_kind is None or not namespace or not name:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      f"an OIDC token ({username}) says no object: the call needs the metadata jumpstarter-kind, "
                      "jumpstarter-namespace and jumpstarter-name of the Client or Exporter it acts as")
    of = CLIENT if subject_kind == "client" else EXPORTER
    obj = backend.cached_one(of.kind, namespace, name) or await backend.api.get(of, namespace, name)
    if obj is None and subject_kind == "client" and backend.issuers.config.provisioning:
        obj = await _provision(backend, namespace, name, username)
    if obj is None:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      f"{said_kind} {namespace}/{name} does not exist (the OIDC user is {username})")
    spec = obj.get("spec") or {}
    if spec.get("username") != username:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED,
                      f"the OIDC user {username} is not {said_kind} {namespace}/{name}'s spec.username "
                      f"({spec.get('username')!r})")
    if subject_kind != kind:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      "an exporter's token cannot lease: this service is for clients" if kind == "client" else
                      "a client's token cannot act as an exporter: this service is for exporters")
    return Subject(subject_kind, namespace, name, Meta.of(obj).uid)


async def _provision(backend: Backend, namespace: str, name: str, username: str) -> Object:
    """The Client made on a first OIDC login with `provisioning.enabled`, as upstream: the name the call
    says, `spec.username` the token's user (a Client made meanwhile by another call is read instead)."""
    log.info("provisioning Client %s/%s for OIDC user %s", namespace, name, username)
    try:
        return await backend.api.create(CLIENT, namespace, {
            "apiVersion": CLIENT.api_version, "kind": CLIENT.kind, "metadata": {"name": name, "namespace": namespace},
            "spec": {"username": username}})
    except AlreadyExists:
        made = await backend.api.get(CLIENT, namespace, name)
        if made is None:
            raise
        return made


def invalid(message: str) -> Refusal:
    return Refusal(grpc.StatusCode.INVALID_ARGUMENT, message)


def in_namespace(subject: Subject, namespace: str, what: str) -> None:
    if namespace != subject.namespace:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      f"{KINDS[subject.kind]} {subject.namespace}/{subject.name} may not use {what} in namespace "
                      f"{namespace}")


# --- bodies that do not decode -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Undecodable:
    """In a request's place: its bytes did not decode as the method's message (why, in words)."""

    message: str


class CallGuard(grpc.aio.ServerInterceptor):  # type: ignore[misc]
    """Every call, before and after its work. A request body that does not decode is INVALID_ARGUMENT, naming
    the method and the message type, before any work (authentication included): gRPC's own deserializer
    failing was UNKNOWN and a traceback in the log per call, for anyone who could connect. Every call that
    ends with another status than OK is counted, by method and code (`lessor_grpc_refused_calls_total`),
    and logged at debug only: a refusal is the caller's to read, and a flood of them cannot fill the log.
    The first interceptor, so that it wraps every other's handler, a follower's relaying ones too."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self._refused = Counter("lessor_grpc_refused_calls", "Jumpstarter gRPC calls that ended with another "
                                "status than OK, by method and code", ["method", "code"], registry=registry)

    async def intercept_service(self, continuation: Any, details: grpc.HandlerCallDetails) -> Any:
        handler = await continuation(details)
        if handler is None or handler.request_deserializer is None:
            return handler
        return _guarding(handler, details.method, self._count)

    def _count(self, method: str, context: grpc.aio.ServicerContext) -> None:
        code = context.code()
        if code is not None and code != grpc.StatusCode.OK and isinstance(code, grpc.StatusCode):
            self._refused.labels(method, code.name).inc()


def _guarding(handler: grpc.RpcMethodHandler, method: str,
              count: Callable[[str, grpc.aio.ServicerContext], None]) -> grpc.RpcMethodHandler:
    """`handler` with a deserializer that never raises (an `Undecodable` in the request's place, refused
    before the work) and its end counted."""
    deserialize = handler.request_deserializer
    of = getattr(getattr(deserialize, "__self__", None), "DESCRIPTOR", None)
    what = getattr(of, "full_name", "the method's request message")

    def safely(data: bytes) -> Any:
        try:
            return deserialize(data)
        except Exception as err:  # noqa: BLE001 - any failure to decode is the caller's
            return Undecodable(f"{method}: the request ({len(data)} bytes) is not a {what}: "
                               f"{type(err).__name__}: {str(err)[:200]}")

    async def checked(requests: AsyncIterator[Any]) -> AsyncIterator[Any]:
        async for request in requests:
            if isinstance(request, Undecodable):
                raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, request.message)
            yield request

    def arguments(request: Any) -> Any:
        if handler.request_streaming:
            return checked(request)
        if isinstance(request, Undecodable):
            raise Refusal(grpc.StatusCode.INVALID_ARGUMENT, request.message)
        return request

    async def refuse(context: grpc.aio.ServicerContext, refusal: Refusal) -> None:
        log.debug("jumpstarter %s refused: %s %s", method, refusal.code.name, refusal.message)
        await context.abort(refusal.code, refusal.message)

    shape = (bool(handler.request_streaming), bool(handler.response_streaming))
    inner = {(False, False): handler.unary_unary, (False, True): handler.unary_stream,
             (True, False): handler.stream_unary, (True, True): handler.stream_stream}[shape]
    # The same kind of callable as the one wrapped: grpc.aio refuses `context.write` (the router's) inside an
    # async generator, and a generator's responses must be yielded.
    if inspect.isasyncgenfunction(inner):
        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
            try:
                async for response in inner(arguments(request), context):
                    yield response
            except Refusal as refusal:
                await refuse(context, refusal)
            finally:
                count(method, context)
        behaviour: Any = streaming
    else:
        async def answering(request: Any, context: grpc.aio.ServicerContext) -> Any:
            try:
                return await inner(arguments(request), context)
            except Refusal as refusal:
                await refuse(context, refusal)
            finally:
                count(method, context)
        behaviour = answering
    make = {(False, False): grpc.unary_unary_rpc_method_handler, (False, True): grpc.unary_stream_rpc_method_handler,
            (True, False): grpc.stream_unary_rpc_method_handler, (True, True): grpc.stream_stream_rpc_method_handler}
    return make[shape](behaviour, request_deserializer=safely, response_serializer=handler.response_serializer)
