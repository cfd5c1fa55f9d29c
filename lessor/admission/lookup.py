"""The checkers' read-only view of the cluster, served by the gateway.

Reads go to the API server, not to the operator's informer caches, so
that a check sees an object created a moment before it. A get is read from
etcd, which is consistent and takes a millisecond. A list is served from
the API server's watch cache (``resourceVersion=0``): a consistent list
waits for that cache to catch up with etcd, which under a steady stream of
writes (``lessor bench admission``'s creates) cost ~90 ms per list, in
every admission. The price is that a list may miss an object written in
the last few milliseconds; checks that must not (a provider named by a
claim) look the object up by name.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lessor.gateway import LESSOR_RESOURCES, ApiError, Gateway, Resource

_RESOURCES = {(r.group, r.kind): r for r in LESSOR_RESOURCES}


class GatewayLookup:
    """A `Lookup` over lessor's kinds; it offers no way to write."""

    def __init__(self, gateway: Gateway) -> None:
        self._gateway = gateway

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        if not name:  # an empty name would address the whole collection
            return None
        try:
            return await self._gateway.get(_resource(group, kind), namespace, name)
        except ApiError as err:
            if err.not_found:
                return None
            raise

    async def list(self, group: str, kind: str, namespace: str) -> Sequence[Mapping[str, Any]]:
        resource = _resource(group, kind)
        answer = await self._gateway.request("list", kind, "GET", resource.path(namespace),
                                             params={"resourceVersion": "0"})
        items: list[Mapping[str, Any]] = answer.get("items", [])
        return items


def _resource(group: str, kind: str) -> Resource:
    try:
        return _RESOURCES[(group, kind)]
    except KeyError:
        raise LookupError(f"checks can only look up lessor kinds, not {group}/{kind}") from None
