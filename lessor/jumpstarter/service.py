"""Jumpstarter's `ControllerService` (for exporters) and `ClientService` (for clients) on lessor's actors.

Every call first authenticates its bearer token (`authenticate`): a token lessor did not sign, or one for an
object that no longer exists, is UNAUTHENTICATED; a token of the wrong kind for the service (an exporter
asking for a lease) or for another client's lease is PERMISSION_DENIED. Every failure is a gRPC status with
a message (`_guarded`), never a traceback.

What an exporter's agent reports becomes an `AgentReport` asked of its exporter actor, which writes it
(actors/leasing/agent.py). A client's lease calls are the Lease objects it would write by hand: CreateLease
creates one, DeleteLease sets `spec.release` (as the controller lessor replaces does), and the lease and
exporter actors decide the rest as for any Lease. Reads come from the operator's informer caches.

A client's `Dial` reaches its exporter through the router (router.py), announced on the exporter's `Listen`.

The controller's older lease calls (GetLease, RequestLease, ListLeases) are the ClientService calls' own
lookup, creation and listing, answered in the older messages. Not served (UNIMPLEMENTED, as by the
controller of 0.9.0): AuditStream.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, TypeVar

import grpc
from google.protobuf import empty_pb2
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc, kubernetes_pb2

from lessor.actors.api import AlreadyExists, Api, ApiFailure, NotFound
from lessor.actors.leasing.agent import AgentReport
from lessor.actors.leasing.credentials import RotateCredential
from lessor.actors.leasing.spec import format_go_duration, parse_go_duration
from lessor.leader import NotLeader
from lessor.mailbox import AskTimeout, MailboxError
from lessor.model.fields import timestamp
from lessor.model.kinds import API_VERSION, CLIENT, EXPORTER, LEASE
from lessor.model.selectors import SelectorError, format_selector, parse_selector
from lessor.model.times import format_time
from lessor.model.views import Meta
from lessor.model.views.leasing import ExporterView, LeaseView
from lessor.model.views.meta import strings

from .router import Router
from .names import parse_parent, parse_resource, resource, selector_from_text
from .tokens import KINDS, InvalidToken, SigningKey, Subject, token_expiry, verify

log = logging.getLogger(__name__)

Object = Mapping[str, Any]

# status.exporterStatus ↔ the protocol's enum (the names the lease controller writes).
_STATUS_NAMES = {
    "EXPORTER_STATUS_UNSPECIFIED": "Unspecified",
    "EXPORTER_STATUS_OFFLINE": "Offline",
    "EXPORTER_STATUS_AVAILABLE": "Available",
    "EXPORTER_STATUS_BEFORE_LEASE_HOOK": "BeforeLeaseHook",
    "EXPORTER_STATUS_LEASE_READY": "LeaseReady",
    "EXPORTER_STATUS_AFTER_LEASE_HOOK": "AfterLeaseHook",
    "EXPORTER_STATUS_BEFORE_LEASE_HOOK_FAILED": "BeforeLeaseHookFailed",
    "EXPORTER_STATUS_AFTER_LEASE_HOOK_FAILED": "AfterLeaseHookFailed",
}
_NEVER = datetime.min.replace(tzinfo=UTC)
_STATUS_VALUES = {text: common_pb2.ExporterStatus.Value(enum) for enum, text in _STATUS_NAMES.items()}


class Backend(Protocol):
    """What the operator gives the services (lessor/jumpstarter/server.py builds it)."""

    api: Api
    signing_key: SigningKey
    heartbeat_timeout: timedelta

    async def ask(self, address: str, message: Any) -> Any:
        """Ask an actor of the leader's system; NotLeader on a follower."""
        ...

    def cached(self, kind: str, namespace: str) -> list[Object]:
        """The informers' objects of `kind` in `namespace`."""
        ...

    def cached_one(self, kind: str, namespace: str, name: str) -> Object | None:
        """The informers' object, or None."""
        ...

    def now(self) -> datetime: ...


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
    return {400: grpc.StatusCode.INVALID_ARGUMENT, 422: grpc.StatusCode.INVALID_ARGUMENT,
            403: grpc.StatusCode.PERMISSION_DENIED, 409: grpc.StatusCode.ABORTED,
            429: grpc.StatusCode.RESOURCE_EXHAUSTED}.get(err.status, grpc.StatusCode.UNAVAILABLE)


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


def _guarded(method: Handler[R]) -> Handler[R]:
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


def _guarded_stream(method: StreamHandler[R]) -> StreamHandler[R]:
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


# --- authentication ----------------------------------------------------------------------------


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
    key = await backend.signing_key.get()
    if key is None:
        raise Refusal(grpc.StatusCode.UNAUTHENTICATED, "lessor has issued no token yet, so this one is not lessor's")
    try:
        subject = verify(key.public_key(), token)
    except InvalidToken as err:
        fresh = await backend.signing_key.get(refresh=True)  # the key may have been rotated since it was read
        if fresh is None or fresh is key:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(err)) from None
        try:
            subject = verify(fresh.public_key(), token)
        except InvalidToken as again:
            raise Refusal(grpc.StatusCode.UNAUTHENTICATED, str(again)) from None
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


def _invalid(message: str) -> Refusal:
    return Refusal(grpc.StatusCode.INVALID_ARGUMENT, message)


def _in_namespace(subject: Subject, namespace: str, what: str) -> None:
    if namespace != subject.namespace:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      f"{KINDS[subject.kind]} {subject.namespace}/{subject.name} may not use {what} in namespace "
                      f"{namespace}")


# --- exporters ----------------------------------------------------------------------------------


class ControllerService(jumpstarter_pb2_grpc.ControllerServiceServicer):
    """The exporter's half of `jumpstarter.v1.ControllerService`."""

    def __init__(self, backend: Backend, router: Router) -> None:
        self.backend = backend
        self.router = router
        self._beats: dict[tuple[str, str], float] = {}  # exporter → loop time of its last heartbeat write

    async def _beat(self, subject: Subject) -> None:
        """A heartbeat, unless another of the exporter's streams wrote one less than half a period ago
        (an agent keeps Listen and Status open at once: one write per period, not two)."""
        now = asyncio.get_running_loop().time()
        key = (subject.namespace, subject.name)
        if now - self._beats.get(key, -1e9) < self._period() / 2:
            return
        self._beats[key] = now
        await self._report(subject, AgentReport())

    async def _report(self, subject: Subject, report: AgentReport) -> None:
        written = await self.backend.ask(f"{EXPORTER.prefix}/{subject.namespace}/{subject.name}", report)
        if written is False:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"Exporter {subject.namespace}/{subject.name} is gone")

    def _period(self) -> float:
        """How often an open stream refreshes `lastSeen`: three times per heartbeat timeout."""
        return max(self.backend.heartbeat_timeout.total_seconds() / 3, 0.05)

    @_guarded
    async def Register(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "exporter")
        devices = []
        for report in request.reports:
            device: dict[str, Any] = {"uuid": report.uuid, "labels": dict(report.labels)}
            if report.HasField("parent_uuid"):
                device["parent_uuid"] = report.parent_uuid
            devices.append(device)
        await self._report(subject, AgentReport(devices=tuple(devices)))
        return jumpstarter_pb2.RegisterResponse(uuid=subject.uid)

    @_guarded
    async def Unregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "exporter")
        await self._report(subject, AgentReport(devices=(), exporter_status="Offline",
                                                message=f"unregistered: {request.reason}" if request.reason else
                                                "unregistered"))
        return jumpstarter_pb2.UnregisterResponse()

    @_guarded
    async def ReportStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "exporter")
        status = _STATUS_NAMES.get(common_pb2.ExporterStatus.Name(request.status), "Unspecified")
        await self._report(subject, AgentReport(exporter_status=status, message=request.message))
        if request.release_lease:  # the older way to end the held lease (ReleaseLease is the newer)
            held = self._held(subject)
            lease = LeaseView.maybe(await self.backend.api.get(LEASE, subject.namespace, held) if held else None)
            if lease is not None and lease.exporter == subject.name:
                await release(self.backend.api, lease)
        return jumpstarter_pb2.ReportStatusResponse()

    @_guarded_stream
    async def Status(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """Who holds the exporter, at once and at every change; `lastSeen` kept fresh while it is open.

        A lease that follows another at once (a waiting lease granted as the holder's ends) is told as
        "not leased", then the new one: the agent ends a lease (its afterLease hook, its Listen) only on
        "not leased", and starts the next only after that; without it, it would keep serving the ended
        lease and never listen for the new one."""
        subject = await authenticate(self.backend, context, "exporter")
        last: Any = None
        beat = 0.0
        loop = asyncio.get_running_loop()
        while True:
            if loop.time() >= beat:
                await self._beat(subject)
                beat = loop.time() + self._period()
            current = self._holder(subject)
            if current != last:
                if last is not None and last.leased and current.leased and current.lease_name != last.lease_name:
                    yield jumpstarter_pb2.StatusResponse(leased=False)
                last = current
                yield current
            await asyncio.sleep(min(0.5, self._period()))

    def _held(self, subject: Subject) -> str | None:
        """The lease the calling exporter is held by, in the informers' copy."""
        exporter = ExporterView.maybe(self.backend.cached_one(EXPORTER.kind, subject.namespace, subject.name))
        return exporter.held_by if exporter is not None else None

    def _holder(self, subject: Subject) -> Any:
        lease = self._held(subject)
        if lease is None:
            return jumpstarter_pb2.StatusResponse(leased=False)
        obj = LeaseView.maybe(self.backend.cached_one(LEASE.kind, subject.namespace, lease))
        client = (obj.client if obj is not None else None) or ""
        return jumpstarter_pb2.StatusResponse(leased=True, lease_name=lease, client_name=client)

    @_guarded_stream
    async def Listen(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """The router endpoint and token of every Dial to this exporter, while it holds `lease_name`;
        `lastSeen` kept fresh. Ends when the lease ends or moves (the exporter then stops serving it)."""
        subject = await authenticate(self.backend, context, "exporter")
        async with self.router.listen(subject.namespace, subject.name) as dials:
            while True:
                await self._beat(subject)
                held = self._held(subject)
                if request.lease_name and held != request.lease_name:
                    return
                try:  # asyncio.timeout, not wait_for, which can swallow a cancellation in 3.11
                    async with asyncio.timeout(1.0):
                        dial = await dials.get()
                except TimeoutError:
                    continue
                yield dial

    @_guarded
    async def Dial(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A client's connection to the exporter of its Ready lease, through the router (router.py)."""
        subject = await authenticate(self.backend, context, "client")
        namespace, name = _lease_ref(subject, request.lease_name)
        lease = await own_lease(self.backend, subject, namespace, name)
        exporter = lease.exporter
        if lease.ended or exporter is None or not lease.ready:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"lease {namespace}/{name} is not ready: {_ready_reason(lease)}")
        if not self.router.listening(namespace, exporter):
            raise Refusal(grpc.StatusCode.UNAVAILABLE,
                          f"exporter {namespace}/{exporter} is not listening for lease {name} (is its agent connected?)")

        def alive() -> bool:
            current = LeaseView.maybe(self.backend.cached_one(LEASE.kind, namespace, name))
            return current is not None and _active(current) and current.exporter == exporter

        return self.router.dial(namespace, name, exporter, alive)

    @_guarded
    async def AuditStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        """Not served by the controller of 0.9.0 either (its stub answers UNIMPLEMENTED); the 0.9 agent does
        not call it."""
        await authenticate(self.backend, context, "exporter")
        raise Refusal(grpc.StatusCode.UNIMPLEMENTED,
                      "AuditStream is not served (nor by the Jumpstarter controller of protocol 0.9.0)")

    @_guarded
    async def GetLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own lease, by its name (or `namespaces/NS/leases/NAME`), in the controller's older
        message: the spec's selector and duration, the granted exporter's uid, the times, the conditions."""
        subject = await authenticate(self.backend, context, "client")
        namespace, name = _lease_ref(subject, request.name)
        lease = await own_lease(self.backend, subject, namespace, name)
        exporter = None
        if (holder := lease.exporter) is not None:
            exporter = self.backend.cached_one(EXPORTER.kind, namespace, holder) or \
                await self.backend.api.get(EXPORTER, namespace, holder)
        return controller_lease_message(lease, Meta.of(exporter).uid if exporter is not None else None)

    @_guarded
    async def RequestLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A new lease for the caller, made as CreateLease makes one, from a structured selector and a
        duration; answered with its name (in the caller's namespace)."""
        subject = await authenticate(self.backend, context, "client")
        spec: dict[str, Any] = {}
        if request.HasField("selector") and (selector := _selector_of(request.selector, "selector")):
            spec["selector"] = selector
        if request.HasField("duration"):
            spec["duration"] = format_go_duration(request.duration.ToTimedelta())
        lease = await create_lease(self.backend, subject, subject.namespace, "", spec)
        return jumpstarter_pb2.RequestLeaseResponse(name=lease.name)

    @_guarded
    async def ReleaseLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """An exporter ends the lease it holds once its afterLease hook has run (or a client its own lease)."""
        try:
            subject = await authenticate(self.backend, context, "exporter")
        except Refusal as refusal:
            if refusal.code != grpc.StatusCode.PERMISSION_DENIED:
                raise
            subject = await authenticate(self.backend, context, "client")
        namespace, name = _lease_ref(subject, request.name)
        _in_namespace(subject, namespace, "leases")  # another namespace's lease is refused, not read as our own
        lease = LeaseView.maybe(await self.backend.api.get(LEASE, namespace, name))
        if lease is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"lease {namespace}/{name} does not exist")
        holder = lease.exporter if subject.kind == "exporter" else lease.client
        if holder != subject.name:
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"lease {namespace}/{name} is not held by {subject.kind} {subject.name}")
        await release(self.backend.api, lease)
        return jumpstarter_pb2.ReleaseLeaseResponse()

    @_guarded
    async def ListLeases(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The names of the caller's active leases (as ClientService's `only_active`)."""
        subject = await authenticate(self.backend, context, "client")
        leases = own_leases(self.backend, subject, subject.namespace, only_active=True)
        return jumpstarter_pb2.ListLeasesResponse(names=[lease.name for lease in leases])


async def release(api: Api, lease: LeaseView) -> None:
    """End a lease as DeleteLease does: `spec.release`, which its actor turns into its end (Released)."""
    if _active(lease):
        await api.merge_patch(LEASE, lease.namespace, lease.name, {"spec": {"release": True}})


# --- clients ------------------------------------------------------------------------------------


def _time(value: Any) -> Any:
    when = timestamp(value)
    if when is None:
        return None
    stamp = kubernetes_pb2.Time()
    stamp.seconds = int(when.timestamp())
    return stamp


def _conditions(lease: LeaseView) -> list[Any]:
    found = []
    for condition in lease.conditions:
        message = kubernetes_pb2.Condition(type=condition.type, status=condition.status,
                                           reason=condition.reason, message=condition.message)
        if condition.observed_generation is not None:
            message.observedGeneration = condition.observed_generation
        if (when := _time(condition.last_transition)) is not None:
            message.lastTransitionTime.CopyFrom(when)
        found.append(message)
    return found


def _timestamp_pb(field: Any, when: datetime | None) -> None:
    if when is not None:
        field.FromDatetime(when.astimezone(UTC).replace(tzinfo=None))


def _requested_duration(lease: LeaseView) -> timedelta | None:
    """`spec.duration`, or None when absent or unreadable (the lease then shows itself Invalid; the CLI shows
    no duration)."""
    if not lease.duration_text:
        return None
    try:
        return parse_go_duration(lease.duration_text, "spec.duration")
    except ValueError:
        return None


def lease_message(lease: LeaseView) -> Any:
    """A Lease as the CLI reads it (`jumpstarter.client.v1.Lease`)."""
    namespace = lease.namespace
    message = client_pb2.Lease(
        name=resource(namespace, "leases", lease.name),
        selector=format_selector(lease.selector) if lease.selector else "",
        client=resource(namespace, "clients", lease.client or ""),
        exporter_name=lease.requested_exporter or "",
        allow_disabled=lease.allow_disabled,
        conditions=_conditions(lease),
    )
    if (holder := lease.exporter) is not None:
        message.exporter = resource(namespace, "exporters", holder)
    for key, value in lease.tags.items():
        message.tags[key] = value
    if (duration := _requested_duration(lease)) is not None:
        message.duration.FromTimedelta(duration)
    _timestamp_pb(message.begin_time, lease.begin_requested)
    _timestamp_pb(message.end_time, lease.end_requested)
    begin, end = lease.begin, lease.end
    _timestamp_pb(message.effective_begin_time, begin)
    if lease.ended:
        _timestamp_pb(message.effective_end_time, end)
    if begin is not None and end is not None:
        message.effective_duration.FromTimedelta(end - begin)
    return message


def _selector_message(raw: Any) -> Any:
    """`spec.selector` as the controller's `LabelSelector` message (empty when absent or unreadable)."""
    message = kubernetes_pb2.LabelSelector()
    if not isinstance(raw, Mapping):
        return message
    for key, value in strings(raw.get("matchLabels")).items():
        message.match_labels[key] = value
    for expression in raw.get("matchExpressions") or ():
        if isinstance(expression, Mapping):
            message.match_expressions.add(key=str(expression.get("key", "")),
                                          operator=str(expression.get("operator", "")),
                                          values=[str(v) for v in expression.get("values") or ()])
    return message


def _selector_of(message: Any, field: str) -> dict[str, Any]:
    """A `LabelSelector` message as `spec.selector` ({} when it selects nothing); INVALID_ARGUMENT naming
    `field` when lessor's selector rules refuse it."""
    selector: dict[str, Any] = {}
    if message.match_labels:
        selector["matchLabels"] = dict(message.match_labels)
    if message.match_expressions:
        selector["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in message.match_expressions]
    try:
        parse_selector(selector, field)
    except SelectorError as err:
        raise _invalid(str(err)) from None
    return selector


def controller_lease_message(lease: LeaseView, exporter_uid: str | None) -> Any:
    """A Lease as ControllerService's older `GetLease` answers it, from the fields `lease_message` reads:
    begin and end are the lease's own (the end once it has ended), `exporter_uuid` its exporter's uid."""
    message = jumpstarter_pb2.GetLeaseResponse(selector=_selector_message(lease.selector),
                                               conditions=_conditions(lease))
    if (duration := _requested_duration(lease)) is not None:
        message.duration.FromTimedelta(duration)
    _timestamp_pb(message.begin_time, lease.begin)
    if lease.ended:
        _timestamp_pb(message.end_time, lease.end)
    if exporter_uid is not None:
        message.exporter_uuid = exporter_uid
    return message


def _ready_reason(lease: LeaseView) -> str:
    if (ready := lease.condition("Ready")) is not None:
        return f"{ready.reason}: {ready.message}"
    return "not granted yet"


async def own_lease(backend: Backend, subject: Subject, namespace: str, name: str) -> LeaseView:
    """The caller's own lease NAMESPACE/NAME: NOT_FOUND, or PERMISSION_DENIED for another client's."""
    _in_namespace(subject, namespace, "leases")
    lease = LeaseView.maybe(await backend.api.get(LEASE, namespace, name))
    if lease is None:
        raise Refusal(grpc.StatusCode.NOT_FOUND, f"lease {namespace}/{name} does not exist")
    if lease.client != subject.name:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      f"lease {namespace}/{name} belongs to client {lease.client}, not to {subject.name}")
    return lease


def _lease_ref(subject: Subject, text: str) -> tuple[str, str]:
    """(namespace, name) of a lease the controller's older calls name: `namespaces/NS/leases/NAME`, or a bare
    NAME in the caller's namespace (as the controller reads it)."""
    if "/" not in text:
        if not text:
            raise _invalid("name: a lease name is required")
        return subject.namespace, text
    try:
        return parse_resource(text, "leases")
    except ValueError as err:
        raise _invalid(str(err)) from None


def own_leases(backend: Backend, subject: Subject, namespace: str, *, only_active: bool,
               labels: Callable[[Mapping[str, str] | None], bool] = lambda _: True,
               tags: Callable[[Mapping[str, str] | None], bool] = lambda _: True) -> list[LeaseView]:
    """The caller's own leases of `namespace` in the informers' copy, oldest first, for ClientService's and
    ControllerService's ListLeases alike."""
    _in_namespace(subject, namespace, "leases")
    leases = [
        lease for lease in map(LeaseView.of, backend.cached(LEASE.kind, namespace))
        if lease.client == subject.name
        and (_active(lease) or not only_active)
        and labels(lease.meta.labels) and tags(lease.tags)
    ]
    leases.sort(key=lambda lease: (lease.meta.created or _NEVER, lease.name))
    return leases


async def create_lease(backend: Backend, subject: Subject, namespace: str, name: str,
                       spec: Mapping[str, Any]) -> LeaseView:
    """A new Lease of the caller's (`spec.clientRef`), named `name` or a fresh UUID, as it would write it by
    hand: for ClientService's CreateLease and ControllerService's RequestLease alike."""
    _in_namespace(subject, namespace, "leases")
    body = {"apiVersion": API_VERSION, "kind": LEASE.kind,
            "metadata": {"name": name or str(uuid.uuid4()), "namespace": namespace},
            "spec": {"clientRef": {"name": subject.name}, **spec}}
    return LeaseView.of(await backend.api.create(LEASE, namespace, body))


def _active(lease: LeaseView) -> bool:
    """Not ended, and not released (the actor writes its end a moment after DeleteLease sets spec.release)."""
    return not lease.ended and not lease.release


def _selector_filter(text: str, field: str) -> Callable[[Mapping[str, str] | None], bool]:
    if not text:
        return lambda _: True
    try:
        selector = parse_selector(selector_from_text(text), field)
    except (ValueError, SelectorError) as err:
        raise _invalid(f"{field}: {err}") from None
    return selector.matches


def _lease_spec(lease: Any) -> dict[str, Any]:
    """The spec a CreateLease asks for (but its client), field by field as the CRD has them."""
    spec: dict[str, Any] = {}
    if lease.selector:
        try:
            spec["selector"] = selector_from_text(lease.selector)
        except ValueError as err:
            raise _invalid(f"lease.selector: {err}") from None
    if lease.exporter_name:
        spec["exporterRef"] = {"name": lease.exporter_name}
    if lease.HasField("duration"):
        spec["duration"] = format_go_duration(lease.duration.ToTimedelta())
    if lease.HasField("begin_time"):
        spec["beginTime"] = format_time(lease.begin_time.ToDatetime(tzinfo=UTC))
    if lease.HasField("end_time"):
        spec["endTime"] = format_time(lease.end_time.ToDatetime(tzinfo=UTC))
    if lease.tags:
        spec["tags"] = dict(lease.tags)
    if lease.allow_disabled:
        spec["allowDisabled"] = True
    return spec


def _time_update(obj: LeaseView, lease: Any) -> dict[str, Any]:
    """The spec's times after an UpdateLease that gives any of `begin_time`, `duration`, `end_time` (else {}),
    reconciled as the controller does: begin and end give the duration (a different one given too is refused),
    end and duration give the begin; the duration must then be known and positive."""
    if not any(lease.HasField(field) for field in ("begin_time", "duration", "end_time")):
        return {}
    spec = obj.spec
    begin, end = timestamp(spec.get("beginTime")), timestamp(spec.get("endTime"))
    try:
        duration = parse_go_duration(spec["duration"], "spec.duration") if spec.get("duration") else None
    except ValueError:
        duration = None
    if lease.HasField("begin_time"):
        wanted = lease.begin_time.ToDatetime(tzinfo=UTC)
        if obj.exporter is not None and wanted != begin:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"cannot update begin_time: lease {obj.namespace}/{obj.name} has already started")
        begin = wanted
    if lease.HasField("duration"):
        duration = lease.duration.ToTimedelta()
    if lease.HasField("end_time"):
        end = lease.end_time.ToDatetime(tzinfo=UTC)
    if begin is not None and end is not None:
        if duration is not None and duration > timedelta(0) and duration != end - begin:
            raise _invalid("duration conflicts with begin_time and end_time")
        duration = end - begin
    elif end is not None and duration is not None and duration > timedelta(0):
        begin = end - duration
    if duration is None:
        raise _invalid("duration is required (give duration, or both begin_time and end_time)")
    if duration <= timedelta(0):
        raise _invalid(f"duration must be positive, got {format_go_duration(duration)}")
    return {"duration": format_go_duration(duration),
            "beginTime": format_time(begin) if begin is not None else None,
            "endTime": format_time(end) if end is not None else None}


class ClientService(client_pb2_grpc.ClientServiceServicer):
    """`jumpstarter.client.v1.ClientService`: a client's exporters and leases."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def _exporter_message(self, exporter: ExporterView) -> Any:
        return client_pb2.Exporter(
            name=resource(exporter.namespace, "exporters", exporter.name),
            labels=dict(exporter.meta.labels),
            online=exporter.online(self.backend.now(), self.backend.heartbeat_timeout),
            status=_STATUS_VALUES.get(exporter.agent_status or "Unspecified", 0),
            status_message=exporter.status_message,
            enabled=exporter.enabled,
        )

    async def _lease(self, subject: Subject, name: str) -> LeaseView:
        """The client's own lease named `namespaces/NS/leases/NAME`."""
        try:
            namespace, lease = parse_resource(name, "leases")
        except ValueError as err:
            raise _invalid(str(err)) from None
        return await own_lease(self.backend, subject, namespace, lease)

    def _namespace(self, subject: Subject, parent: str, what: str) -> str:
        try:
            namespace = parse_parent(parent)
        except ValueError as err:
            raise _invalid(str(err)) from None
        _in_namespace(subject, namespace, what)
        return namespace

    @_guarded
    async def GetExporter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        try:
            namespace, name = parse_resource(request.name, "exporters")
        except ValueError as err:
            raise _invalid(str(err)) from None
        _in_namespace(subject, namespace, "exporters")
        exporter = ExporterView.maybe(await self.backend.api.get(EXPORTER, namespace, name))
        if exporter is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"exporter {namespace}/{name} does not exist")
        return self._exporter_message(exporter)

    @_guarded
    async def ListExporters(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "exporters")
        wanted = _selector_filter(request.filter, "filter")
        exporters = sorted((ExporterView.of(o) for o in self.backend.cached(EXPORTER.kind, namespace)),
                           key=lambda e: e.name)
        return client_pb2.ListExportersResponse(
            exporters=[self._exporter_message(e) for e in exporters if wanted(e.meta.labels)])

    @_guarded
    async def GetLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        return lease_message(await self._lease(subject, request.name))

    @_guarded
    async def ListLeases(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own leases (only the active ones with `only_active`), by name."""
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "leases")
        leases = own_leases(self.backend, subject, namespace, only_active=request.only_active,
                            labels=_selector_filter(request.filter, "filter"),
                            tags=_selector_filter(request.tag_filter, "tag_filter"))
        return client_pb2.ListLeasesResponse(leases=[lease_message(lease) for lease in leases])

    @_guarded
    async def CreateLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "leases")
        lease = await create_lease(self.backend, subject, namespace, request.lease_id, _lease_spec(request.lease))
        return lease_message(lease)

    @_guarded
    async def DeleteLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Ends the lease (`spec.release`), as the controller lessor replaces does; the object stays, ended."""
        subject = await authenticate(self.backend, context, "client")
        await release(self.backend.api, await self._lease(subject, request.name))
        return empty_pb2.Empty()

    @_guarded
    async def UpdateLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own lease, changed as the controller changes it: its times (`begin_time` only before it
        has an exporter), and its holder (`client`, only while it holds an exporter); the Lease object is
        patched under the version read, as the client would with kubectl, and its actor decides the rest."""
        subject = await authenticate(self.backend, context, "client")
        obj = await self._lease(subject, request.lease.name)
        spec = {**_time_update(obj, request.lease),
                **await self._transfer(obj, request.lease)}
        if not spec:
            return lease_message(obj)
        patched = await self.backend.api.merge_patch(
            LEASE, obj.namespace, obj.name, {"metadata": {"resourceVersion": obj.meta.resource_version}, "spec": spec})
        return lease_message(LeaseView.of(patched))

    async def _transfer(self, obj: LeaseView, lease: Any) -> dict[str, Any]:
        """`spec.clientRef` for a lease handed to another client of its namespace (`lease.client`), else {}."""
        if not lease.HasField("client") or not lease.client:
            return {}
        namespace, name = obj.namespace, obj.name
        if obj.ended:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"cannot transfer lease {namespace}/{name}: it has already ended")
        if obj.exporter is None:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"cannot transfer lease {namespace}/{name}: it has not started yet (no exporter)")
        try:
            target_namespace, target = parse_resource(lease.client, "clients")
        except ValueError as err:
            raise _invalid(f"lease.client: {err}") from None
        if target_namespace != namespace:
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"cannot transfer lease {namespace}/{name} to a client in namespace {target_namespace}")
        if await self.backend.api.get(CLIENT, namespace, target) is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"cannot transfer lease {namespace}/{name}: client "
                          f"{namespace}/{target} does not exist")
        return {"clientRef": {"name": target}}

    @_guarded
    async def RotateToken(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A freshly signed token for the caller, written into its credential Secret by its Client's actor
        (`jmp auth rotate`), with its expiry when lessor mints tokens with a lifetime."""
        subject = await authenticate(self.backend, context, "client")
        self._namespace(subject, request.parent, "tokens")
        token = await self.backend.ask(f"{CLIENT.prefix}/{subject.namespace}/{subject.name}", RotateCredential())
        if not isinstance(token, str):
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"client {subject.namespace}/{subject.name} has no credential Secret that lessor made")
        answer = client_pb2.RotateTokenResponse(token=token)
        expiry = token_expiry(token)
        if expiry is not None:
            answer.expiry.FromDatetime(expiry.replace(tzinfo=None))
        return answer


__all__ = ["Backend", "ClientService", "ControllerService", "authenticate", "controller_lease_message",
           "create_lease", "lease_message", "own_leases"]
