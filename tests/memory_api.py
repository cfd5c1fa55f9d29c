"""An in-memory API server for actor-conversation tests: the real actors, the real mailbox and the real
topology, with no Kubernetes under them.

`MemoryApi` implements the actors' `Api` protocol (actors/api.py) with the API server's semantics that
the conversations rely on: a resourceVersion per write from one counter, a write that carries a stale
`metadata.resourceVersion` or fails a JSON patch `test` is a `Conflict`, a missing object is `NotFound`.
Every write is recorded (`writes`, in order) and fed to the topology actor as the watch event it would
have been, so the actors learn of it the way they do in the operator. What it leaves out (admission,
schema defaulting, field managers, subresource separation) no conversation here needs.
"""

from __future__ import annotations

import asyncio
import copy
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from prometheus_client import CollectorRegistry

from lessor.actors.api import AlreadyExists, Conflict, Kind, NotFound
from lessor.actors.context import Context
from lessor.actors.provisioning.claim import ClaimActor
from lessor.actors.leasing.exporter import ExporterActor
from lessor.actors.provisioning.handle import HandleActor
from lessor.actors.leasing.lease import LeaseActor
from lessor.actors.provisioning.pool import PoolActor
from lessor.mailbox import ActorSystem, Supervision
from lessor.model.jsonpatch import JsonPatchError, apply
from lessor.topology import Topology
from lessor.topology.actor import ASK_TIMEOUT as TOPOLOGY_ASK_TIMEOUT
from lessor.topology.actor import Event, Synced, TopologyActor, TopologyState
from lessor.app.topology_questions import topology_state

OPS = "lessor-system"
Object = dict[str, Any]


@dataclass(frozen=True)
class Write:
    verb: str
    kind: str
    namespace: str
    name: str
    object: Object | None  # as written (None: deleted)


class MemoryApi:
    def __init__(self, watch: Callable[[str, Object], None]) -> None:
        self.objects: dict[tuple[str, str, str], Object] = {}
        self.writes: list[Write] = []
        self._versions = itertools.count(1)
        self._watch = watch
        self.delay: Callable[[str, str, Object], float] = lambda kind, name, patch: 0.0
        """Seconds a patch of (kind, name) waits before the server looks at it: a slow or late write, as on a
        busy API server (its precondition is checked when it lands, not when it was sent)."""
        self.before_answer: Callable[[str, str, Object], Awaitable[None]] = _at_once
        """Awaited once a patch of (kind, name) has landed (and been watched), before its writer hears of it: a
        writer on a busy loop or a slow connection learns of its own write after others have."""

    # --- what tests use --------------------------------------------------------------------

    def seed(self, body: Object) -> Object:
        """Create an object as a user would (recorded and watched like any write)."""
        meta = body["metadata"]
        return self._store("create", body["kind"], meta.get("namespace", ""), meta["name"], copy.deepcopy(body))

    def object(self, kind: str, namespace: str, name: str) -> Object | None:
        return self.objects.get((kind, namespace, name))

    # --- the Api protocol ------------------------------------------------------------------

    async def get(self, kind: Kind, namespace: str, name: str) -> Object | None:
        found = self.objects.get((kind.kind, namespace, name))
        return copy.deepcopy(found) if found is not None else None

    async def any_in(self, kind: Kind, namespace: str) -> bool:
        return any(k == kind.kind and ns == namespace for k, ns, _ in self.objects)

    async def create(self, kind: Kind, namespace: str, body: Object) -> Object:
        body = copy.deepcopy(body)
        meta = body.setdefault("metadata", {})
        if "generateName" in meta and "name" not in meta:
            meta["name"] = f"{meta['generateName']}{next(self._versions):05d}"
        if (kind.kind, namespace, meta["name"]) in self.objects:
            raise AlreadyExists(f"{kind.kind} {namespace}/{meta['name']} exists")
        meta["namespace"] = namespace
        body.setdefault("apiVersion", kind.api_version)
        body.setdefault("kind", kind.kind)
        return self._store("create", kind.kind, namespace, meta["name"], body)

    async def merge_patch(self, kind: Kind, namespace: str, name: str, patch: Object, *,
                          subresource: str | None = None) -> Object:
        if (seconds := self.delay(kind.kind, name, patch)) > 0:
            await asyncio.sleep(seconds)
        current = self._current(kind, namespace, name)
        wanted = (patch.get("metadata") or {}).get("resourceVersion")
        if wanted is not None and wanted != current["metadata"]["resourceVersion"]:
            raise Conflict(f"{kind.kind} {namespace}/{name}: resourceVersion {wanted} is stale")
        written = self._store(f"patch {subresource or ''}".strip(), kind.kind, namespace, name,
                              _merge(copy.deepcopy(current), patch))
        await self.before_answer(kind.kind, name, patch)
        return written

    async def json_patch(self, kind: Kind, namespace: str, name: str, ops: list[Object], *,
                         subresource: str | None = None) -> Object:
        current = self._current(kind, namespace, name)
        try:
            patched = apply(copy.deepcopy(current), ops)
        except JsonPatchError as error:
            raise Conflict(str(error)) from None
        return self._store(f"patch {subresource or ''}".strip(), kind.kind, namespace, name, patched)

    async def patch_status(self, kind: Kind, namespace: str, name: str, status: Object) -> Object:
        return await self.merge_patch(kind, namespace, name, {"status": status}, subresource="status")

    async def apply(self, kind: Kind, namespace: str, name: str, body: Object) -> Object:
        key = (kind.kind, namespace, name)
        merged = _merge(copy.deepcopy(self.objects[key]), body) if key in self.objects else copy.deepcopy(body)
        merged.setdefault("metadata", {}).update(name=name, namespace=namespace)
        return self._store("apply", kind.kind, namespace, name, merged)

    async def delete(self, kind: Kind, namespace: str, name: str, *,
                     resource_version: str | None = None, uid: str | None = None) -> None:
        current = self._current(kind, namespace, name)
        if resource_version is not None and resource_version != current["metadata"]["resourceVersion"]:
            raise Conflict("stale resourceVersion")
        del self.objects[(kind.kind, namespace, name)]
        self.writes.append(Write("delete", kind.kind, namespace, name, None))
        self._watch("DELETED", current)

    # --- inside ----------------------------------------------------------------------------

    def _current(self, kind: Kind, namespace: str, name: str) -> Object:
        found = self.objects.get((kind.kind, namespace, name))
        if found is None:
            raise NotFound(f"{kind.kind} {namespace}/{name} not found")
        return found

    def _store(self, verb: str, kind: str, namespace: str, name: str, obj: Object) -> Object:
        meta = obj.setdefault("metadata", {})
        created = (kind, namespace, name) not in self.objects
        if created:
            meta.setdefault("uid", f"uid-{kind}-{namespace}-{name}")
            meta.setdefault("creationTimestamp", datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"))
            meta["generation"] = 1
        elif obj.get("spec") != self.objects[(kind, namespace, name)].get("spec"):
            meta["generation"] = int(meta.get("generation") or 1) + 1
        meta["resourceVersion"] = str(next(self._versions))
        self.objects[(kind, namespace, name)] = obj
        self.writes.append(Write(verb, kind, namespace, name, copy.deepcopy(obj)))
        self._watch("ADDED" if created else "MODIFIED", copy.deepcopy(obj))
        return copy.deepcopy(obj)


async def _at_once(*_: Any) -> None:
    return None


def _merge(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge key by key, null removes, anything else replaces."""
    if not isinstance(patch, Mapping):
        return copy.deepcopy(patch)
    if not isinstance(target, dict):
        target = {}
    for key, value in patch.items():
        if value is None:
            target.pop(key, None)
        else:
            target[key] = _merge(target.get(key), value)
    return target


ACTORS = {"exporter": ExporterActor, "lease": LeaseActor, "pool": PoolActor, "handle": HandleActor,
          "claim": ClaimActor}


@asynccontextmanager
async def world(topology: Callable[[TopologyState], TopologyActor] = TopologyActor,
                registry: CollectorRegistry | None = None,
                kinds: Mapping[str, Callable[[str, Context], Any]] | None = None,
                **settings: Any) -> AsyncIterator[tuple[ActorSystem, MemoryApi]]:
    """The topology and every object actor on one mailbox, over a `MemoryApi` whose writes they watch.
    `topology` makes the topology actor (a test's slower one), `registry` gets the mailbox metrics, `kinds`
    replaces the actors of some kinds (a test's scripted stand-in, by address prefix); `settings` go to the
    actors' `Context` (decision_window, offer_timeout, ...)."""
    state = topology_state(Topology(OPS))
    async with ActorSystem(registry=registry) as system:
        api = MemoryApi(lambda kind, obj: system.tell("topology", Event(kind, obj)))
        ctx = Context(api=api, operator_namespace=OPS, **settings)
        tolerant = Supervision(max_restarts=1000, within=60.0, backoff=0.01, max_backoff=0.1)
        system.register("topology", lambda _: topology(state), capacity=100_000, supervision=tolerant,
                        ask_timeout=TOPOLOGY_ASK_TIMEOUT)
        for prefix, actor in {**ACTORS, **(kinds or {})}.items():
            system.register(prefix, lambda a, actor=actor: actor(a, ctx), supervision=tolerant)
        system.tell("topology", Synced())
        yield system, api
