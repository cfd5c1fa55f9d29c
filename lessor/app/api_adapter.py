"""The gateway, seen through the actors' `Api` protocol: kinds resolved, errors translated, writes fenced,
and every object handed to an actor slimmed as the informers' are (`slim`: no managedFields): an actor keeps
the answer to its write until the watch event of it arrives, and at a first start that is every actor at once."""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

from lessor.actors.api import AlreadyExists, ApiFailure, Conflict, Kind, NotFound, Object
from lessor.gateway import ApiError, Gateway, Resource, admitted
from lessor.gateway.client import FIELD_MANAGER, Fence
from lessor.gateway.informer import slim
from lessor.leadership.election import NotLeader, fence_denial
from lessor.model.fields import mapping_at

log = logging.getLogger(__name__)

_HAND_OVER_TRIES = 3  # reads and patches of the created fields' hand-over before an apply, while others write


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


def _unheard(message: str) -> None:
    return None


class GatewayApi:
    """Implements `lessor.actors.api.Api` on a `Gateway`.

    Every write of every actor (create, patch, apply and its field hand-over, delete) is fenced:
    `fence(what)` raises `lessor.leadership.election.NotLeader` when this replica is not (or may no longer be) the
    leader. It is asked when the write starts, so a write begun after the fence closed never queues, and
    again by the gateway when the request is sent (after its write slot and connection are held, see
    `lessor.gateway.client.Fence`): a write that queued while the fence was open and reaches the
    connection after it closed is refused there, never sent.

    The API server's own fence (deploy/leader-fence.yaml) refuses a write of a replica that does not hold
    the leader Lease when it is admitted; that 403 is `NotLeader` too, as the process's fence would have
    said, and `refused(message)` (the leadership's) hears of it.
    """

    def __init__(self, gateway: Gateway, fence: Callable[[str], None] = _unfenced,
                 refused: Callable[[str], None] = _unheard) -> None:
        self.gateway = gateway
        self.fence = fence
        self.refused = refused

    def _failure(self, err: ApiError, what: str) -> ApiFailure:
        if fence_denial(err.status, err.message):
            self.refused(err.message)
            return NotLeader(what, by_server=err.message)
        return _translate(err)

    async def _resource(self, kind: Kind) -> Resource:
        try:
            return await self.gateway.resolve(kind.api_version, kind.kind)
        except LookupError as err:  # the group is served, the kind is not (a provider's typo, a CRD not yet installed)
            raise NotFound(str(err), reason="NotFound", status=404) from err

    async def _writable(self, kind: Kind, what: str) -> tuple[Resource, Fence]:
        """The kind's resource and the fence for `what`, which is asked now (a paused fence is waited out:
        `admitted`) and again at the send."""
        fence = functools.partial(self.fence, what)
        await admitted(fence)
        return await self._resource(kind), fence

    async def get(self, kind: Kind, namespace: str, name: str) -> Object | None:
        try:
            return slim(await self.gateway.get(await self._resource(kind), namespace, name))
        except NotFound:
            return None
        except ApiError as err:
            if err.not_found:
                return None
            raise _translate(err) from err

    async def any_in(self, kind: Kind, namespace: str) -> bool:
        try:
            resource = await self._resource(kind)
            page = await self.gateway.request("list", resource.kind, "GET", resource.path(namespace),
                                              params={"limit": 1})
            return bool(page.get("items"))
        except ApiError as err:
            raise _translate(err) from err

    async def create(self, kind: Kind, namespace: str, body: Object) -> Object:
        try:
            resource, fence = await self._writable(kind, what := f"create {kind.kind} {namespace}")
            return slim(await self.gateway.create(resource, namespace, body, fence=fence))
        except ApiError as err:
            raise self._failure(err, what) from err

    async def merge_patch(self, kind: Kind, namespace: str, name: str, patch: Object,
                          *, subresource: str | None = None) -> Object:
        try:
            resource, fence = await self._writable(kind, what := f"patch {kind.kind} {namespace}/{name}")
            return slim(await self.gateway.merge_patch(resource, namespace, name, patch, subresource, fence=fence))
        except ApiError as err:
            raise self._failure(err, what) from err

    async def json_patch(self, kind: Kind, namespace: str, name: str, ops: list[Object],
                         *, subresource: str | None = None) -> Object:
        try:
            resource, fence = await self._writable(kind, what := f"patch {kind.kind} {namespace}/{name}")
            return slim(await self.gateway.json_patch(resource, namespace, name, ops, subresource, fence=fence))
        except ApiError as err:
            # The API server answers a failed `test` op with a bare 422 Invalid: the precondition lost.
            if err.status == 422 and any(op.get("op") == "test" for op in ops):
                raise Conflict(f"precondition failed on {kind.kind} {namespace}/{name}",
                               reason="PreconditionFailed", status=422) from err
            raise self._failure(err, what) from err

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: Object) -> Object:
        return await self.merge_patch(kind, namespace, name, {"status": status}, subresource="status")

    async def apply(self, kind: Kind, namespace: str, name: str, body: Object) -> Object:
        try:
            resource, fence = await self._writable(kind, what := f"apply {kind.kind} {namespace}/{name}")
            await self._adopt_created_fields(resource, namespace, name, body)
            return slim(await self.gateway.apply(resource, namespace, name, body, force=True, fence=fence))
        except ApiError as err:
            raise self._failure(err, what) from err

    async def _adopt_created_fields(self, resource: Resource, namespace: str, name: str, body: Object) -> None:
        """Hand the fields the operator's own create set (an `Update` entry of its field manager) to its
        applies, so an apply that leaves one out removes it: server-side apply removes only fields that its
        manager's `Apply` entry owns. Done only before an apply that leaves out a field the create set: most
        created resources are never applied to, and most first applies (a pooled handle's resource getting
        its claim's values) keep every created field, so they own them too and need no hand-over, which is a
        write.

        A hand-over that loses to another write (its resourceVersion precondition) reads again and retries;
        one that fails otherwise fails the apply (the `ApiError` is raised): applied without it, the apply
        would leave the field in place, yet the resource would show the definition as applied (its
        `lessor.dev/applied` digest), and no later look would try again."""
        for _ in range(_HAND_OVER_TRIES - 1):
            try:
                await self._hand_over(resource, namespace, name, body)
                return
            except ApiError as err:
                if not err.conflict:
                    raise
                log.info("%s %s/%s: handing the create's fields over lost to another write; reading again",
                         resource.kind, namespace, name)
        await self._hand_over(resource, namespace, name, body)

    async def _hand_over(self, resource: Resource, namespace: str, name: str, body: Object) -> None:
        """One read and, if `body` leaves out a field the create set, one patch under that read's version."""
        try:
            current = await self.gateway.get(resource, namespace, name)
        except ApiError:
            return  # gone, or not readable: the apply says what is wrong
        metadata = mapping_at(current, "metadata")
        entries = metadata.get("managedFields") or []
        ours = [e for e in entries if e.get("manager") == FIELD_MANAGER and not e.get("subresource")]
        created = [e for e in ours if e.get("operation") == "Update"]
        if not created or all(_keeps(body, e.get("fieldsV1") or {}) for e in created):
            return
        fields: Object = {}
        for entry in ours:
            fields = _union(fields, entry.get("fieldsV1") or {})
        merged = {**ours[-1], "operation": "Apply", "fieldsV1": fields}
        patch = {"metadata": {"resourceVersion": metadata.get("resourceVersion"),
                              "managedFields": [*(e for e in entries if e not in ours), merged]}}
        await self.gateway.merge_patch(resource, namespace, name, patch,
                                       fence=functools.partial(self.fence, f"patch {resource.kind} {namespace}/{name}"))

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     resource_version: str | None = None, uid: str | None = None) -> None:
        try:
            resource, fence = await self._writable(kind, what := f"delete {kind.kind} {namespace}/{name}")
            await self.gateway.delete(resource, namespace, name,
                                      resource_version=resource_version, uid=uid, fence=fence)
        except NotFound:
            return
        except ApiError as err:
            if err.not_found:
                return
            raise self._failure(err, what) from err


def _keeps(body: Any, fields: Any) -> bool:
    """Whether `body` sets every field of the `fieldsV1` set `fields`. Only maps are followed (`f:` keys); a
    set naming list items (`k:`, `v:`, `i:`) or of another shape counts as not kept: the hand-over is then done,
    which is always correct, only a write dearer."""
    if not isinstance(fields, dict):
        return False
    for key, sub in fields.items():
        if key == ".":
            continue
        if not key.startswith("f:") or not isinstance(body, dict) or key[2:] not in body:
            return False
        if sub and not _keeps(body[key[2:]], sub):
            return False
    return True


def _union(a: Object, b: Object) -> Object:
    """Two `fieldsV1` sets as one (nested maps of `f:`/`k:`/`v:` keys; leaves are empty maps)."""
    out = dict(a)
    for key, value in b.items():
        mine = out.get(key)
        out[key] = _union(mine, value) if isinstance(mine, dict) and isinstance(value, dict) else value
    return out
