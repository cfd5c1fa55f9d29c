"""Jumpstarter's `ControllerService`: what an exporter's agent reports, and its leases and Dials.

What an agent reports becomes an `AgentReport` asked of its exporter actor, which writes it
(actors/leasing/agent.py). A client's `Dial` reaches its exporter through the router (router.py), announced
on the exporter's `Listen`. The controller's older lease calls (GetLease, RequestLease, ListLeases) are the
ClientService calls' own lookup, creation and listing (leases.py), answered in the older messages. Not
served (UNIMPLEMENTED, as by the controller of 0.9.0): AuditStream.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import grpc
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc

from lessor.actors.leasing.agent import AgentReport
from lessor.actors.leasing.spec import format_go_duration
from lessor.model.kinds import EXPORTER, LEASE
from lessor.model.views import Meta
from lessor.model.views.leasing import ExporterView, LeaseView

from .backend import Backend
from .guard import Refusal, authenticate, guarded, guarded_stream, in_namespace
from .leases import active, create_lease, lease_ref, own_lease, own_leases, release
from .messages import STATUS_NAMES, controller_lease_message, ready_reason, selector_of
from .quota import StreamQuota
from .router import Router, TooManyPairs
from .tokens import Subject


class ControllerService(jumpstarter_pb2_grpc.ControllerServiceServicer):
    """The exporter's half of `jumpstarter.v1.ControllerService`."""

    def __init__(self, backend: Backend, router: Router, quota: StreamQuota | None = None) -> None:
        self.backend = backend
        self.router = router
        self.quota = quota or StreamQuota()  # each caller's open Status and Listen streams, bounded
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

    @guarded
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

    @guarded
    async def Unregister(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "exporter")
        await self._report(subject, AgentReport(devices=(), exporter_status="Offline",
                                                message=f"unregistered: {request.reason}" if request.reason else
                                                "unregistered"))
        return jumpstarter_pb2.UnregisterResponse()

    @guarded
    async def ReportStatus(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "exporter")
        status = STATUS_NAMES.get(common_pb2.ExporterStatus.Name(request.status), "Unspecified")
        await self._report(subject, AgentReport(exporter_status=status, message=request.message))
        if request.release_lease:  # the older way to end the held lease (ReleaseLease is the newer)
            held = self._held(subject)
            lease = LeaseView.maybe(await self.backend.api.get(LEASE, subject.namespace, held) if held else None)
            if lease is not None and lease.exporter == subject.name:
                await release(self.backend.api, lease)
        return jumpstarter_pb2.ReportStatusResponse()

    @guarded_stream
    async def Status(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """Who holds the exporter, at once and at every change; `lastSeen` kept fresh while it is open.

        A lease that follows another at once (a waiting lease granted as the holder's ends) is told as
        "not leased", then the new one: the agent ends a lease (its afterLease hook, its Listen) only on
        "not leased", and starts the next only after that; without it, it would keep serving the ended
        lease and never listen for the new one."""
        subject = await authenticate(self.backend, context, "exporter")
        with self.quota.holding(subject, "Status"):
            async for response in self._status(subject):
                yield response

    async def _status(self, subject: Subject) -> AsyncIterator[Any]:
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

    @guarded_stream
    async def Listen(self, request: Any, context: grpc.aio.ServicerContext) -> AsyncIterator[Any]:
        """The router endpoint and token of every Dial to this exporter, while it holds `lease_name`;
        `lastSeen` kept fresh. Ends when the lease ends or moves (the exporter then stops serving it)."""
        subject = await authenticate(self.backend, context, "exporter")
        with self.quota.holding(subject, "Listen"):
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

    @guarded
    async def Dial(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A client's connection to the exporter of its Ready lease, through the router (router.py)."""
        subject = await authenticate(self.backend, context, "client")
        namespace, name = lease_ref(subject, request.lease_name)
        lease = await own_lease(self.backend, subject, namespace, name)
        exporter = lease.exporter
        if lease.ended or exporter is None or not lease.ready:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"lease {namespace}/{name} is not ready: {ready_reason(lease)}")
        if not self.router.listening(namespace, exporter):
            raise Refusal(grpc.StatusCode.UNAVAILABLE,
                          f"exporter {namespace}/{exporter} is not listening for lease {name} (is its agent connected?)")

        def alive() -> bool:
            current = LeaseView.maybe(self.backend.cached_one(LEASE.kind, namespace, name))
            return current is not None and active(current) and current.exporter == exporter

        try:
            return self.router.dial(namespace, name, exporter, alive, client=subject.name)
        except TooManyPairs as err:
            raise Refusal(grpc.StatusCode.RESOURCE_EXHAUSTED, str(err)) from None

    @guarded
    async def AuditStream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> Any:
        """Not served by the controller of 0.9.0 either (its stub answers UNIMPLEMENTED); the 0.9 agent does
        not call it."""
        await authenticate(self.backend, context, "exporter")
        raise Refusal(grpc.StatusCode.UNIMPLEMENTED,
                      "AuditStream is not served (nor by the Jumpstarter controller of protocol 0.9.0)")

    @guarded
    async def GetLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own lease, by its name (or `namespaces/NS/leases/NAME`), in the controller's older
        message: the spec's selector and duration, the granted exporter's uid, the times, the conditions."""
        subject = await authenticate(self.backend, context, "client")
        namespace, name = lease_ref(subject, request.name)
        lease = await own_lease(self.backend, subject, namespace, name)
        exporter = None
        if (holder := lease.exporter) is not None:
            exporter = self.backend.cached_one(EXPORTER.kind, namespace, holder) or \
                await self.backend.api.get(EXPORTER, namespace, holder)
        return controller_lease_message(lease, Meta.of(exporter).uid if exporter is not None else None)

    @guarded
    async def RequestLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """A new lease for the caller, made as CreateLease makes one, from a structured selector and a
        duration; answered with its name (in the caller's namespace)."""
        subject = await authenticate(self.backend, context, "client")
        spec: dict[str, Any] = {}
        if request.HasField("selector") and (selector := selector_of(request.selector, "selector")):
            spec["selector"] = selector
        if request.HasField("duration"):
            spec["duration"] = format_go_duration(request.duration.ToTimedelta())
        lease = await create_lease(self.backend, subject, subject.namespace, "", spec)
        return jumpstarter_pb2.RequestLeaseResponse(name=lease.name)

    @guarded
    async def ReleaseLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """An exporter ends the lease it holds once its afterLease hook has run (or a client its own lease)."""
        try:
            subject = await authenticate(self.backend, context, "exporter")
        except Refusal as refusal:
            if refusal.code != grpc.StatusCode.PERMISSION_DENIED:
                raise
            subject = await authenticate(self.backend, context, "client")
        namespace, name = lease_ref(subject, request.name)
        in_namespace(subject, namespace, "leases")  # another namespace's lease is refused, not read as our own
        lease = LeaseView.maybe(await self.backend.api.get(LEASE, namespace, name))
        if lease is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"lease {namespace}/{name} does not exist")
        holder = lease.exporter if subject.kind == "exporter" else lease.client
        if holder != subject.name:
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"lease {namespace}/{name} is not held by {subject.kind} {subject.name}")
        await release(self.backend.api, lease)
        return jumpstarter_pb2.ReleaseLeaseResponse()

    @guarded
    async def ListLeases(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The names of the caller's active leases (as ClientService's `only_active`)."""
        subject = await authenticate(self.backend, context, "client")
        leases = own_leases(self.backend, subject, subject.namespace, only_active=True)
        return jumpstarter_pb2.ListLeasesResponse(names=[lease.name for lease in leases])
