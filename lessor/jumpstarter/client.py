"""Jumpstarter's `ClientService` (jmp's): a client's exporters and leases.

A client's lease calls are the Lease objects it would write by hand: CreateLease creates one, DeleteLease
sets `spec.release` (as the controller lessor replaces does), and the lease and exporter actors decide the
rest as for any Lease. Reads come from the operator's informer caches.
"""

from __future__ import annotations

from typing import Any

import grpc
from google.protobuf import empty_pb2
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc

from lessor.actors.leasing.credentials import RotateCredential
from lessor.model.kinds import CLIENT, EXPORTER, LEASE
from lessor.model.views.leasing import ExporterView, LeaseView

from .backend import Backend
from .guard import Refusal, authenticate, guarded, in_namespace, invalid
from .leases import create_lease, own_lease, own_leases, release, selector_filter
from .messages import STATUS_VALUES, lease_message, lease_spec, time_update
from .names import parse_parent, parse_resource, resource
from .tokens import Subject, token_expiry


class ClientService(client_pb2_grpc.ClientServiceServicer):
    """`jumpstarter.client.v1.ClientService`: a client's exporters and leases."""

    def __init__(self, backend: Backend) -> None:
        self.backend = backend

    def _exporter_message(self, exporter: ExporterView) -> Any:
        return client_pb2.Exporter(
            name=resource(exporter.namespace, "exporters", exporter.name),
            labels=dict(exporter.meta.labels),
            online=exporter.online(self.backend.now(), self.backend.heartbeat_timeout),
            status=STATUS_VALUES.get(exporter.agent_status or "Unspecified", 0),
            status_message=exporter.status_message,
            enabled=exporter.enabled,
        )

    async def _lease(self, subject: Subject, name: str) -> LeaseView:
        """The client's own lease named `namespaces/NS/leases/NAME`."""
        try:
            namespace, lease = parse_resource(name, "leases")
        except ValueError as err:
            raise invalid(str(err)) from None
        return await own_lease(self.backend, subject, namespace, lease)

    def _namespace(self, subject: Subject, parent: str, what: str) -> str:
        try:
            namespace = parse_parent(parent)
        except ValueError as err:
            raise invalid(str(err)) from None
        in_namespace(subject, namespace, what)
        return namespace

    @guarded
    async def GetExporter(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        try:
            namespace, name = parse_resource(request.name, "exporters")
        except ValueError as err:
            raise invalid(str(err)) from None
        in_namespace(subject, namespace, "exporters")
        exporter = ExporterView.maybe(await self.backend.api.get(EXPORTER, namespace, name))
        if exporter is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"exporter {namespace}/{name} does not exist")
        return self._exporter_message(exporter)

    @guarded
    async def ListExporters(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "exporters")
        wanted = selector_filter(request.filter, "filter")
        exporters = sorted((ExporterView.of(o) for o in self.backend.cached(EXPORTER.kind, namespace)),
                           key=lambda e: e.name)
        return client_pb2.ListExportersResponse(
            exporters=[self._exporter_message(e) for e in exporters if wanted(e.meta.labels)])

    @guarded
    async def GetLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        return lease_message(await self._lease(subject, request.name))

    @guarded
    async def ListLeases(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own leases (only the active ones with `only_active`), by name."""
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "leases")
        leases = own_leases(self.backend, subject, namespace, only_active=request.only_active,
                            labels=selector_filter(request.filter, "filter"),
                            tags=selector_filter(request.tag_filter, "tag_filter"))
        return client_pb2.ListLeasesResponse(leases=[lease_message(lease) for lease in leases])

    @guarded
    async def CreateLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        subject = await authenticate(self.backend, context, "client")
        namespace = self._namespace(subject, request.parent, "leases")
        lease = await create_lease(self.backend, subject, namespace, request.lease_id, lease_spec(request.lease))
        return lease_message(lease)

    @guarded
    async def DeleteLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """Ends the lease (`spec.release`), as the controller lessor replaces does; the object stays, ended."""
        subject = await authenticate(self.backend, context, "client")
        await release(self.backend.api, await self._lease(subject, request.name))
        return empty_pb2.Empty()

    @guarded
    async def UpdateLease(self, request: Any, context: grpc.aio.ServicerContext) -> Any:
        """The caller's own lease, changed as the controller changes it: its times (`begin_time` only before it
        has an exporter), and its holder (`client`, only while it holds an exporter); the Lease object is
        patched under the version read, as the client would with kubectl, and its actor decides the rest."""
        subject = await authenticate(self.backend, context, "client")
        obj = await self._lease(subject, request.lease.name)
        spec = {**time_update(obj, request.lease),
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
            raise invalid(f"lease.client: {err}") from None
        if target_namespace != namespace:
            raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                          f"cannot transfer lease {namespace}/{name} to a client in namespace {target_namespace}")
        if await self.backend.api.get(CLIENT, namespace, target) is None:
            raise Refusal(grpc.StatusCode.NOT_FOUND, f"cannot transfer lease {namespace}/{name}: client "
                          f"{namespace}/{target} does not exist")
        return {"clientRef": {"name": target}}

    @guarded
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
