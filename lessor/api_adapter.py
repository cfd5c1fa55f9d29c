"""The gateway, seen through the actors' `Api` protocol: kinds resolved, errors translated."""

from __future__ import annotations

from lessor.actors.api import AlreadyExists, ApiFailure, Conflict, Kind, NotFound, Object
from lessor.gateway import ApiError, Gateway, Resource


def _translate(err: ApiError) -> ApiFailure:
    if err.not_found:
        return NotFound(err.message, reason=err.reason, status=err.status)
    if err.conflict:
        return Conflict(err.message, reason=err.reason, status=err.status)
    if err.status == 409 and err.reason == "AlreadyExists":
        return AlreadyExists(err.message, reason=err.reason, status=err.status)
    return ApiFailure(err.message, reason=err.reason, status=err.status)


class GatewayApi:
    """Implements `lessor.actors.api.Api` on a `Gateway`."""

    def __init__(self, gateway: Gateway) -> None:
        self.gateway = gateway

    async def _resource(self, kind: Kind) -> Resource:
        try:
            return await self.gateway.resolve(kind.api_version, kind.kind)
        except LookupError as err:  # the group is served, the kind is not (a provider's typo, a CRD not yet installed)
            raise NotFound(str(err), reason="NotFound", status=404) from err

    async def get(self, kind: Kind, namespace: str, name: str) -> Object | None:
        try:
            return await self.gateway.get(await self._resource(kind), namespace, name)
        except NotFound:
            return None
        except ApiError as err:
            if err.not_found:
                return None
            raise _translate(err) from err

    async def create(self, kind: Kind, namespace: str, body: Object) -> Object:
        try:
            return await self.gateway.create(await self._resource(kind), namespace, body)
        except ApiError as err:
            raise _translate(err) from err

    async def merge_patch(self, kind: Kind, namespace: str, name: str, patch: Object,
                          *, subresource: str | None = None) -> Object:
        try:
            return await self.gateway.merge_patch(await self._resource(kind), namespace, name, patch, subresource)
        except ApiError as err:
            raise _translate(err) from err

    async def json_patch(self, kind: Kind, namespace: str, name: str, ops: list[Object],
                         *, subresource: str | None = None) -> Object:
        try:
            return await self.gateway.json_patch(await self._resource(kind), namespace, name, ops, subresource)
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
            return await self.gateway.apply(await self._resource(kind), namespace, name, body, force=True)
        except ApiError as err:
            raise _translate(err) from err

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     resource_version: str | None = None, uid: str | None = None) -> None:
        try:
            await self.gateway.delete(await self._resource(kind), namespace, name,
                                      resource_version=resource_version, uid=uid)
        except NotFound:
            return
        except ApiError as err:
            if err.not_found:
                return
            raise _translate(err) from err
