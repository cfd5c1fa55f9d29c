"""The gateway, seen through the actors' `Api` protocol: kinds resolved, errors translated, writes fenced."""

from __future__ import annotations

import logging
from collections.abc import Callable

from lessor.actors.api import AlreadyExists, ApiFailure, Conflict, Kind, NotFound, Object
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.client import FIELD_MANAGER

log = logging.getLogger(__name__)


def _translate(err: ApiError) -> ApiFailure:
    if err.not_found:
        return NotFound(err.message, reason=err.reason, status=err.status)
    if err.conflict:
        return Conflict(err.message, reason=err.reason, status=err.status)
    if err.status == 409 and err.reason == "AlreadyExists":
        return AlreadyExists(err.message, reason=err.reason, status=err.status)
    return ApiFailure(err.message, reason=err.reason, status=err.status)


def _unfenced(what: str) -> None:
    return None


class GatewayApi:
    """Implements `lessor.actors.api.Api` on a `Gateway`.

    Every write of every actor passes `fence(what)` just before its request, the one place where a
    replica that is not (or may no longer be) the leader is stopped: it raises
    `lessor.leader.NotLeader` instead of sending the request.
    """

    def __init__(self, gateway: Gateway, fence: Callable[[str], None] = _unfenced) -> None:
        self.gateway = gateway
        self.fence = fence

    async def _resource(self, kind: Kind) -> Resource:
        try:
            return await self.gateway.resolve(kind.api_version, kind.kind)
        except LookupError as err:  # the group is served, the kind is not (a provider's typo, a CRD not yet installed)
            raise NotFound(str(err), reason="NotFound", status=404) from err

    async def _writable(self, kind: Kind, what: str) -> Resource:
        """The kind's resource, once the fence let `what` through: checked last before the request."""
        resource = await self._resource(kind)
        self.fence(what)
        return resource

    async def get(self, kind: Kind, namespace: str, name: str) -> Object | None:
        try:
            return await self.gateway.get(await self._resource(kind), namespace, name)
        except NotFound:
            return None
        except ApiError as err:
            if err.not_found:
                return None
            raise _translate(err) from err

    async def create(self, kind: Kind, namespace: str, body: Object, *, as_applied: bool = False) -> Object:
        try:
            resource = await self._writable(kind, f"create {kind.kind} {namespace}")
            created = await self.gateway.create(resource, namespace, body)
        except ApiError as err:
            raise _translate(err) from err
        return await self._as_applied(resource, namespace, created) if as_applied else created

    async def _as_applied(self, resource: Resource, namespace: str, created: Object) -> Object:
        """Re-label the create's managedFields entry as the operator's Apply entry (same fields), so that the
        operator's later applies own what the create set. If that fails, the object stays as created."""
        metadata = created.get("metadata") or {}
        entries = [{**entry, "manager": FIELD_MANAGER, "operation": "Apply"}
                   for entry in metadata.get("managedFields") or ()]
        patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"), "managedFields": entries}}
        try:
            self.fence(f"patch {resource.kind} {namespace}/{metadata.get('name')}")
            return await self.gateway.merge_patch(resource, namespace, str(metadata.get("name")), patch)
        except ApiError as err:
            log.info("%s %s/%s: keeping the create's field ownership: %s", resource.kind, namespace,
                     metadata.get("name"), err.message)
            return created

    async def merge_patch(self, kind: Kind, namespace: str, name: str, patch: Object,
                          *, subresource: str | None = None) -> Object:
        try:
            resource = await self._writable(kind, f"patch {kind.kind} {namespace}/{name}")
            return await self.gateway.merge_patch(resource, namespace, name, patch, subresource)
        except ApiError as err:
            raise _translate(err) from err

    async def json_patch(self, kind: Kind, namespace: str, name: str, ops: list[Object],
                         *, subresource: str | None = None) -> Object:
        try:
            resource = await self._writable(kind, f"patch {kind.kind} {namespace}/{name}")
            return await self.gateway.json_patch(resource, namespace, name, ops, subresource)
        except ApiError as err:
            # The API server answers a failed `test` op with a bare 422 Invalid: the precondition lost.
            if err.status == 422 and any(op.get("op") == "test" for op in ops):
                raise Conflict(f"precondition failed on {kind.kind} {namespace}/{name}",
                               reason="PreconditionFailed", status=422) from err
            raise _translate(err) from err

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: Object) -> Object:
        return await self.merge_patch(kind, namespace, name, {"status": status}, subresource="status")

    async def apply(self, kind: Kind, namespace: str, name: str, body: Object) -> Object:
        try:
            resource = await self._writable(kind, f"apply {kind.kind} {namespace}/{name}")
            return await self.gateway.apply(resource, namespace, name, body, force=True)
        except ApiError as err:
            raise _translate(err) from err

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     resource_version: str | None = None, uid: str | None = None) -> None:
        try:
            resource = await self._writable(kind, f"delete {kind.kind} {namespace}/{name}")
            await self.gateway.delete(resource, namespace, name,
                                      resource_version=resource_version, uid=uid)
        except NotFound:
            return
        except ApiError as err:
            if err.not_found:
                return
            raise _translate(err) from err
