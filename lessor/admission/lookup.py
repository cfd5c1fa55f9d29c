"""The checkers' read-only view of the cluster.

`CacheLookup`, what `lessor run` uses, reads the operator's informer
caches: a review that names 200 providers costs 200 dictionary reads, not
200 requests to the API server, and judges with what the operator itself
will act on. A cache trails the API server by one watch event, so an object
created a moment before the review that names it may not be there yet: a
name that is missing is looked for again as the watch delivers events, for
a short grace, before it counts as absent. A kind without an informer, or
whose informer has not listed yet, is read through `GatewayLookup`.

`GatewayLookup` reads through the API server: a get from etcd, a list from
the API server's watch cache (``resourceVersion=0``), which may miss an
object written in the last few milliseconds.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lessor.admission.checker import Unavailable
from lessor.admission.checks.fields import name_problem
from lessor.gateway import LESSOR_RESOURCES, ApiError, Gateway, Informer, Resource

_RESOURCES = {(r.group, r.kind): r for r in LESSOR_RESOURCES}


class GatewayLookup:
    """A `Lookup` over lessor's kinds through the API server; it offers no way to write."""

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
            raise _unavailable(err) from err
        except TimeoutError as err:
            raise Unavailable(f"the API server did not answer a read of {kind} {namespace}/{name} in time") from err

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> Sequence[Mapping[str, Any]]:
        """From the API server's watch cache (`resourceVersion=0`), or with `consistent` from etcd's
        current state: what confirms a cache that may trail."""
        resource = _resource(group, kind)
        try:
            answer = await self._gateway.request("list", kind, "GET", resource.path(namespace),
                                                 params=None if consistent else {"resourceVersion": "0"})
        except ApiError as err:
            raise _unavailable(err) from err
        except TimeoutError as err:
            raise Unavailable(f"the API server did not answer a list of {kind} in {namespace} in time") from err
        items: list[Mapping[str, Any]] = answer.get("items", [])
        return items


class CacheLookup:
    """A `Lookup` over informer stores, falling back to ``fallback`` where there is no synced store.

    Objects are the informers' own: checks read them and must not change them.
    """

    def __init__(self, informers: Iterable[Informer], fallback: GatewayLookup, *,
                 grace: float = 0.5, poll: float = 0.02) -> None:
        self._informers = {(i.resource.group, i.resource.kind): i for i in informers}
        self._fallback = fallback
        self._grace = grace
        self._poll = poll

    def _store(self, group: str, kind: str) -> dict[tuple[str, str], dict[str, Any]] | None:
        informer = self._informers.get((group, kind))
        if informer is None or not informer.synced.is_set():
            return None
        return informer.store

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        store = self._store(group, kind)
        if store is None:
            return await self._fallback.get(group, kind, namespace, name)
        if name_problem(name):
            return None  # no object can have it: nothing to wait for
        deadline = time.monotonic() + self._grace
        while (found := store.get((namespace, name))) is None and time.monotonic() < deadline:
            await asyncio.sleep(self._poll)  # the watch may be one event behind a create just made
        if found is None:  # a denial must be certain: a loaded watch can trail a create by more
            return await self._fallback.get(group, kind, namespace, name)
        return found

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> Sequence[Mapping[str, Any]]:
        store = self._store(group, kind)
        if store is None or consistent:
            return await self._fallback.list(group, kind, namespace, consistent=consistent)
        cached = [obj for (ns, _), obj in list(store.items()) if ns == namespace]
        # Nothing cached may be a watch still behind the namespace's first objects (samples applied
        # together): ask the API rather than judge against nothing.
        return cached or await self._fallback.list(group, kind, namespace, consistent=True)


def _unavailable(err: ApiError) -> Exception:
    """A refusal to answer now (429 throttled, 5xx) as `Unavailable`; any other error as it is (a bug to report)."""
    if err.status == 429 or err.status >= 500:
        return Unavailable(f"the API server did not answer: {err}")
    return err


def _resource(group: str, kind: str) -> Resource:
    try:
        return _RESOURCES[(group, kind)]
    except KeyError:
        raise LookupError(f"checks can only look up lessor kinds, not {group}/{kind}") from None
