"""The claim actor: one ResourceClaim, from validation to the end of its lifespan.

It resolves the claim against the providers of the operator's namespace
(`resolve_claim`: a provider per resource, defaults, schema and checks) and
shows the verdict in `Valid` and `status.resources[].validationError`. A
valid claim asks the pools whose resources use the same providers, one at a
time, for a matching unbound handle (the pool decides: see `pool` and
`protocol`); when none has one, it binds a matching free-standing handle
(no pool, no claim) itself, under the handle's resourceVersion
(`binding`); failing that, the claim creates its own handle from its
templates, bound from birth. Once bound it keeps the handle in step:
the allowed part of a template change (`plan_update`: updateFilters,
identity, schema) is patched into the handle's spec and the refused part is
reported with its paths; a changed `spec.lifespan.end` is clamped to the
limits and written to the handle.

Who writes what: this actor is the only writer of the claim's status
(`Valid`, `Bound`, `Ready`, `resourceHandle`, `resources[]` with each
resource's state copied from the handle's status, `lifespan`). After
binding it writes the handle's templates and lifespan end; the handle actor
does everything to the resources. At the end of the lifespan the handle
deletes its resources, then itself; seeing its handle gone after the end,
the claim deletes itself. A handle deleted before the end is replaced.

State: the claim, the providers and the resolved claim, the bound handle,
the pools still to ask, the templates the handle was last brought in step
with. Rebuilt on restart from the claim's status and the handles that name
the claim; a second handle that names it (a crash between a pool's commit
and its answer) is deleted.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import created_at, deleting, generation, mapping_at, name_of, newer, timestamp
from lessor.model.labels import CLAIM_TEMPLATES
from lessor.model.handles import claim_of, record_templates_op, recorded_templates, templates_record
from lessor.model.jsonpatch import apply as apply_patch
from lessor.model.keys import actor_address
from lessor.model.times import format_time, whole_seconds
from lessor.model.views.meta import Meta
from lessor.model.views.provisioning import ClaimView, HandleView, PoolView, view_of
from lessor.templates import TemplateError, check_expression, format_timestamp, offload

from ..api import CLAIM, HANDLE, POOL, PROVIDER, AlreadyExists, ApiFailure, NotFound
from .binding import binding_patch, ending, free_standing, preference
from .claim_approval import ApprovalWait, approval_state, approval_wait
from .protocol import ClaimDeleted, HandleBound, NoHandle, WantHandle
from .claim_spec import (
    ClaimSpec,
    ResourceError,
    matches_handle,
    ready_condition,
    resolve_claim,
    status_resources,
    valid_condition,
)
from .claim_updates import plan_update
from ..conditions import BOUND, READY, merge_condition, new_condition, same_conditions
from ..context import Context
from ..events import NORMAL, WARNING, record_transitions
from .handle_render import new_handle_name, status_summary, with_references
from .lifespan import LifespanConfig, claim_lifespan_of, handle_lifespan_spec, rendered_lifespan
from ..object_actor import ObjectActor, Written, commit
from ..observed import Observed
from .provider import Provider, Readiness, load_providers
from .throttle import THROTTLE
from ..validity import Throttled
from ..queries import TOPOLOGY, GetObject, ListObjects
from .questions import ClaimHandles, FreeHandles

log = logging.getLogger(__name__)

_ANSWER_TIMEOUT = 10.0  # a pool that has not answered by then may have died with the question: ask again
_RETRY = 5.0  # seconds before trying again what the API refused
_SETTLE = 10.0  # seconds a bound claim's status waits for its handle to report on the handle's current spec
_NAME_DRAWS = 3  # names drawn for a new handle before the API server is left to draw one
DETACHED = "Detached"  # Bound and Ready reason of a claim whose autoDetach.when held


@dataclass(frozen=True, slots=True)
class _Evaluate:
    """Sent to self: the requested start is reached, or a refused write is worth another try."""


@dataclass(frozen=True, slots=True)
class _Settled:
    """Sent to self: the handle has not reported on its spec within `_SETTLE`; the status is written as it is."""


@dataclass(frozen=True, slots=True)
class _AskAgain:
    pool: str


@dataclass(frozen=True, slots=True)
class _Ended:
    """Sent to self: deleting the ended claim failed; try again."""

    end: datetime


class ClaimActor(ObjectActor):
    __slots__ = ("providers", "throttle", "spec", "handle", "bound_at", "pools", "asking", "create_error", "base",
                 "update_errors", "lifespan_generation", "evaluated_generation", "holding", "_handle_view")
    kind = CLAIM  # given up on a version (`guard`): its handle stays bound
    view_kind = ClaimView
    wake_kinds = (PROVIDER.kind,)
    honours_ignore = True

    def __init__(self, address: str, ctx: Context) -> None:
        super().__init__(address, ctx)
        self.providers: dict[str, Provider] = {}
        self.throttle = ctx.slots[THROTTLE]  # the operator's, shared by its claims and its webhook
        self.spec: ClaimSpec | None = None
        self.handle: Mapping[str, Any] | None = None
        self.bound_at: datetime | None = None  # when this incarnation's binding started the lifespan
        self.pools: list[str] = []  # still to ask, in order
        self.asking: tuple[str, ClaimSpec] | None = None  # the pool asked, and what it was asked for
        self.create_error = ""  # why the API refused the handle this claim tried to create
        self.base: list[Any] | None = None  # the claim's templates as the handle reflects them (None: unknown)
        self.update_errors: list[ResourceError] = []
        self.lifespan_generation: int | None = None  # the generation whose lifespan request was last decided
        self.evaluated_generation: int | None = None  # the generation `started` or `_evaluate` last decided on
        self.holding: bool | None = None  # the status waits for the handle (True), or waited long enough (False)
        self._handle_view: HandleView | None = None

    @property
    def view(self) -> ClaimView:
        """The claim as last observed (or written), typed; built once per version."""
        view = self.seen_as(ClaimView)
        assert view is not None
        return view

    @property
    def handle_view(self) -> HandleView | None:
        """The bound handle as last observed (or written), typed; built once per version."""
        if self.handle is None:
            return None
        self._handle_view = view_of(HandleView, self.handle, self._handle_view)
        return self._handle_view

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        self.obj = await self.ask(TOPOLOGY, GetObject(CLAIM.kind, self.namespace, self.name))
        if self.obj is None:
            await self._deleted()
            return
        self.evaluated_generation = generation(self.obj)  # what follows decides on it, evaluating or not
        if self.view.meta.ignored:
            return  # left alone until the label goes (`ObjectActor.still_parked`)
        named = [h for h in await self.ask(TOPOLOGY, ClaimHandles(self.namespace, self.name)) if not deleting(h)]
        # A free-standing handle our last incarnation was binding when it died: settled now, and perhaps ours.
        written = await self.ctx.inflight.settled(self._binding_key())
        if written is not None and claim_of(written) == (self.namespace, self.name) and not deleting(written) \
                and name_of(written) not in {name_of(h) for h in named}:
            named.append(written)
        if self._detached():  # its handle is gone for good: it waits for its end, and binds nothing
            for extra in named:
                await self._delete_extra(extra)
            end = self.view.lifespan_end
            if not await self._ended(end) and end is not None:
                self.schedule("end", _Ended(end), at=end)
            return
        mine = self.view.resource_handle
        if mine:
            self.lifespan_generation = generation(self.obj)  # an end clamped before is not clamped anew
            self.handle = next((h for h in named if name_of(h) == mine), None) \
                or await self.ctx.api.get(HANDLE, self.ctx.operator_namespace, mine)
            if self.handle is None and await self._ended(self.view.lifespan_end):
                return
        if self.handle is None and named:
            self.handle = min(named, key=lambda h: (created_at(h) or self.ctx.now(), name_of(h)))
        for extra in named:
            if self.handle is None or name_of(extra) != name_of(self.handle):
                await self._delete_extra(extra)
        await self._evaluate()

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case Observed(kind=CLAIM.kind, object=None):
                await self._deleted()
            case Observed(kind=CLAIM.kind, object=Mapping() as obj) if newer(obj, self.obj):
                before, after = (self.view if self.obj is not None else None), ClaimView.of(obj)
                # templates (lifespan settings, checks) read labels and annotations: a change of them counts too.
                # The generation is compared with the one last evaluated, not with the copy held: a copy this
                # actor's own status write returned may carry a spec changed meanwhile, and the watch event of
                # that change, older than the copy, is then dropped
                changed = before is None or after.meta.generation != self.evaluated_generation \
                    or approval_state(obj) != approval_state(self.obj) \
                    or after.seen_by_templates != before.seen_by_templates
                self.obj, self._view = obj, after
                if changed:
                    await self._evaluate()
            case Observed(kind=HANDLE.kind, name=name, object=obj):
                await self._observed_handle(name, obj)
            case Observed(kind=PROVIDER.kind) if self.handle is None or self.spec is None or not self.spec.valid:
                # Bound, a claim judged against a provider that was missing or broken then (one created after
                # it, or reached the topology after it) is judged again: it would show that error for good.
                await self._evaluate()
            case HandleBound(handle=handle, start=start):
                await self._handle_bound(handle, start)
            case NoHandle(pool=pool) if self.asking is not None and self.asking[0] == pool:
                self.asking = None
                self.cancel("answer")
                await self._ask_next()
            case _AskAgain(pool=pool) if self.asking is not None and self.asking[0] == pool:
                self._want(pool, self.asking[1])
            case _Evaluate():
                await self._evaluate()
            case _Settled() if self.holding:
                self.holding = False
                await self._write_status()
            case _Ended(end=end):
                await self._ended(end)
            case Observed() | NoHandle() | _AskAgain() | _Settled():
                pass
            case _:
                self.unexpected(message)

    async def _deleted(self) -> None:
        """The claim is gone: every handle that names it is told (each checks with the API, then ends)."""
        handles = {_handle_address(h) for h in await self.ask(TOPOLOGY, ClaimHandles(self.namespace, self.name))}
        if self.handle is not None:
            handles.add(_handle_address(self.handle))
        for address in handles:
            self.tell(address, ClaimDeleted(self.namespace, self.name))
        self.stop()

    async def _observed_handle(self, name: str, obj: Mapping[str, Any] | None) -> None:
        if self.handle is not None and name == name_of(self.handle):
            if obj is None:  # our handle is gone: at the end of the lifespan so are we, else it is replaced
                end = HandleView.of(self.handle).lifespan_end
                self.handle, self.base = None, None
                if not await self._ended(end):
                    await self._evaluate()
                    if self.handle is None:
                        await self._write_status()  # Bound no more until another handle is found
            elif newer(obj, self.handle):
                before, after = HandleView.of(self.handle), HandleView.of(obj)
                vars_changed = after.vars != before.vars
                self.handle, self._handle_view = obj, after
                if vars_changed and self.obj is not None:  # the claim's checks see the handle's vars
                    await self._evaluate()
                    return
                self.providers = await load_providers(self, self.ctx.operator_namespace)
                await self._write_status()
            return
        if obj is None or deleting(obj) or claim_of(obj) != (self.namespace, self.name):
            return
        if self._detached():
            await self._delete_extra(obj)
        elif self.handle is None:  # a handle names us (a pool's commit whose answer was lost): it is ours
            await self._adopt(obj, base=None, start=None)
        else:
            await self._delete_extra(obj)

    # --- deciding -------------------------------------------------------------------------

    async def _evaluate(self) -> None:
        assert self.obj is not None
        self.evaluated_generation = generation(self.obj)
        if self._detached():
            return
        now = self.ctx.now()
        self.providers = await load_providers(self, self.ctx.operator_namespace)
        self.spec = await offload(resolve_claim, self.obj, self.providers, queue=self.ctx.rendering, key=self.namespace, now=now,
                                  handle=self.handle, throttle=self.throttle)
        self._throttled()
        await self._label_claim()
        if self.handle is not None:
            await self._keep_in_step(now)
            return
        if not self.spec.valid:
            await self._write_status()
            return
        start = self.view.requested_start
        if start is not None and start > now:
            self.schedule("start", _Evaluate(), at=start)
            await self._write_status()
            return
        if self._awaiting_approval() is not None:
            await self._write_status()  # Bound=False, ApprovalPending or ApprovalRejected; a change of it wakes us
            return
        if self.asking is None:
            self.pools = await self._matching_pools(self.spec)
            await self._ask_next()

    async def _label_claim(self) -> None:
        """The providers' `resourceClaimLabels` and `resourceClaimAnnotations` on the claim, as the pool/claim tool
        sets them (so claims can be selected by what they use); a user who changes one sees it set again."""
        assert self.obj is not None and self.spec is not None
        meta = self.view.meta
        patch: dict[str, dict[str, str]] = {}
        for section in ("labels", "annotations"):
            current = meta.labels if section == "labels" else meta.annotations
            for resource in self.spec.resources:
                if resource.provider is None:
                    continue
                wanted = resource.provider.claim_labels if section == "labels" else resource.provider.claim_annotations
                patch.setdefault(section, {}).update({k: v for k, v in wanted.items() if current.get(k) != v})
        patch = {section: values for section, values in patch.items() if values}
        if not patch:
            return
        try:
            self.obj = await self.ctx.api.merge_patch(CLAIM, self.namespace, self.name, {"metadata": patch})
        except NotFound:
            return  # its deletion event tells us
        except ApiFailure as error:
            log.warning("claim %s/%s: setting the providers' labels failed: %s", self.namespace, self.name, error)

    async def _matching_pools(self, spec: ClaimSpec) -> list[str]:
        """The pools that may hold a match: in the claim's mode, with the same providers (`PoolView.uses`)."""
        wanted = _uses(self.view, spec)
        pools = [PoolView.of(pool) for pool in await self.ask(TOPOLOGY, ListObjects(POOL.kind,
                                                                                  self.ctx.operator_namespace))]
        matching = [pool for pool in pools if not pool.meta.deleting and not pool.meta.ignored and pool.uses == wanted]
        pinned = self.view.pinned_pool
        if pinned:  # the claim asks for one pool (Poolboy's resource-pool-name annotation): only that one is asked
            matching = [pool for pool in matching if pool.name == pinned]
        return [pool.name for pool in sorted(matching, key=_preferred_first)]

    async def _ask_next(self) -> None:
        assert self.spec is not None
        if self.pools:
            pool = self.pools.pop(0)
            self.asking = (pool, self.spec)
            self._want(pool, self.spec)
        elif await self._bind_free_standing(self.spec):
            pass
        elif self._creation_disabled():
            await self._write_status()  # Bound=False, WaitingForPool
            self.schedule("evaluate", _Evaluate(), delay=_RETRY)  # the pools are asked again
        else:
            await self._create_handle(self.spec)

    async def _bind_free_standing(self, spec: ClaimSpec) -> bool:
        """Bind a matching free-standing handle (no pool, no claim: an admin's, say), as Poolboy does; True once
        one is ours. Nobody arbitrates those, so the commit's resourceVersion precondition does: of two claims
        writing the same handle, the second's write fails with Conflict and it reads the handle bound
        (`binding`). The write outlives a kill of this actor (`inflight`): the next incarnation starts from it."""
        assert self.obj is not None
        first = spec.resources[0].provider if spec.resources else None
        if not spec.valid or first is None:
            return False
        start = whole_seconds(self.ctx.now())
        found = await self.ask(TOPOLOGY, FreeHandles(self.ctx.operator_namespace, first.name))
        candidates = sorted((h for h in found if free_standing(h) and not ending(h, start)
                             and matches_handle(spec, h)), key=preference)
        claim, key = self.obj, (self.namespace, self.name)

        def still(fresh: Mapping[str, Any]) -> bool:
            return free_standing(fresh) and not ending(fresh, start) and matches_handle(spec, fresh)

        for handle in candidates:
            name = name_of(handle)

            async def write(current: Mapping[str, Any], name: str = name) -> Mapping[str, Any]:
                patch = binding_patch(current, spec, claim, key, start=start, lifespan=spec.lifespan)
                return await self.ctx.inflight.run(self._binding_key(), lambda: self.ctx.api.merge_patch(
                    HANDLE, self.ctx.operator_namespace, name, patch))

            try:
                outcome = await commit(self.ctx.api, HANDLE, self.ctx.operator_namespace, name, handle, write, still)
            except ApiFailure as error:
                log.warning("claim %s/%s: binding free-standing handle %s failed: %s", self.namespace, self.name,
                            name, error)
                continue
            if isinstance(outcome, Written) and claim_of(outcome.result) == key:
                log.info("claim %s/%s: bound free-standing handle %s", self.namespace, self.name, name)
                await self._adopt(outcome.result, base=list(spec.templates), start=start)
                return True
        return False

    def _binding_key(self) -> tuple[str, ...]:
        """This claim's binding of a free-standing handle in `ctx.inflight` (the handle is not known at restart)."""
        return ("bind", CLAIM.kind, self.namespace, self.name)

    def _awaiting_approval(self) -> ApprovalWait | None:
        assert self.obj is not None and self.spec is not None
        return approval_wait(self.obj, (resource.provider for resource in self.spec.resources))

    def _creation_disabled(self) -> str:
        """Why this claim may not get a handle of its own (`spec.disableCreation` of the claim or of one of its
        providers), or "" when it may."""
        assert self.obj is not None and self.spec is not None
        if self.view.disable_creation:
            return "spec.disableCreation is true"
        for resource in self.spec.resources:
            provider = resource.provider
            if provider is not None and provider.view.disable_creation:
                return f"ResourceProvider {provider.name} has disableCreation"
        return ""

    def _want(self, pool: str, spec: ClaimSpec) -> None:
        assert self.obj is not None
        self.tell(actor_address(POOL, self.ctx.operator_namespace, pool),
                  WantHandle(self.namespace, self.name, spec, self.obj))
        self.schedule("answer", _AskAgain(pool), delay=_ANSWER_TIMEOUT)

    async def _handle_bound(self, handle: Mapping[str, Any], start: datetime) -> None:
        if claim_of(handle) != (self.namespace, self.name):
            return
        if self.handle is not None:
            if name_of(handle) != name_of(self.handle):
                await self._delete_extra(handle)
            return
        asked = self.asking[1] if self.asking is not None else None
        self.asking = None
        self.cancel("answer")
        await self._adopt(handle, base=list(asked.templates) if asked is not None else None, start=start)

    async def _create_handle(self, spec: ClaimSpec) -> None:
        """No pool has a match: a handle of our own, from our templates, bound from birth."""
        assert self.obj is not None
        now = whole_seconds(self.ctx.now())  # lifespans are written to the second
        config, _ = await self._lifespan_config(spec.lifespan.to_spec(), None)
        lifespan, _ = claim_lifespan_of(config, self.obj, start=now, now=now)
        body: dict[str, Any] = {
            "apiVersion": HANDLE.api_version, "kind": HANDLE.kind,
            "metadata": {"generateName": "guid-", "namespace": self.ctx.operator_namespace,
                         "annotations": {CLAIM_TEMPLATES: templates_record(spec.templates)}},
            "spec": {
                "resourceClaim": {"name": self.name, "namespace": self.namespace},
                "resources": spec.handle_resources(),
                "lifespan": handle_lifespan_spec(spec.lifespan, lifespan.end if lifespan else None),
            },
        }
        if (provider := spec.provider_reference()) is not None:
            body["spec"]["provider"] = provider
        try:
            handle = await self._create_named(body, now)
        except ApiFailure as error:
            log.warning("claim %s/%s: creating a handle failed: %s", self.namespace, self.name, error)
            self.create_error = str(error)
            self.schedule("retry", _Evaluate(), delay=_RETRY)
            await self._write_status()
            return
        self.create_error = ""
        self.ctx.events.record(HANDLE, handle, NORMAL, "Created", f"for claim {self.namespace}/{self.name}", "Create")
        await self._adopt(handle, base=list(spec.templates), start=now)

    async def _create_named(self, body: dict[str, Any], now: datetime) -> Mapping[str, Any]:
        """Create the handle under a name drawn here (`new_handle_name`, the form `generateName` gives), with the
        references of its resources already in its spec (`with_references`): its actor then has none to write.
        A name that is taken is drawn again; after a few, the API server draws it (and the actor records the
        references, a write later)."""
        for _ in range(_NAME_DRAWS):
            named = {**body, "metadata": {**body["metadata"], "name": new_handle_name()}}
            try:
                final = await offload(with_references, named, self.providers, queue=self.ctx.rendering, key=self.namespace,
                                      operator_namespace=self.ctx.operator_namespace, claim=self.obj, now=now)
            except Exception as error:  # noqa: BLE001 - a saving only: the handle's actor renders, and says why
                log.info("claim %s/%s: the new handle's references are left to it: %s", self.namespace, self.name,
                         error)
                final = named
            try:
                return await self.ctx.api.create(HANDLE, self.ctx.operator_namespace, final)
            except AlreadyExists:
                continue
        return await self.ctx.api.create(HANDLE, self.ctx.operator_namespace, body)

    async def _adopt(self, handle: Mapping[str, Any], *, base: list[Any] | None, start: datetime | None) -> None:
        self.handle, self.base, self.bound_at = handle, base, start
        self.lifespan_generation = generation(self.obj)  # the binding decided the lifespan for this request
        self.pools, self.asking = [], None
        self.cancel("answer")
        if self.spec is None:
            self.spec = await offload(resolve_claim, self.obj or {}, self.providers, queue=self.ctx.rendering, key=self.namespace,
                                      now=self.ctx.now(), handle=self.handle, throttle=self.throttle)
        await self._keep_in_step(self.ctx.now())

    def _throttled(self) -> None:
        """Tell the providers whose hold began (`throttle`) so they say it; judge again when ours ends."""
        for hold in self.throttle.news():
            self.tell(actor_address(PROVIDER, self.ctx.operator_namespace, hold.provider),
                      Throttled(hold.message, hold.remaining))
        assert self.spec is not None
        remaining = [held.remaining for resource in self.spec.resources if resource.provider is not None
                     and (held := self.throttle.holding(resource.provider.name)) is not None]
        if remaining:
            self.schedule("throttled", _Evaluate(), delay=max(remaining) + 0.5)

    async def _delete_extra(self, handle: Mapping[str, Any]) -> None:
        """A second handle bound to this claim: it goes, with its resources (its actor deletes them)."""
        if claim_of(handle) != (self.namespace, self.name):
            return
        log.info("claim %s/%s: deleting extra handle %s", self.namespace, self.name, name_of(handle))
        try:
            await self.ctx.api.delete(HANDLE, self.ctx.operator_namespace, name_of(handle))
        except ApiFailure as error:
            log.warning("claim %s/%s: deleting extra handle failed: %s", self.namespace, self.name, error)

    # --- bound: keeping the handle in step ------------------------------------------------

    async def _keep_in_step(self, now: datetime) -> None:
        assert self.obj is not None and self.spec is not None and self.handle is not None
        self.update_errors = []
        if self.spec.valid:
            await self._update_templates(self.spec, now)
        await self._update_end(now)
        await self._write_status()

    async def _update_templates(self, spec: ClaimSpec, now: datetime) -> None:
        """Patch the allowed part of the claim's change into the handle; keep the refused part as errors."""
        assert self.obj is not None and (handle := self.handle_view) is not None
        entries = handle.resources
        base = self.base if self.base is not None else recorded_templates(handle.body)
        if base is None:  # a handle bound before the record was kept
            base = [_project(entry.get("template") or {}, resource.template)
                    for entry, resource in zip(entries, spec.resources)]
        plan = await offload(plan_update, base, spec, handle.body,
                             queue=self.ctx.rendering, key=self.namespace, claim=self.obj, now=now,
                             throttle=self.throttle)
        self.update_errors = list(plan.errors)
        provider = spec.provider_reference()
        provider_ops = [{"op": "add", "path": "/spec/provider", "value": provider}] \
            if provider is not None and not plan.errors and handle.provider != provider \
            else []
        if not plan.changed and not provider_ops:
            return
        base = list(base)
        for update in plan.resources:
            if update.applied:
                base[update.index] = apply_patch(base[update.index], list(update.applied))
        try:
            self.handle = await self.ctx.api.json_patch(
                HANDLE, self.ctx.operator_namespace, handle.name,
                [*plan.handle_patch(handle.body), record_templates_op(handle.body, base), *provider_ops])
        except NotFound:
            return  # its deletion event tells us
        except ApiFailure as error:
            self.update_errors.append(ResourceError("spec.resources", f"the handle refused the update: {error}",
                                                    "UpdateRefused"))
            return
        self.base = base

    async def _update_end(self, now: datetime) -> None:
        """A requested end within the limits is honoured as asked; one beyond them is clamped when asked,
        and not moved later by re-evaluating (relativeMaximum counts from the moment of the request)."""
        assert self.obj is not None and (handle := self.handle_view) is not None
        if self.view.requested_end_text is None:
            return
        config, _ = await self._lifespan_config(handle.lifespan_given, handle.body)
        start = self.view.lifespan_start or now
        lifespan, _ = claim_lifespan_of(config, self.obj, start=start, now=now)
        current = handle.lifespan_end
        if lifespan is None or lifespan.end is None or lifespan.end == current:
            return
        asked_anew = generation(self.obj) != self.lifespan_generation
        if lifespan.clamped and not asked_anew and current is not None and current <= lifespan.end:
            return
        self.lifespan_generation = generation(self.obj)
        await self._write_end(lifespan.end)

    async def _write_end(self, end: datetime) -> bool:
        """The handle's `spec.lifespan.end` (its actor ends it then); False when the API refused it."""
        assert self.handle is not None
        try:
            self.handle = await self.ctx.api.merge_patch(
                HANDLE, self.ctx.operator_namespace, name_of(self.handle),
                {"spec": {"lifespan": {"end": format_time(end)}}})
        except ApiFailure as error:
            log.warning("claim %s/%s: writing the lifespan end failed: %s", self.namespace, self.name, error)
            return False
        return True

    async def _default_end_from_first_ready(self, now: datetime) -> datetime | None:
        """On first Ready, a claim that asked for no end gets the default lifespan from now (as the pool/claim
        tool resets it): time spent provisioning is not taken from it. Still within the limits."""
        assert self.obj is not None and (handle := self.handle_view) is not None
        if self.view.requested_end_text is not None:
            return None
        config, _ = await self._lifespan_config(handle.lifespan, handle.body)
        if config.default is None:
            return None
        now = whole_seconds(now)
        limit, _ = config.limit(created=self.view.meta.created or now, now=now)
        end = now + config.default if limit is None else min(now + config.default, limit)
        current = handle.lifespan_end
        if current is not None and end <= current:
            return None
        return end if await self._write_end(end) else None

    async def _ended(self, end: datetime | None) -> bool:
        """After `end` (its lifespan's) a claim whose handle is gone deletes itself (rule: resources, then
        the handle, then the claim)."""
        if end is None or end > self.ctx.now():
            return False
        try:
            await self.ctx.api.delete(CLAIM, self.namespace, self.name)
        except ApiFailure as error:
            log.warning("claim %s/%s: deleting the ended claim failed: %s", self.namespace, self.name, error)
            self.schedule("retry", _Ended(end), delay=_RETRY)
            return True
        self.stop()
        return True

    # --- status ---------------------------------------------------------------------------

    async def _write_status(self) -> None:
        if self._detached():  # its last status stays as the detach wrote it
            return
        if self._handle_behind():
            return
        assert self.obj is not None and self.spec is not None
        now = self.ctx.now()
        status = self.view.status
        gen = generation(self.obj)
        handle, hview = self.handle, self.handle_view
        config, lifespan_errors = await self._lifespan_config(hview.lifespan_given if hview else None, handle)
        lifespan_problems = [ResourceError("spec.lifespan", f"ResourceHandle {name_of(handle or {})}'s {error}",
                                           "ProviderTemplateError") for error in lifespan_errors]
        resources = status_resources(self.spec, status.get("resources"), self.update_errors)
        conditions = merge_condition(status.get("conditions"), valid_condition(
            [*self.spec.all_errors, *self.update_errors, *lifespan_problems], now=now, generation=gen))
        lifespan = dict(status.get("lifespan") or {})
        if handle is None or hview is None:
            for entry in resources:
                entry.pop("reference", None)
                entry.pop("state", None)
            bound, ready = self._unbound_conditions(now, gen)
        else:
            _copy_states(resources, hview)
            bound = new_condition(BOUND, True, "Bound", self._bound_message(hview, config, now),
                                  now=now, observed_generation=gen)
            ready = await offload(self._ready_condition, hview, resources, now, gen,  # readinessCheck templates
                                  queue=self.ctx.rendering, key=self.namespace)
            lifespan = self._lifespan_status(hview, config, lifespan, now)
            if ready["status"] == "True" and "firstReady" not in lifespan:
                lifespan["firstReady"] = format_time(now)
                if (end := await self._default_end_from_first_ready(now)) is not None:
                    lifespan["end"] = format_time(end)
        conditions = merge_condition(merge_condition(conditions, bound), ready)
        new = {
            "resourceHandle": ({"name": name_of(handle), "namespace": self.ctx.operator_namespace}
                               if handle is not None else None),
            "resources": resources,
            "lifespan": lifespan or None,
            "conditions": conditions,
            "summary": await self._summary(handle, resources, now) if handle is not None else None,
        }
        if handle is None and self.spec.valid and (wait := self._awaiting_approval()) and wait.initial:
            new["approval"] = wait.initial
        if self.spec.valid and not self.update_errors and (provider := self.spec.provider_reference()) is not None:
            new["provider"] = provider  # what was applied: once bound, immutable parameters are judged against it
        if handle is not None and await self._auto_deleted({**status, **new}):
            return
        if handle is not None and await self._auto_detached({**status, **new}, conditions):
            return
        if all(status.get(key) == new[key]
               for key in ("resourceHandle", "resources", "lifespan", "approval", "summary", "provider") if key in new) \
                and same_conditions(status.get("conditions"), conditions):
            return
        if await self.write_status(new):  # else deleted: the deletion event stops us
            record_transitions(self.ctx.events, CLAIM, self.obj, status.get("conditions"), conditions)

    def _handle_behind(self) -> bool:
        """Whether the status waits: the handle has not yet reported on its current spec (its `Rendered`
        condition observes an older generation: just created, just bound, or just given a change), so the
        states and readiness this status would copy are about to change. Waiting makes a claim's way to
        Ready one status write, not one per step of its handle. A handle that does not report within
        `_SETTLE` (its actor stuck or given up) does not hold the status any longer than that."""
        if self.handle_view is None or not _behind(self.handle_view):
            if self.holding is not None:
                self.holding = None
                self.cancel("settle")
            return False
        if self.holding is None:
            self.holding = True
            self.schedule("settle", _Settled(), delay=_SETTLE)
        return self.holding

    async def _summary(self, handle: Mapping[str, Any], resources: list[dict[str, Any]], now: datetime) -> Any:
        """`status.summary` from the last resource's provider's `statusSummaryTemplate` (as the pool/claim tool
        does); a template that fails leaves none and says why in a Warning Event."""
        assert self.obj is not None and self.spec is not None
        last = self.spec.resources[-1].provider if self.spec.resources else None
        if last is None:
            return None
        summary, error = await offload(status_summary, last, handle, self.obj, resources, now,
                                       queue=self.ctx.rendering, key=self.namespace)
        if error:
            self.ctx.events.record(CLAIM, self.obj, WARNING, "SummaryFailed", error, "Summarize")
        return summary

    async def _auto_deleted(self, status: Mapping[str, Any]) -> bool:
        """Delete the claim when its `spec.autoDelete.when` holds (Poolboy's feature, run here in the sandbox)."""
        assert self.obj is not None
        when = await self._holds("autoDelete", status)
        if when is None:
            return False
        self.ctx.events.record(CLAIM, self.obj, NORMAL, "AutoDelete", f"spec.autoDelete.when is true: {when}",
                               "Delete")
        try:
            await self.ctx.api.delete(CLAIM, self.namespace, self.name)
        except NotFound:
            pass
        return True

    async def _auto_detached(self, status: Mapping[str, Any], conditions: Any) -> bool:
        """Detach the claim when its `spec.autoDetach.when` holds (Poolboy's feature, run here in the sandbox):
        its handle, and so its resources, are deleted; the claim stays, with its last status and
        `status.resourceHandle.detached`, until its lifespan ends."""
        assert self.obj is not None and self.handle is not None
        when = await self._holds("autoDetach", status)
        if when is None:
            return False
        now, gen, handle = self.ctx.now(), generation(self.obj), self.handle
        end = _status_end(status)
        until = f"until its lifespan ends at {format_timestamp(end)}" if end is not None else "until it is deleted"
        message = (f"spec.autoDetach.when is true ({when}): ResourceHandle {name_of(handle)} and its resources "
                   f"are deleted; the claim stays, {until}")
        detached = merge_condition(merge_condition(conditions, new_condition(
            BOUND, False, DETACHED, message, now=now, observed_generation=gen)), new_condition(
            READY, False, DETACHED, message, now=now, observed_generation=gen))
        # The whole last status in this one write: a claim's status waits for its handle's first report, so
        # the detach may be the first status write of a claim, and its resources must still be named here.
        if not await self.write_status({"resourceHandle": {"name": name_of(handle),
                                                           "namespace": self.ctx.operator_namespace,
                                                           "detached": True},
                                        "resources": status.get("resources"),
                                        "lifespan": status.get("lifespan"),
                                        "conditions": detached}):
            return True  # deleted meanwhile: the deletion event stops us
        self.ctx.events.record(CLAIM, self.obj, NORMAL, "AutoDetach", message, "Detach")
        self.handle, self.base = None, None
        try:
            await self.ctx.api.delete(HANDLE, self.ctx.operator_namespace, name_of(handle))
        except NotFound:
            pass
        if end is not None:
            self.schedule("end", _Ended(end), at=end)
        return True

    async def _holds(self, field: str, status: Mapping[str, Any]) -> str | None:
        """`spec.<field>.when` when it holds for the claim with `status` (about to be written), else None.

        The expression sees `metadata`, `spec` and `status` of the claim, `resource_claim`, `resource_handle`
        and `resource_provider` (of the first resource). One that cannot be evaluated holds not: it is
        logged and recorded as a Warning Event (`AutoDeleteFailed`, `AutoDetachFailed`).
        """
        assert self.obj is not None
        when = self.view.when(field)
        if when is None:
            return None
        first = self.spec.resources[0].provider if self.spec is not None and self.spec.resources else None
        claim = {**self.obj, "status": dict(status)}
        variables = {"metadata": claim.get("metadata"), "spec": claim.get("spec"), "status": claim["status"],
                     "resource_claim": claim, "resource_handle": self.handle,
                     "resource_provider": first.definition if first is not None else None}
        try:
            due = await offload(check_expression, f"({when}) | bool", variables, queue=self.ctx.rendering, key=self.namespace)
        except TemplateError as error:
            action = field[0].upper() + field[1:]
            log.info("claim %s/%s: spec.%s.when: %s", self.namespace, self.name, field, error.message)
            self.ctx.events.record(CLAIM, self.obj, WARNING, f"{action}Failed",
                                   f"spec.{field}.when could not be evaluated: {error.message}", action)
            return None
        return when if due else None

    def _detached(self) -> bool:
        return self.obj is not None and self.view.detached

    def _unbound_conditions(self, now: datetime, gen: int | None) -> tuple[dict[str, Any], dict[str, Any]]:
        assert self.obj is not None and self.spec is not None
        start = self.view.requested_start_text
        if not self.spec.valid:
            bound = new_condition(BOUND, False, "NotValid", "the claim is not valid (see Valid)",
                                  now=now, observed_generation=gen)
        elif self.create_error:
            bound = new_condition(BOUND, False, "HandleCreateFailed", f"creating a ResourceHandle failed: "
                                  f"{self.create_error}", now=now, observed_generation=gen)
        elif start is not None and (timestamp(start) or now) > now:
            bound = new_condition(BOUND, False, "Scheduled", f"spec.lifespan.start {start}: binding waits until then",
                                  now=now, observed_generation=gen)
        elif (wait := self._awaiting_approval()) is not None:
            bound = new_condition(BOUND, False, wait.reason, wait.message, now=now, observed_generation=gen)
        elif why := self._creation_disabled():
            bound = new_condition(BOUND, False, "WaitingForPool", f"{why}: waiting until a ResourcePool has a "
                                  "matching handle, or a matching free-standing ResourceHandle appears",
                                  now=now, observed_generation=gen)
        else:
            bound = new_condition(BOUND, False, "Binding", "its handle was deleted; looking for another",
                                  now=now, observed_generation=gen)
        ready = new_condition(READY, False, "NotBound", "the claim has no handle yet", now=now,
                              observed_generation=gen)
        return bound, ready

    def _bound_message(self, handle: HandleView, config: LifespanConfig, now: datetime) -> str:
        pool = handle.pool
        message = f"ResourceHandle {handle.name}" + (f" from ResourcePool {pool}" if pool else "")
        requested_text, requested = self.view.requested_end_text, self.view.requested_end
        end = handle.lifespan_end
        if requested is not None and end is not None and requested > end:
            created = self.view.meta.created or now
            _, limited_by = config.limit(created=created, now=now)
            message += (f"; spec.lifespan.end {requested_text} is later than allowed by the "
                        f"{limited_by or 'handle'}; the lifespan ends at {format_timestamp(end)}")
        return message

    def _ready_condition(self, handle: HandleView, resources: Sequence[Mapping[str, Any]], now: datetime,
                         gen: int | None) -> dict[str, Any]:
        """Ready by each provider's rule on the states the handle reports; the handle's refusals first."""
        assert self.obj is not None
        if (refusal := handle.refusal) is not None:
            return new_condition(READY, False, refusal.reason or "NotRendered", refusal.message,
                                 now=now, observed_generation=gen)
        readiness = []
        for index, entry in enumerate(resources):
            provider = self.providers.get((entry.get("provider") or {}).get("name") or "")
            if provider is None:
                continue
            label = f"spec.resources[{index}] ({entry['name']})"
            if entry.get("state") is None and entry.get("waitingFor"):
                readiness.append((label, Readiness(False, f"not created yet: waits for {entry['waitingFor']}")))
                continue
            readiness.append((label, provider.readiness(entry.get("state"), handle=handle.body, claim=self.obj,
                                                        now=now)))
        return ready_condition(readiness, now=now, generation=gen)

    async def _lifespan_config(self, lifespan: Any, handle: Mapping[str, Any] | None
                               ) -> tuple[LifespanConfig, tuple[str, ...]]:
        """A handle's (or a new one's) lifespan settings, templates rendered for this claim in a render thread."""
        config, errors = LifespanConfig.parse(lifespan, "spec.lifespan")
        if not config.templates:
            return config, errors
        return await offload(rendered_lifespan, lifespan,
                             queue=self.ctx.rendering, key=self.namespace, claim=self.obj, handle=handle,
                             now=self.ctx.now())

    def _lifespan_status(self, handle: HandleView, config: LifespanConfig, lifespan: dict[str, Any],
                         now: datetime) -> dict[str, Any]:
        handle_lifespan = handle.lifespan
        rendered = config.to_spec()  # a setting written as a template shows as what it gave for this claim
        start = format_time(self.bound_at) if self.bound_at else lifespan.get("start") or format_time(now)
        result = {"start": start}
        for key in ("end", "maximum", "relativeMaximum"):
            value = handle_lifespan.get(key)
            if isinstance(value, str) and "{" in value:
                value = rendered.get(key)
            if value:
                result[key] = value
        if lifespan.get("firstReady"):
            result["firstReady"] = lifespan["firstReady"]
        return result


def _status_end(status: Mapping[str, Any]) -> datetime | None:
    """`lifespan.end` of a claim's status about to be written (what is read is `ClaimView.lifespan_end`)."""
    return timestamp(mapping_at(status, "lifespan").get("end"))


def _behind(handle: HandleView) -> bool:
    """The handle's actor has not reported on the handle's current spec yet (see `ClaimActor._handle_behind`)."""
    rendered = handle.rendered
    return rendered is None or rendered.observed_generation != handle.meta.generation


def _copy_states(resources: list[dict[str, Any]], handle: HandleView) -> None:
    """Each resource's reference and state, as the handle reports them, into the claim's entries.

    The reference is the spec's (the name kept for the resource), shown once the handle reports the resource
    as its own: a handle created with its references (`with_references`) names a resource before it exists,
    and a name taken by another's resource (`ResourceConflict`) is never shown as the claim's."""
    entries, reported = handle.resources, handle.reported
    for index, entry in enumerate(resources):
        reference = entries[index].get("reference") if index < len(entries) else None
        if index < len(reported) and not reported[index].get("reference"):
            reference = None
        state = reported[index].get("state") if index < len(reported) else None
        waiting = reported[index].get("waitingFor") if index < len(reported) else None
        for key, value in (("reference", reference), ("state", state), ("waitingFor", waiting)):
            if value is None:
                entry.pop(key, None)
            else:
                entry[key] = copy.deepcopy(value)


def _project(theirs: Any, ours: Any) -> Any:
    """The handle's template cut down to the keys the claim's template has.

    For a handle without the `CLAIM_TEMPLATES` record (bound by an older
    lessor), the claim's previous template is unknown after a restart; diffing
    from the handle's own template would read what a pool provisioned (and the
    claim never mentioned) as removals. Removals made while the actor was down
    are then not seen; additions and replacements are.
    """
    if isinstance(theirs, Mapping) and isinstance(ours, Mapping):
        return {key: _project(value, ours[key]) for key, value in theirs.items() if key in ours}
    return copy.deepcopy(theirs)


def _uses(claim: ClaimView, spec: ClaimSpec) -> tuple[str, Any]:
    """What a pool must use to hold a match for the claim, in `PoolView.uses` terms: a claim that lists
    resources never gets a handle made from parameters (and its `spec.provider`), nor the other way round."""
    if spec.parameters is not None:
        return "provider", claim.provider_name
    return "resources", tuple(r.provider.name for r in spec.resources if r.provider is not None)


def _handle_address(handle: Mapping[str, Any]) -> str:
    meta = Meta.of(handle)
    return actor_address(HANDLE, meta.namespace, meta.name)


def _preferred_first(pool: PoolView) -> tuple[float, str]:
    """Pools in the order a claim asks them: highest `spec.preferenceScore` first, then by name."""
    score = pool.preference_score
    return (-float(score) if score is not None else 0.0, pool.name)
