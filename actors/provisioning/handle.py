"""The handle actor: one ResourceHandle and the resources it stands for.

It renders each of the handle's resources (`handle_render`: the provider's
override, the name from the handle's guid, the placement, the `lessor.dev/`
labels), creates each one whose name is free and updates with server-side
apply only those that carry this handle's labels (`ownership`), and follows
their state: the topology routes every change of a resource labelled with
the handle here. A name taken by anything else is `ResourceConflict`: that
resource is never changed, deleted or shown, but for an administrator's
import (a resource the handle's hand-written status names, `ownership.imported`),
which is adopted. A provider with
`resourceRequiresClaim` gets nothing created until a claim binds the
handle; a rendering that would change an existing resource's apiVersion or
kind is refused, never applied.

Who decides what: the pool (or the claim that created the handle) decides
the binding; the claim decides the templates and the lifespan end and
writes them into the handle's spec; this actor decides what exists. It is
the only writer of the handle's status (each resource's state, readiness,
the `Rendered` condition) and of `spec.resources[].reference` (but for a
handle waiting in its pool, whose references its status reports and its
pool's binding records), and the only one that creates, updates or deletes
created resources. The claim actor
copies the states from this status into the claim's.

The end: at `spec.lifespan.end`, or once its claim is deleted, the actor
deletes the resources, waits until they are gone, then deletes the handle
(and the claim, seeing its handle gone after its end, deletes itself). A
handle deleted by someone else (its pool, an admin) takes its resources
with it.

State: the handle, its providers, its claim, the created resources as last
seen. Rebuilt from the topology on restart. What was last applied is
recorded on each resource itself (`APPLIED`, a digest of the definition),
not in this actor, so every observation, by whichever incarnation, applies
exactly when the rendering differs from what the resource holds or was last
given: a definition that only leaves a field out changes the digest, though
the resource still contains everything the definition says.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import deleting, generation, newer
from lessor.model.handles import claim_of, reference_of
from lessor.model.jsonpatch import json_equal
from lessor.model.keys import reference_key
from lessor.model.kinds import kind_of
from lessor.model.labels import APPLIED
from lessor.model.views.meta import Meta
from lessor.model.views.provisioning import HandleView, provider_name
from lessor.templates import offload

from ..api import CLAIM, HANDLE, POOL, PROVIDER, AlreadyExists, ApiFailure, Kind, NotFound
from .protocol import KINDS, ClaimDeleted, WatchKind
from .claim_spec import resource_state
from ..conditions import READY, merge_condition, new_condition, same_conditions
from ..context import Context
from ..events import NORMAL, WARNING
from .binding import ending, free
from .handle_render import (RenderedResource, render_handle, rendered_condition, requester_of, status_summary,
                            tracking, uses_requester)
from ..object_actor import GaveUp, Lost, ObjectActor, commit
from ..observed import Observed
from .ownership import handle_of, imported, owned_by, owner_text, rendered_before
from .provider import Provider, Readiness, load_providers
from ..queries import TOPOLOGY, GetObject
from .questions import HandleResources

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


class HandleActor(ObjectActor):
    __slots__ = ("providers", "claim", "live", "failures", "watched", "requester", "ending")
    kind = HANDLE  # given up on a version (`guard`): its resources stay as they are
    view_kind = HandleView
    wake_kinds = (PROVIDER.kind,)
    honours_ignore = True

    def __init__(self, address: str, ctx: Context) -> None:
        super().__init__(address, ctx)
        self.providers: dict[str, Provider] = {}
        self.claim: Mapping[str, Any] | None = None
        self.live: dict[Key, Mapping[str, Any]] = {}
        self.failures: dict[int, RenderedResource] = {}  # index -> why the API refused its definition
        self.watched: set[tuple[str, str]] = set()
        self.requester: tuple[Mapping[str, Any] | None, Mapping[str, Any] | None] | None = None
        self.ending = False

    @property
    def view(self) -> HandleView:
        """The handle as last observed (or written), typed; built once per version."""
        view = self.seen_as(HandleView)
        assert view is not None
        return view

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        self.obj = await self.ask(TOPOLOGY, GetObject(HANDLE.kind, self.namespace, self.name))
        self.live = {reference_key(reference_of(o)): o
                     for o in await self.ask(TOPOLOGY, HandleResources(self.namespace, self.name))
                     if owned_by(o, self.namespace, self.name)}
        if self.obj is None:  # deleted while this actor (or lessor) was down: what it made goes too, once the
            if await self.ctx.api.get(HANDLE, self.namespace, self.name) is None:  # API confirms it is gone
                await self._delete_resources()
            self.stop()
            return
        if self.view.meta.ignored:
            return  # left alone until the label goes (`ObjectActor.still_parked`)
        self.providers = await load_providers(self, self.namespace)
        if (bound := claim_of(self.obj)) is not None:
            self.claim = await self.ask(TOPOLOGY, GetObject(CLAIM.kind, *bound))
        await self._reconcile()

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case Observed(kind=HANDLE.kind, object=None):
                await self._delete_resources()
                self.stop()
            case Observed(kind=HANDLE.kind, object=Mapping() as obj) if newer(obj, self.obj):
                await self._observed_self(obj)
            case Observed(kind=CLAIM.kind, namespace=namespace, name=name, object=obj) \
                    if (namespace, name) == claim_of(self.obj):
                if obj is None:
                    await self._claim_deleted()
                else:
                    self.claim = obj
                    await self._reconcile()
            case Observed(kind=PROVIDER.kind):
                self.providers = await load_providers(self, self.namespace)
                await self._reconcile()
            case Observed(kind=HANDLE.kind | CLAIM.kind | POOL.kind):
                pass  # an older snapshot of ourselves, or someone else's claim
            case Observed(kind=kind, namespace=namespace, name=name, object=obj):  # a created resource
                key = (kind, namespace, name)
                if obj is None or not owned_by(obj, self.namespace, self.name):  # gone, or not ours (any more)
                    self.live.pop(key, None)
                elif newer(obj, self.live.get(key)):
                    self.live[key] = obj
                await self._reconcile()  # copies the state; recreates a resource deleted behind our back
            case ClaimDeleted(namespace=namespace, claim=claim) if (namespace, claim) == claim_of(self.obj):
                await self._claim_deleted()
            case _Reconcile():
                await self._reconcile()
            case _End() if claim_of(self.obj) is None:
                await self._reconcile()  # unbound: ends only as `_reconcile` decides (`_end_unbound`)
            case _End():
                await self._end()
            case ClaimDeleted():
                pass
            case _:
                self.unexpected(message)

    async def _observed_self(self, obj: Mapping[str, Any]) -> None:
        before = claim_of(self.obj)
        self.obj = obj
        if (bound := claim_of(obj)) != before:  # just bound: its claim's values and the requester matter now
            self.claim = await self.ask(TOPOLOGY, GetObject(CLAIM.kind, *bound)) if bound else None
            self.requester = None
        await self._reconcile()

    async def _claim_deleted(self) -> None:
        """The topology says the claim is gone; the API decides (a claim re-created under the name keeps us)."""
        bound = claim_of(self.obj)
        if bound is None or self.ending:  # told twice (by the claim's actor and by the topology): ending already
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
        view = self.view
        end = view.lifespan_end
        if view.claim is None and view.pooled:
            end = None  # a pool's unbound handle: its pool replaces it at that end, under a precondition
        if end is not None and end <= now and view.claim is None:
            await self._end_unbound()
            return
        if end is not None and end <= now:
            await self._end()
            return
        if end is not None:
            self.schedule("end", _End(), at=end)
        else:
            self.cancel("end")
        bound = view.claim
        if bound is not None and self.claim is None:  # not in the topology: deleted, or not yet seen
            self.claim = await self.ctx.api.get(CLAIM, *bound)
            if self.claim is None:
                await self._end()
                return
        identity, user = await self._requester()
        results = await offload(render_handle, _with_recorded_references(self.view), self.providers,
                                queue=self.ctx.rendering, key=self._tenant(),
                                operator_namespace=self.ctx.operator_namespace, claim=self.claim,
                                requester_identity=identity, requester_user=user, live=self.live, now=now)
        self.failures = {}
        for result in results:
            if result.definition is not None:
                await self._apply(result)
        await self._write_references(results)
        await self._write_status(results, now)
        if self.failures:
            self.schedule("retry", _Reconcile(), delay=_RETRY)

    def _tenant(self) -> str:
        """Whose render work this is (the fair render queue's key): the bound claim's namespace, else ours."""
        bound = claim_of(self.obj)
        return bound[0] if bound is not None else self.namespace

    async def _apply(self, result: RenderedResource) -> None:
        """Create the resource if its name is free, else update it if it is ours; never touch another's.

        Create-if-absent comes first, so a name taken between our look and our write makes the create fail
        rather than the apply merge; an apply names the uid of the resource found ours, so it cannot reach
        a resource re-created under the name meanwhile. Nothing is written when the resource already holds
        the definition, digest included (`stamped`).
        """
        assert result.definition is not None and result.reference is not None
        reference, definition = result.reference, stamped(result.definition)
        key = reference_key(reference)
        live = self.live.get(key)
        if live is not None and _contains(live, definition):
            return
        self._watch(reference)
        kind, namespace, name = kind_of(reference), reference["namespace"], reference["name"]
        try:
            created = None
            if live is None:
                try:
                    live = created = await self.ctx.api.create(kind, namespace, definition)
                except AlreadyExists:
                    live = await self.ctx.api.get(kind, namespace, name)
                if live is None:  # deleted between the create and the read: the retry creates it
                    raise ApiFailure("it was deleted while being created; trying again")
                if not owned_by(live, self.namespace, self.name):
                    if not await self._imported(result, live):
                        self._conflict(result, live)
                        return
                    live = await self._adopt(result, live)
                self.live[key] = live
            if created is None:
                metadata = {**definition["metadata"], "uid": Meta.of(live).uid or None}
                self.live[key] = await self.ctx.api.apply(kind, namespace, name, {**definition, "metadata": metadata})
            self.watched.add((reference["apiVersion"], reference["kind"]))
        except ApiFailure as error:
            self.live.pop(key, None)  # perhaps re-created by someone else: the retry looks again
            message = (f"spec.resources[{result.index}]: the API server refused {reference['kind']} "
                       f"{namespace}/{name}: {error}")
            self.failures[result.index] = RenderedResource(result.index, None, reference, "ApplyFailed", message)
            self.ctx.events.record(HANDLE, self.obj, WARNING, "ApplyFailed", message, "Apply")

    async def _imported(self, result: RenderedResource, found: Mapping[str, Any]) -> bool:
        """Whether `found` is this handle's by an administrator's import (`ownership.imported`), judged from the
        handle as the API server has it now: the status this actor last saw may predate the administrator's."""
        assert result.reference is not None
        if self.namespace != self.ctx.operator_namespace or self.obj is None or handle_of(found) is not None \
                or rendered_before(self.obj):
            return False
        fresh = await self.ctx.api.get(HANDLE, self.namespace, self.name)
        if fresh is None or Meta.of(fresh).ignored:
            return False  # gone, or labelled again: its own event ends or parks us
        if newer(fresh, self.obj):
            self.obj = fresh
        return imported(fresh, result.index, result.reference, found)

    async def _adopt(self, result: RenderedResource, found: Mapping[str, Any]) -> Mapping[str, Any]:
        """Mark an administrator's resource as this handle's (`ownership.imported`), under the resourceVersion
        it was judged at: from then on it is ours like any resource lessor created. A change meanwhile makes
        the patch fail, and the retry judges it again."""
        assert result.reference is not None and self.obj is not None
        reference, meta = result.reference, Meta.of(found)
        labels, marks = tracking(self.obj, provider_name(self.view.resources[result.index]) or "")
        adopted = await self.ctx.api.merge_patch(kind_of(reference), reference["namespace"], reference["name"], {
            "metadata": {"resourceVersion": meta.resource_version or None, "labels": labels, "annotations": marks}})
        self.ctx.events.record(HANDLE, self.obj, NORMAL, "Adopted", (
            f"spec.resources[{result.index}]: adopted {reference['kind']} {reference['namespace']}/"
            f"{reference['name']}, which the handle's status names (an administrator's import)"), "Adopt")
        log.info("handle %s/%s: adopted %s %s/%s", self.namespace, self.name, reference["kind"],
                 reference["namespace"], reference["name"])
        return adopted

    def _conflict(self, result: RenderedResource, found: Mapping[str, Any]) -> None:
        """The name is taken by a resource that is not this handle's: refuse, touching nothing."""
        assert result.reference is not None
        reference = result.reference
        message = (f"spec.resources[{result.index}]: {reference['kind']} {reference['namespace']}/"
                   f"{reference['name']} already exists and {owner_text(found)}; lessor neither changes nor "
                   "deletes it: delete it or give the resource another name")
        self.failures[result.index] = RenderedResource(result.index, None, reference, "ResourceConflict", message)
        self.ctx.events.record(HANDLE, self.obj, WARNING, "ResourceConflict", message, "Create")

    def _watch(self, reference: Mapping[str, Any]) -> None:
        """Ask the app to watch this kind, so the resource's changes reach us; asked before each apply until
        one of the kind succeeds, so a CRD installed after its provider is watched once it is served."""
        kind = (reference["apiVersion"], reference["kind"])
        if kind not in self.watched:
            self.tell(KINDS, WatchKind(*kind))

    async def _requester(self) -> tuple[Mapping[str, Any] | None, Mapping[str, Any] | None]:
        """(identity, user) named by the claim namespace's requester annotation, for overrides that use them."""
        bound = claim_of(self.obj)
        used = {provider_name(entry) for entry in self.view.resources} if self.obj is not None else set()
        if bound is None or not any(uses_requester(p) for name, p in self.providers.items() if name in used):
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
        """Record each created resource in `spec.resources[].reference`: its name is kept from then on.

        Not while the handle waits in its pool: its status records the references (and keeps the names
        meanwhile, `_with_recorded_references`), and the pool's binding writes them into the spec, in the
        patch that binds it. One write less per pooled handle.
        """
        view = self.view
        if view.claim is None and view.pooled:
            return
        entries = view.resources
        ops = [{"op": "add", "path": f"/spec/resources/{r.index}/reference", "value": r.reference}
               for r in results
               if r.definition is not None and r.reference is not None and r.index not in self.failures
               and reference_key(r.reference) in self.live and entries[r.index].get("reference") != r.reference]
        if not ops:
            return
        try:
            self.obj = await self.ctx.api.json_patch(HANDLE, self.namespace, self.name, ops)
        except NotFound:
            pass  # deleted: the deletion event ends us
        except ApiFailure as error:
            log.warning("handle %s/%s: recording references failed: %s", self.namespace, self.name, error)

    async def _write_status(self, results: list[RenderedResource], now: datetime) -> None:
        view = self.view
        entries = view.resources
        resources = []
        for result, entry in zip(results, entries):
            name = provider_name(entry)
            provider = self.providers.get(name or "")
            reference = result.reference or entry.get("reference")
            live = self.live.get(reference_key(reference)) if reference else None
            state = resource_state(live) if live is not None else None
            readiness = (await offload(provider.readiness, state, queue=self.ctx.rendering, key=self._tenant(), handle=self.obj,
                                        claim=self.claim, now=now)
                         if provider else Readiness(False))
            health = (await offload(provider.healthy, state, queue=self.ctx.rendering, key=self._tenant(), handle=self.obj,
                                     claim=self.claim, now=now)
                      if provider else None)
            item: dict[str, Any] = {
                "name": entry.get("name") or (provider.resource_name if provider else ""),
                "provider": {"name": name},
                "ready": readiness.ready is True,
                "healthy": bool(result.rendered or result.waiting) and result.index not in self.failures
                and health is not False,
            }
            if live is not None and reference is not None:
                item["reference"] = dict(reference)
                item["state"] = state
            if result.waiting_for is not None:
                item["waitingFor"] = result.waiting_for
            resources.append(item)
        current = view.status
        shown = [self.failures.get(r.index, r) for r in results]
        conditions = merge_condition(current.get("conditions"),
                                     rendered_condition(shown, now=now, generation=generation(view.body)))
        conditions = merge_condition(conditions, ready_condition(resources, now=now, generation=generation(view.body)))
        status = {"resources": resources, "ready": all(r["ready"] for r in resources),
                  "healthy": all(r["healthy"] for r in resources), "conditions": conditions,
                  "summary": await self._summary(entries, resources, now)}
        if all(json_equal(current.get(key), status[key]) for key in ("resources", "ready", "healthy", "summary")) \
                and same_conditions(current.get("conditions"), conditions):
            return
        await self.write_status(status)  # a deleted handle: the deletion event ends us

    async def _summary(self, entries: Sequence[Mapping[str, Any]], resources: list[dict[str, Any]],
                       now: datetime) -> Any:
        """`status.summary` from the last resource's provider's `statusSummaryTemplate`, as its claim shows it
        (the pool/claim tool writes it on both); a template that fails leaves none and says why in an Event."""
        assert self.obj is not None
        last = self.providers.get((provider_name(entries[-1]) or "") if entries else "")
        if last is None:
            return None
        summary, error = await offload(status_summary, last, self.obj, self.claim, resources, now,
                                       queue=self.ctx.rendering, key=self._tenant())
        if error:
            self.ctx.events.record(HANDLE, self.obj, WARNING, "SummaryFailed", error, "Summarize")
        return summary

    # --- the end --------------------------------------------------------------------------

    async def _end_unbound(self) -> None:
        """A free-standing handle's end with no claim: the handle goes first, under the resourceVersion it was
        seen unbound at, so a claim that binds it meanwhile keeps it (`binding`); its deletion then takes its
        resources (`receive`, the handle's deletion)."""
        assert self.obj is not None
        name = self.name

        async def write(current: Mapping[str, Any]) -> None:
            await self.ctx.api.delete(HANDLE, self.namespace, name,
                                      resource_version=Meta.of(current).resource_version or None)

        try:
            outcome = await commit(self.ctx.api, HANDLE, self.namespace, name, self.obj, write,
                                   lambda fresh: free(fresh) and ending(fresh, self.ctx.now()))
        except ApiFailure as error:
            log.warning("handle %s/%s: deleting the unclaimed handle failed: %s", self.namespace, self.name, error)
            self.schedule("end", _End(), delay=_RETRY)
            return
        if isinstance(outcome, Lost | GaveUp):  # bound (or given a new end) meanwhile: it lives on
            await self._observed_self(outcome.fresh)

    async def _end(self) -> None:
        """Delete the resources; once they are gone, the handle. Then wait to see the handle go."""
        self.ending = True
        self.cancel("retry")
        await self._delete_resources()
        for reference in self._references():
            if await self._ours(reference) is not None:
                self.schedule("end", _End(), delay=_GONE_CHECK)  # a finalizer still holds it
                return
        try:
            await self.ctx.api.delete(HANDLE, self.namespace, self.name)
        except ApiFailure as error:
            log.warning("handle %s/%s: deleting the handle failed: %s", self.namespace, self.name, error)
            self.schedule("end", _End(), delay=_RETRY)

    async def _delete_resources(self) -> None:
        """Delete what is ours, each read fresh and deleted under its uid: a resource that is not this
        handle's, or was re-created under the name by someone else, stays."""
        for reference in self._references():
            self.live.pop(reference_key(reference), None)
            try:
                found = await self._ours(reference)
                if found is not None and not deleting(found):
                    await self.ctx.api.delete(kind_of(reference), reference["namespace"], reference["name"],
                                              uid=Meta.of(found).uid or None)
            except ApiFailure as error:  # a Conflict: the uid changed, it is no longer the one we made
                log.warning("handle %s/%s: deleting %s %s/%s failed: %s", self.namespace, self.name,
                            reference["kind"], reference["namespace"], reference["name"], error)

    async def _ours(self, reference: Mapping[str, Any]) -> Mapping[str, Any] | None:
        """The resource as the API has it now, if it is this handle's; None if gone or someone else's."""
        found = await self.ctx.api.get(kind_of(reference), reference["namespace"], reference["name"])
        return found if owned_by(found, self.namespace, self.name) else None

    def _references(self) -> list[dict[str, str]]:
        """Every resource this handle made: referenced in its spec or status, or seen with its label."""
        found = {reference_key(reference_of(obj)): reference_of(obj) for obj in self.live.values()}
        view = HandleView.of(self.obj or {})
        for entry in [*view.resources, *view.reported]:
            reference = entry.get("reference")
            if isinstance(reference, Mapping) and reference.get("name") and reference.get("kind"):
                found.setdefault(reference_key(reference), {key: str(reference.get(key) or "") for key in
                                                           ("apiVersion", "kind", "name", "namespace")})
        return list(found.values())


def _with_recorded_references(handle: HandleView) -> Mapping[str, Any]:
    """The handle with each resource's reference from its status where its spec has none yet (a pool's
    handle before its binding writes them, see `_write_references`): a created resource keeps its name."""
    entries, reported = handle.resources, handle.reported
    missing = [index for index, entry in enumerate(entries) if not entry.get("reference") and index < len(reported)
               and isinstance(reported[index].get("reference"), Mapping)]
    if not missing:
        return handle.body
    resources = [dict(entry) for entry in entries]
    for index in missing:
        resources[index]["reference"] = dict(reported[index]["reference"])
    return {**handle.body, "spec": {**handle.spec, "resources": resources}}


def stamped(definition: Mapping[str, Any]) -> dict[str, Any]:
    """The definition with its own digest in the `APPLIED` annotation, as it is created and applied.

    The resource keeps what it was last given, so whichever incarnation of the actor looks next tells a
    definition that leaves a field out (which `_contains` alone cannot: the resource still has every field
    the definition says) from one already applied, with no memory of its own and no read.
    """
    metadata = definition.get("metadata")
    metadata = dict(metadata) if isinstance(metadata, Mapping) else {}
    annotations = metadata.get("annotations")
    annotations = {k: v for k, v in annotations.items() if k != APPLIED} if isinstance(annotations, Mapping) else {}
    unstamped = {**definition, "metadata": {**metadata, "annotations": annotations}}
    text = json.dumps(unstamped, sort_keys=True, separators=(",", ":"))
    digest = hashlib.sha256(text.encode()).hexdigest()[:32]
    return {**unstamped, "metadata": {**metadata, "annotations": {**annotations, APPLIED: digest}}}


def _contains(value: Any, pattern: Any) -> bool:
    """Whether `value` (what exists) already has everything `pattern` (the definition) says.

    Objects are compared field by field (the API server adds defaults and
    status); lists item by item, so a list must have as many items as the
    definition's and each item must contain the definition's item (the server
    also defaults fields inside list items, e.g. `containers[].imagePullPolicy`);
    anything else must be equal as JSON. Not `provider._has_fields_of`, where
    a list in a provider's `match` must equal the template's list.
    """
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(k in value and _contains(value[k], v) for k, v in pattern.items())
    if isinstance(pattern, list):
        return isinstance(value, list) and len(value) == len(pattern) and all(map(_contains, value, pattern))
    return json_equal(value, pattern)


def ready_condition(resources: list[dict[str, Any]], *, now: datetime, generation: int | None) -> dict[str, Any]:
    """The handle's `Ready` condition, `status.ready` as a condition: what its Ready column shows (`True`, as
    every kind's Ready does, where the boolean printed `true`). False names the resources not ready yet."""
    waiting = [r["name"] or f"resources[{i}]" for i, r in enumerate(resources) if not r["ready"]]
    if not waiting:
        return new_condition(READY, True, "Ready", "every resource is ready", now=now,
                             observed_generation=generation)
    return new_condition(READY, False, "NotReady", f"not ready yet: {', '.join(waiting)}", now=now,
                         observed_generation=generation)
