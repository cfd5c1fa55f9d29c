"""The handle actor: one ResourceHandle and the resources it stands for.

It renders each of the handle's resources (`handle_render`: the provider's
override, the name from the handle's guid, the placement, the `lessor.dev/`
labels), creates or updates them with server-side apply, and follows their
state: the topology routes every change of a resource labelled with the
handle here. A provider with `resourceRequiresClaim` gets nothing created
until a claim binds the handle; a rendering that would change an existing
resource's apiVersion or kind is refused, never applied.

Who decides what: the pool (or the claim that created the handle) decides
the binding; the claim decides the templates and the lifespan end and
writes them into the handle's spec; this actor decides what exists. It is
the only writer of the handle's status (each resource's state, readiness,
the `Rendered` condition) and of `spec.resources[].reference`, and the only
one that creates, updates or deletes created resources. The claim actor
copies the states from this status into the claim's.

The end: at `spec.lifespan.end`, or once its claim is deleted, the actor
deletes the resources, waits until they are gone, then deletes the handle
(and the claim, seeing its handle gone after its end, deletes itself). A
handle deleted by someone else (its pool, an admin) takes its resources
with it.

State: the handle, its providers, its claim, the created resources as last
seen, what this incarnation applied. Rebuilt from the topology on restart;
server-side apply is idempotent, and a restarted actor applies only what
differs from what exists.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.jsonpatch import json_equal
from lessor.mailbox import Actor

from .api import CLAIM, HANDLE, ApiFailure, Kind, NotFound
from .claim_protocol import KINDS, ClaimDeleted, WatchKind
from .claim_spec import resource_state
from .claim_world import (
    CLAIM_KIND,
    HANDLE_KIND,
    claim_of,
    deleting,
    generation,
    load_providers,
    newer,
    reference_of,
    resource_key,
    resource_kind,
    timestamp,
)
from .conditions import merge_condition, same_conditions
from .context import Context, split_address
from .handle_render import RenderedResource, render_handle, rendered_condition, requester_of
from .observed import Observed
from .provider import Provider, Readiness
from .queries import TOPOLOGY, GetObject, HandleResources

log = logging.getLogger(__name__)

NAMESPACE = Kind("v1", "Namespace")
USER = Kind("user.openshift.io/v1", "User")
IDENTITY = Kind("user.openshift.io/v1", "Identity")
_RETRY = 5.0  # seconds before trying again what the API refused (a namespace or CRD may appear)
_GONE_CHECK = 1.0  # seconds between checks that deleted resources (with finalizers) are gone

Key = tuple[str, str, str]  # (observed kind, namespace, name) of a created resource


@dataclass(frozen=True, slots=True)
class _Reconcile:
    """Sent to self: try again after the API refused something."""


@dataclass(frozen=True, slots=True)
class _End:
    """Sent to self at `spec.lifespan.end`, and while waiting for resources with finalizers to go."""


class HandleActor(Actor):
    __slots__ = ("ctx", "namespace", "name", "obj", "providers", "claim", "live", "applied", "failures",
                 "watched", "requester", "ending")

    def __init__(self, address: str, ctx: Context) -> None:
        self.ctx = ctx
        self.namespace, self.name = split_address(address)
        self.obj: Mapping[str, Any] | None = None
        self.providers: dict[str, Provider] = {}
        self.claim: Mapping[str, Any] | None = None
        self.live: dict[Key, Mapping[str, Any]] = {}
        self.applied: dict[int, str] = {}  # index -> the definition this incarnation last applied, as JSON
        self.failures: dict[int, RenderedResource] = {}  # index -> why the API refused its definition
        self.watched: set[tuple[str, str]] = set()
        self.requester: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] | None = None
        self.ending = False

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        self.obj = await self.ask(TOPOLOGY, GetObject(HANDLE_KIND, self.namespace, self.name))
        self.live = {resource_key(reference_of(o)): o
                     for o in await self.ask(TOPOLOGY, HandleResources(self.namespace, self.name))}
        if self.obj is None:  # deleted while this actor was down: what it made goes too
            await self._delete_resources()
            self.stop()
            return
        self.providers = await load_providers(self, self.namespace)
        if (bound := claim_of(self.obj)) is not None:
            self.claim = await self.ask(TOPOLOGY, GetObject(CLAIM_KIND, *bound))
        await self._reconcile()

    async def receive(self, message: Any) -> Any:
        match message:
            case Observed(kind="ResourceHandle", object=None):
                await self._delete_resources()
                self.stop()
            case Observed(kind="ResourceHandle", object=obj) if newer(obj, self.obj):
                await self._observed_self(obj)
            case Observed(kind="ResourceClaim", namespace=namespace, name=name, object=obj) \
                    if (namespace, name) == claim_of(self.obj):
                if obj is None:
                    await self._claim_deleted()
                else:
                    self.claim = obj
                    await self._reconcile()
            case Observed(kind="ResourceProvider"):
                self.providers = await load_providers(self, self.namespace)
                await self._reconcile()
            case Observed(kind="ResourceHandle" | "ResourceClaim" | "ResourcePool"):
                pass  # an older snapshot of ourselves, or someone else's claim
            case Observed(kind=kind, namespace=namespace, name=name, object=obj):  # a created resource
                key = (kind, namespace, name)
                if obj is None:
                    self.live.pop(key, None)
                elif newer(obj, self.live.get(key)):
                    self.live[key] = obj
                await self._reconcile()  # copies the state; recreates a resource deleted behind our back
            case ClaimDeleted(namespace=namespace, claim=claim) if (namespace, claim) == claim_of(self.obj):
                await self._claim_deleted()
            case _Reconcile():
                await self._reconcile()
            case _End():
                await self._end()
            case ClaimDeleted():
                pass
            case _:
                log.warning("handle %s/%s: unexpected message %r", self.namespace, self.name, message)

    async def _observed_self(self, obj: Mapping[str, Any]) -> None:
        before = claim_of(self.obj)
        self.obj = obj
        if (bound := claim_of(obj)) != before:  # just bound: its claim's values and the requester matter now
            self.claim = await self.ask(TOPOLOGY, GetObject(CLAIM_KIND, *bound)) if bound else None
            self.requester = None
        await self._reconcile()

    async def _claim_deleted(self) -> None:
        """The topology says the claim is gone; the API decides (a claim re-created under the name keeps us)."""
        bound = claim_of(self.obj)
        if bound is None:
            return
        self.claim = await self.ctx.api.get(CLAIM, *bound)
        if self.claim is None:
            await self._end()
        else:
            await self._reconcile()

    # --- making the resources exist -------------------------------------------------------

    async def _reconcile(self) -> None:
        if self.obj is None or self.ending or deleting(self.obj):
            return
        now = self.ctx.now()
        end = timestamp(((self.obj.get("spec") or {}).get("lifespan") or {}).get("end"))
        if end is not None and end <= now:
            await self._end()
            return
        if end is not None:
            self.schedule("end", _End(), at=end)
        else:
            self.cancel("end")
        bound = claim_of(self.obj)
        if bound is not None and self.claim is None:  # not in the topology: deleted, or not yet seen
            self.claim = await self.ctx.api.get(CLAIM, *bound)
            if self.claim is None:
                await self._end()
                return
        identity, user = await self._requester()
        results = render_handle(self.obj, self.providers, operator_namespace=self.ctx.operator_namespace,
                                claim=self.claim, requester_identity=identity, requester_user=user, now=now)
        self.failures = {}
        for result in results:
            if result.definition is not None:
                await self._apply(result)
        await self._write_references(results)
        await self._write_status(results, now)
        if self.failures:
            self.schedule("retry", _Reconcile(), delay=_RETRY)

    async def _apply(self, result: RenderedResource) -> None:
        """Server-side apply the definition, unless what exists already says all of it."""
        assert result.definition is not None and result.reference is not None
        reference, definition = result.reference, result.definition
        key = resource_key(reference)
        live = self.live.get(key)
        text = json.dumps(definition, sort_keys=True)
        if live is not None and _contains(live, definition) and self.applied.get(result.index, text) == text:
            self.applied[result.index] = text
            return
        self._watch(reference)
        try:
            self.live[key] = await self.ctx.api.apply(resource_kind(reference), reference["namespace"],
                                                      reference["name"], definition)
            self.watched.add((reference["apiVersion"], reference["kind"]))
        except ApiFailure as error:
            message = (f"spec.resources[{result.index}]: the API server refused {reference['kind']} "
                       f"{reference['namespace']}/{reference['name']}: {error}")
            self.failures[result.index] = RenderedResource(result.index, None, reference, "ApplyFailed", message)
            return
        self.applied[result.index] = text

    def _watch(self, reference: Mapping[str, Any]) -> None:
        """Ask the app to watch this kind, so the resource's changes reach us; asked before each apply until
        one of the kind succeeds, so a CRD installed after its provider is watched once it is served."""
        kind = (reference["apiVersion"], reference["kind"])
        if kind not in self.watched:
            self.tell(KINDS, WatchKind(*kind))

    async def _requester(self) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """(identity, user) named by the claim namespace's requester annotation, for overrides that use them."""
        bound = claim_of(self.obj)
        entries = ((self.obj or {}).get("spec") or {}).get("resources") or ()
        used = {(entry.get("provider") or {}).get("name") for entry in entries}
        if bound is None or not any(_uses_requester(p) for name, p in self.providers.items() if name in used):
            return None, None
        if self.requester is None:
            user = identity = None
            try:
                requester = requester_of(await self.ctx.api.get(NAMESPACE, "", bound[0]))
                user = await self.ctx.api.get(USER, "", requester) if requester else None
                identities = (user or {}).get("identities") or []
                identity = await self.ctx.api.get(IDENTITY, "", identities[0]) if identities else None
            except ApiFailure as error:  # no OpenShift users here, or no right to read them: templates see none
                log.info("handle %s/%s: requester of %s unknown: %s", self.namespace, self.name, bound[0], error)
            self.requester = (identity, user)
        return self.requester

    # --- writes ---------------------------------------------------------------------------

    async def _write_references(self, results: list[RenderedResource]) -> None:
        """Record each created resource in `spec.resources[].reference`: its name is kept from then on."""
        assert self.obj is not None
        entries = (self.obj.get("spec") or {}).get("resources") or []
        ops = [{"op": "add", "path": f"/spec/resources/{r.index}/reference", "value": r.reference}
               for r in results
               if r.definition is not None and r.reference is not None and r.index not in self.failures
               and resource_key(r.reference) in self.live and entries[r.index].get("reference") != r.reference]
        if not ops:
            return
        try:
            self.obj = await self.ctx.api.json_patch(HANDLE, self.namespace, self.name, ops)
        except NotFound:
            pass  # deleted: the deletion event ends us
        except ApiFailure as error:
            log.warning("handle %s/%s: recording references failed: %s", self.namespace, self.name, error)

    async def _write_status(self, results: list[RenderedResource], now: datetime) -> None:
        assert self.obj is not None
        entries = (self.obj.get("spec") or {}).get("resources") or []
        resources = []
        for result, entry in zip(results, entries):
            provider_name = (entry.get("provider") or {}).get("name")
            provider = self.providers.get(provider_name or "")
            reference = result.reference or entry.get("reference")
            live = self.live.get(resource_key(reference)) if reference else None
            state = resource_state(live) if live is not None else None
            readiness = (provider.readiness(state, handle=self.obj, claim=self.claim, now=now) if provider
                         else Readiness(False))
            item: dict[str, Any] = {
                "name": entry.get("name") or (provider.resource_name if provider else ""),
                "provider": {"name": provider_name},
                "ready": readiness.ready is True,
                "healthy": (result.rendered or result.waiting) and result.index not in self.failures,
            }
            if live is not None and reference is not None:
                item["reference"] = dict(reference)
                item["state"] = state
            resources.append(item)
        current = self.obj.get("status") or {}
        shown = [self.failures.get(r.index, r) for r in results]
        conditions = merge_condition(current.get("conditions"),
                                     rendered_condition(shown, now=now, generation=generation(self.obj)))
        status = {"resources": resources, "ready": all(r["ready"] for r in resources),
                  "healthy": all(r["healthy"] for r in resources), "conditions": conditions}
        if all(json_equal(current.get(key), status[key]) for key in ("resources", "ready", "healthy")) \
                and same_conditions(current.get("conditions"), conditions):
            return
        try:
            self.obj = await self.ctx.api.patch_status(HANDLE, self.namespace, self.name, status)
        except NotFound:
            pass

    # --- the end --------------------------------------------------------------------------

    async def _end(self) -> None:
        """Delete the resources; once they are gone, the handle. Then wait to see the handle go."""
        self.ending = True
        self.cancel("retry")
        await self._delete_resources()
        for reference in self._references():
            if await self.ctx.api.get(resource_kind(reference), reference["namespace"], reference["name"]):
                self.schedule("end", _End(), delay=_GONE_CHECK)  # a finalizer still holds it
                return
        try:
            await self.ctx.api.delete(HANDLE, self.namespace, self.name)
        except ApiFailure as error:
            log.warning("handle %s/%s: deleting the handle failed: %s", self.namespace, self.name, error)
            self.schedule("end", _End(), delay=_RETRY)

    async def _delete_resources(self) -> None:
        for reference in self._references():
            try:
                await self.ctx.api.delete(resource_kind(reference), reference["namespace"], reference["name"])
            except ApiFailure as error:
                log.warning("handle %s/%s: deleting %s %s/%s failed: %s", self.namespace, self.name,
                            reference["kind"], reference["namespace"], reference["name"], error)
            self.live.pop(resource_key(reference), None)

    def _references(self) -> list[dict[str, str]]:
        """Every resource this handle made: referenced in its spec or status, or seen with its label."""
        found = {resource_key(reference_of(obj)): reference_of(obj) for obj in self.live.values()}
        spec, status = (self.obj or {}).get("spec") or {}, (self.obj or {}).get("status") or {}
        for entry in [*(spec.get("resources") or ()), *(status.get("resources") or ())]:
            reference = entry.get("reference") if isinstance(entry, Mapping) else None
            if isinstance(reference, Mapping) and reference.get("name") and reference.get("kind"):
                found.setdefault(resource_key(reference), {key: str(reference.get(key) or "") for key in
                                                           ("apiVersion", "kind", "name", "namespace")})
        return list(found.values())


def _contains(value: Any, pattern: Any) -> bool:
    """Whether `value` (what exists) already has everything `pattern` (the definition) says."""
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(k in value and _contains(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(value, list) and len(value) == len(pattern) and all(map(_contains, value, pattern))
    return json_equal(value, pattern)


def _uses_requester(provider: Provider) -> bool:
    return provider.template_enable and "requester_" in json.dumps(provider.override)
