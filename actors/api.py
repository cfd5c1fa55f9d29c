"""What actors may ask of the API server: the gateway's interface, without HTTP.

The app adapts `lessor.gateway.Gateway` to this protocol; unit tests may use an
in-memory fake. Kinds are named by apiVersion and kind, never by URL.
"""

from __future__ import annotations

from typing import Any, Protocol

from lessor.model.kinds import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER, SCALING, Kind

__all__ = ["CLAIM", "CLIENT", "EXPORTER", "HANDLE", "LEASE", "POLICY", "POOL", "PROVIDER", "SCALING", "AlreadyExists", "Api",
           "ApiFailure", "Conflict", "Kind", "NotFound", "Object"]

Object = dict[str, Any]


class ApiFailure(Exception):
    """Any refused write; `reason` and `message` are the API server's, `field` when it named one."""

    def __init__(self, message: str, *, reason: str = "", status: int = 0) -> None:
        super().__init__(message)
        self.reason = reason
        self.status = status


class NotFound(ApiFailure):
    """The object does not exist (any more)."""


class Conflict(ApiFailure):
    """Someone wrote first: a stale resourceVersion, or a JSON patch `test` that failed.

    This is how a commit point loses a race; the loser re-reads and decides again.
    """


class AlreadyExists(ApiFailure):
    """A create found the name taken."""


class Api(Protocol):
    async def get(self, kind: Kind, namespace: str, name: str) -> Object | None: ...

    async def any_in(self, kind: Kind, namespace: str) -> bool:
        """Whether `namespace` holds an object of `kind`, read from the API server now (a consistent read, not a
        cache): what a watch may not have delivered yet."""
        ...

    async def create(self, kind: Kind, namespace: str, body: Object) -> Object: ...

    async def merge_patch(self, kind: Kind, namespace: str, name: str, patch: Object,
                          *, subresource: str | None = None) -> Object: ...

    async def json_patch(self, kind: Kind, namespace: str, name: str, ops: list[Object],
                         *, subresource: str | None = None) -> Object: ...

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: Object) -> Object: ...

    async def apply(self, kind: Kind, namespace: str, name: str, body: Object) -> Object:
        """Server-side apply as the operator's field manager, taking over conflicting fields: creates or
        updates in one idempotent call, and drops the fields a previous apply, or the operator's own create,
        set that `body` no longer has."""
        ...

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     resource_version: str | None = None, uid: str | None = None) -> None: ...
