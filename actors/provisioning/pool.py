"""The pool actor: the single arbiter of one ResourcePool's unbound handles.

Which claim gets which of the pool's handles is decided here and nowhere
else. Claims ask with `WantHandle` (see `protocol`); the requests that
arrive together are decided together, each getting the best unbound handle
that matches its templates (ready first, then oldest) or `NoHandle`. The
binding is one patch of the handle under a resourceVersion precondition:
`spec.resourceClaim`, the claim's values at the provider's `matchIgnore`
paths, the lifespan end, and the references of the resources the handle's
status reports (the handle's actor leaves them to this patch). That write is the commit point; a handle whose
precondition fails is read again and bound only if it is still unbound, so a
handle is never bound twice.

The pool also keeps `spec.minAvailable` handles unbound (creating at most
`spec.maxUnready` not-ready ones at a time, deleting a surplus), replaces
those unclaimed for longer than `lifespan.unclaimed`, and when the pool is
deleted deletes its unbound handles only.

State: the pool, its providers and resolved templates, its handles (bound or
not) as last seen or written, and the requests waiting for the next
decision. All but the requests are rebuilt from the topology on restart; a
claim whose request was lost asks again when its timer fires.

Writes: handle creations, the binding commit, deletions of unbound handles
(with a resourceVersion precondition, so a handle bound meanwhile survives),
and the pool's status (handle counts, unbound handles, `Valid`).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import deleting, name_of, newer
from lessor.model.handles import claim_of
from lessor.model.keys import actor_address
from lessor.templates import offload

from ..api import CLAIM, HANDLE, POOL, PROVIDER, SCALING, ApiFailure
from .protocol import HandleBound, NoHandle, WantHandle
from .claim_spec import (
    ClaimSpec,
    PoolSpec,
    ResourceError,
    resolve_pool,
    valid_condition,
)
from ..conditions import merge_condition, same_conditions
from ..context import Context
from ..events import NORMAL
from .binding import binding_patch, free, healthy, preference, ready
from .handle_index import IndexedHandles
from .handle_render import carried_to_handles
from .lifespan import LifespanConfig, handle_lifespan_spec, unclaimed_end
from ..object_actor import GaveUp, Lost, ObjectActor, Written, commit
from ..observed import Observed
from .pool_scaling import Scaling, next_at, scaling_of, scalings_for, status_of
from .provider import Provider, load_providers
from .throttle import THROTTLE
from ..queries import TOPOLOGY, GetObject, ListObjects
from .questions import PoolHandles
from lessor.model.times import whole_seconds
from lessor.model.views.meta import Meta
from lessor.model.views.provisioning import HandleView, PoolView
from lessor.model.labels import POOL_SCALING

log = logging.getLogger(__name__)

_PARALLEL_WRITES = 16
#: Handles one decision creates at most, and the pause before the next step: a pool that asks for thousands (or, by
#: mistake, two billion) grows at CREATE_STEP a second, its claims served between the steps, memory flat, and the
#: operator's time left to everyone else's objects.
CREATE_STEP = 32
STEP_PAUSE = 1.0
_STATUS_DELAY = 0.2


@dataclass(frozen=True, slots=True)
class _Decide:
    """Sent to self: bind, replenish and expire after the messages already queued (a burst of requests)."""


@dataclass(frozen=True, slots=True)
class _Unclaimed:
    """Sent to self when an unbound handle has waited `lifespan.unclaimed`."""

    handle: str


@dataclass(frozen=True, slots=True)
class _ScalingDue:
    """Sent to self at a waiting ResourcePoolScaling's `at`."""


@dataclass(frozen=True, slots=True)
class _StepDue:
    """Sent to self STEP_PAUSE after a step of creates that left more to create."""


@dataclass(frozen=True, slots=True)
class _WriteStatus:
    """Sent to self: one status write for the changes of the last moments."""


class PoolActor(ObjectActor):
    __slots__ = ("providers", "spec", "lifespan", "errors", "handles", "wanting", "deciding", "status_due", "scalings",
                 "pausing")
    kind = POOL
    view_kind = PoolView
    wake_kinds = (PROVIDER.kind,)
    honours_ignore = True

    def __init__(self, address: str, ctx: Context) -> None:
        super().__init__(address, ctx)
        self.providers: dict[str, Provider] = {}
        self.spec: PoolSpec | None = None
        self.lifespan = LifespanConfig()
        self.errors: list[ResourceError] = []
        self.handles = IndexedHandles(free, preference)  # by name; also the unbound ones by match key
        self.wanting: list[WantHandle] = []
        self.deciding = False
        self.status_due = False
        self.scalings: list[Mapping[str, Any]] = []  # the ResourcePoolScalings of the namespace, as last seen
        self.pausing = False  # between two steps of creates (CREATE_STEP, STEP_PAUSE)

    @property
    def view(self) -> PoolView:
        """The pool as last observed (or written), typed; built once per version."""
        view = self.seen_as(PoolView)
        assert view is not None
        return view

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        self.obj = await self.ask(TOPOLOGY, GetObject(POOL.kind, self.namespace, self.name))
        for handle in await self.ask(TOPOLOGY, PoolHandles(self.namespace, self.name)):
            self.handles[name_of(handle)] = handle
        if self.obj is None:  # deleted while this actor (or lessor) was down; the API confirms, as the
            if await self.ctx.api.get(POOL, self.namespace, self.name) is None:  # topology may trail a creation
                await self._delete_all_unbound()
            self.stop()
            return
        if self.view.meta.ignored:
            return  # left alone until the label goes (`ObjectActor.still_parked`)
        self.providers = await load_providers(self, self.namespace)
        await self._load_scalings()
        await self._resolve()
        self._decide_soon()

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case WantHandle():
                self.wanting.append(message)
                self._decide_soon()
            case Observed(kind=POOL.kind, object=None):
                await self._delete_all_unbound()
                self._refuse_all()
                self.stop()
            case Observed(kind=POOL.kind, object=Mapping() as obj) if newer(obj, self.obj):
                self.obj = obj
                await self._resolve()
                self._decide_soon()
            case Observed(kind=HANDLE.kind, name=name, object=obj):
                if obj is None:
                    self.handles.pop(name, None)
                elif newer(obj, self.handles.get(name)):
                    self.handles[name] = obj
                self._decide_soon()
            case Observed(kind=PROVIDER.kind):
                self.providers = await load_providers(self, self.namespace)
                await self._resolve()
                self._decide_soon()
            case _Decide():
                self.deciding = False
                await self._decide()
            case Observed(kind=SCALING.kind):
                await self._load_scalings()
                self._decide_soon()
            case _Unclaimed() | _ScalingDue():
                self._decide_soon()
            case _StepDue():
                self.pausing = False
                self._decide_soon()
            case _WriteStatus():
                self.status_due = False
                await self._write_status()
            case Observed():
                pass
            case _:
                self.unexpected(message)

    async def _resolve(self) -> None:
        assert self.obj is not None
        self.spec = await offload(resolve_pool, self.obj, self.providers,
                                  queue=self.ctx.rendering, key=self.namespace, now=self.ctx.now(),
                                  throttle=self.ctx.slots[THROTTLE])
        self.lifespan, lifespan_errors = LifespanConfig.parse(self.view.lifespan_given, "spec.lifespan")
        self.errors = [*self.spec.all_errors,
                       *(ResourceError("spec.lifespan", error, "InvalidLifespan") for error in lifespan_errors)]

    def _decide_soon(self) -> None:
        if not self.deciding:
            self.deciding = True
            self.tell(self.address, _Decide())

    async def _decide(self) -> None:
        if self.obj is None:
            return
        await self._replace_unclaimed()  # first: a handle whose wait is over is not given away
        await self._bind()
        await self._delete_unhealthy()
        await self._replenish()
        await self._scale()
        if not self.status_due:
            self.status_due = True
            self.schedule("status", _WriteStatus(), delay=_STATUS_DELAY)

    # --- binding: the commit point --------------------------------------------------------

    async def _bind(self) -> None:
        """Give each waiting claim one matching handle, or tell it there is none."""
        # A claim that asked twice (its timer fired while we were busy) is one request: never two handles.
        wanting = {(want.namespace, want.claim): want for want in self.wanting}
        self.wanting = []
        taken: set[str] = set()
        plans: list[tuple[WantHandle, Mapping[str, Any]]] = []
        for want in wanting.values():
            mine = self._bound_to(want.namespace, want.claim)
            if mine is not None:  # asked again (a restart, a lost answer): the same handle
                self._answer(want, HandleBound(self.name, mine, whole_seconds(self.ctx.now())))
                continue
            handle = self._best_match(want.spec, taken)
            if handle is None:
                self._answer(want, NoHandle(self.name))
                continue
            taken.add(name_of(handle))
            plans.append((want, handle))
        start = whole_seconds(self.ctx.now())
        written = await _gather(self._commit(want, handle, start) for want, handle in plans)
        for (want, _handle), latest in zip(plans, written):
            holder = claim_of(latest)
            if holder == (want.namespace, want.claim):
                self._answer(want, HandleBound(self.name, latest, start))
            elif latest is None or holder is not None or deleting(latest):
                self.wanting.append(want)  # taken or gone meanwhile: decide again with what was found
            else:
                self._answer(want, NoHandle(self.name))  # the write keeps failing: the claim makes its own
        if self.wanting:
            self._decide_soon()

    def _bound_to(self, namespace: str, claim: str) -> Mapping[str, Any] | None:
        return self.handles.bound_to((namespace, claim))

    def _best_match(self, spec: ClaimSpec, taken: set[str]) -> Mapping[str, Any] | None:
        unhealthy = {name for name, h in self.handles.unbound.free.items() if not healthy(h)}  # never given away
        return self.handles.unbound.best(spec, taken | unhealthy)  # an index, not a scan (`handle_index`)

    async def _commit(self, want: WantHandle, handle: Mapping[str, Any], start: datetime) -> Mapping[str, Any] | None:
        """Bind `handle` to the claim under a resourceVersion precondition.

        Returns the handle as last known: bound to this claim when the commit
        won, bound elsewhere or None (deleted) when it lost, unbound when the
        API kept refusing.
        """
        name = name_of(handle)

        async def write(current: Mapping[str, Any]) -> Mapping[str, Any]:
            return await self.ctx.api.merge_patch(HANDLE, self.namespace, name, binding_patch(
                current, want.spec, want.claim_object, (want.namespace, want.claim), start=start))

        try:  # a conflict is usually the handle's own status write: bind only if it is still unbound
            outcome = await commit(self.ctx.api, HANDLE, self.namespace, name, handle, write, free)
        except ApiFailure as error:
            log.warning("pool %s/%s: binding %s failed: %s", self.namespace, self.name, name, error)
            return handle
        match outcome:
            case Written(result=written):
                self.handles[name] = written
                return written
            case Lost(fresh=fresh) | GaveUp(fresh=fresh):
                self.handles[name] = fresh
                return fresh
        self.handles.pop(name, None)  # gone
        return None

    def release(self) -> None:
        self._refuse_all()

    def while_parked(self, message: Any) -> None:
        """Given up on this version of the pool: claims that ask are told at once to look elsewhere."""
        if isinstance(message, WantHandle):
            self._answer(message, NoHandle(self.name))

    def _answer(self, want: WantHandle, answer: HandleBound | NoHandle) -> None:
        self.tell(actor_address(CLAIM, want.namespace, want.claim), answer)

    def _refuse_all(self) -> None:
        for want in self.wanting:
            self._answer(want, NoHandle(self.name))
        self.wanting = []

    # --- keeping minAvailable --------------------------------------------------------------

    def _unbound(self) -> list[Mapping[str, Any]]:
        return list(self.handles.unbound.free.values())

    async def _replenish(self) -> None:
        assert self.obj is not None and self.spec is not None
        if self.errors:
            return
        view = self.view
        unbound = self._unbound()
        missing = view.min_available - len(unbound)
        if missing > 0:
            max_unready = view.max_unready
            if max_unready is not None:
                unready = sum(1 for h in unbound if not ready(h))
                missing = min(missing, max(0, max_unready - unready))
            step = 0 if self.pausing else min(missing, CREATE_STEP)
            made = sum(await _gather(self._create() for _ in range(step)))
            if made == step < missing:  # more to come; a refused create waits for the next change instead
                self._pause()
        else:
            # More than asked for (minAvailable lowered, or a restart that trailed its own creates). A scaling's
            # handles are extra by design, never a surplus.
            regular = [h for h in unbound if scaling_of(h) is None]
            excess = len(regular) - view.min_available
            surplus = sorted(regular, key=preference, reverse=True)[:max(0, excess)]
            await _gather(self._delete_unbound(h) for h in surplus)

    def _pause(self) -> None:
        if not self.pausing:
            self.pausing = True
            self.schedule("step", _StepDue(), delay=STEP_PAUSE)

    async def _create(self, scaling: str | None = None) -> bool:
        """A new unbound handle (labelled with the scaling it is created for); False if the API refused it."""
        assert self.spec is not None
        metadata: dict[str, Any] = {"generateName": "guid-", "namespace": self.namespace}
        unclaimed = self.lifespan.unclaimed
        wait_end = whole_seconds(self.ctx.now()) + unclaimed if unclaimed is not None else None
        if scaling is not None:
            metadata["labels"] = {POOL_SCALING: scaling}
        body: dict[str, Any] = {
            "apiVersion": HANDLE.api_version, "kind": HANDLE.kind,
            "metadata": metadata,
            "spec": {
                "resourcePool": {"name": self.name, "namespace": self.namespace},
                "resources": self.spec.handle_resources(),
                "lifespan": handle_lifespan_spec(self.lifespan, wait_end),  # its wait for a claim ends then
                **carried_to_handles(self.view),
            },
        }
        if (provider := self.spec.provider_reference()) is not None:  # provider mode: as a claim's handle says it
            body["spec"]["provider"] = provider
        try:
            created = await self.ctx.api.create(HANDLE, self.namespace, body)
        except ApiFailure as error:
            log.warning("pool %s/%s: creating a handle failed: %s", self.namespace, self.name, error)
            return False
        self.handles[name_of(created)] = created
        why = f"for ResourcePool {self.name}" + (f" (ResourcePoolScaling {scaling})" if scaling else "")
        self.ctx.events.record(HANDLE, created, NORMAL, "Created", why, "Create")
        return True

    # --- ResourcePoolScaling: a one-off scale-up ------------------------------------------

    async def _scale(self, deleted: Mapping[str, int] | None = None) -> None:
        """Create what due scalings ask for, within maxUnready after minAvailable; then say so in their status.
        `deleted`: handles of each scaling just deleted as unhealthy, taken off its count to be replaced."""
        assert self.obj is not None
        now = self.ctx.now()
        scalings = scalings_for(self.name, self.scalings, self.handles.values())
        if deleted:
            scalings = [Scaling(s.name, s.count, s.at, max(0, s.created - deleted.get(s.name, 0)), s.status)
                        for s in scalings]
        budget = self._unready_budget()
        step = 0 if self.pausing else CREATE_STEP
        for scaling in scalings:
            want = scaling.missing(now) if not self.errors else 0
            trying = min(want, budget, step)
            made = sum(await _gather(self._create(scaling.name) for _ in range(trying)))
            budget -= made
            step -= trying
            if made == trying < min(want, budget + made):
                self._pause()  # the rest in the next step
            message = ""
            if self.errors and scaling.missing(now):
                message = "waits: the pool is not valid (see its Valid condition)"
            elif want > made:
                pace = "as maxUnready allows" if budget <= 0 else f"{CREATE_STEP} at a time"
                message = f"{scaling.created + made} of {scaling.count} handles created; the rest {pace}"
            status = status_of(scaling, now, created=scaling.created + made, message=message)
            if any(scaling.status.get(key) != value for key, value in status.items()):
                await self._write_scaling_status(scaling.name, status)
        if (due := next_at(scalings, now)) is not None:
            self.schedule("scaling", _ScalingDue(), at=due)

    async def _load_scalings(self) -> None:
        """The namespace's scalings from the topology, keeping a version this actor wrote if the copy trails it."""
        held = {name_of(obj): obj for obj in self.scalings}
        self.scalings = [obj if not newer(held.get(name_of(obj)) or {}, obj) else held[name_of(obj)]
                         for obj in await self.ask(TOPOLOGY, ListObjects(SCALING.kind, self.namespace))]

    def _unready_budget(self) -> int:
        """How many more not-ready handles `spec.maxUnready` allows now (unbounded without it)."""
        max_unready = self.view.max_unready
        if max_unready is None:
            return 1 << 30
        return max(0, max_unready - sum(1 for h in self._unbound() if not ready(h)))

    async def _write_scaling_status(self, name: str, status: Mapping[str, Any]) -> None:
        try:
            written = await self.ctx.api.patch_status(SCALING, self.namespace, name, dict(status))
        except ApiFailure as error:  # gone meanwhile, or refused: the next decision writes it again
            log.warning("pool %s/%s: writing ResourcePoolScaling %s status failed: %s", self.namespace, self.name,
                        name, error)
            return
        self.scalings = [written if name_of(obj) == name else obj for obj in self.scalings]

    async def _replace_unclaimed(self) -> None:
        """Delete the handles whose wait for a claim is over; replenishing replaces them.

        The wait ends at the handle's `spec.lifespan.end`, written at its creation (`lifespan.unclaimed` later,
        as Poolboy does), so it survives a restart and shows on the handle; a handle made before lessor wrote
        it waits `unclaimed` from its creation. Its binding replaces that end with the claim's."""
        now = self.ctx.now()
        for handle in self._unbound():
            view = HandleView.of(handle)
            end, created = view.lifespan_end, view.meta.created
            if end is None and created is not None:
                end = unclaimed_end(self.lifespan, created=created)
            if end is None:
                continue
            if end <= now:
                await self._delete_unbound(handle)
            else:
                self.schedule(("unclaimed", name_of(handle)), _Unclaimed(name_of(handle)), at=end)

    async def _delete_unhealthy(self) -> None:
        """With `spec.deleteUnhealthyResourceHandles`, an unbound handle whose provider's healthCheck fails is
        deleted (replenishing replaces it); without it, it stays but is never bound."""
        if not self.view.delete_unhealthy:
            return
        unhealthy = [h for h in self._unbound() if not healthy(h)]
        for handle in unhealthy:
            self.ctx.events.record(HANDLE, handle, NORMAL, "Unhealthy", f"ResourcePool {self.name} deletes it "
                                   "(deleteUnhealthyResourceHandles): a resource failed its healthCheck", "Delete")
        await _gather(self._delete_unbound(h) for h in unhealthy)
        replaced: dict[str, int] = {}
        for handle in unhealthy:
            if (scaling := scaling_of(handle)) is not None and name_of(handle) not in self.handles:
                replaced[scaling] = replaced.get(scaling, 0) + 1
        if replaced:  # off their scalings' counts first, so that they are made again
            await self._scale(deleted=replaced)

    async def _delete_unbound(self, handle: Mapping[str, Any]) -> None:
        """Delete a handle only as a version known to be unbound: a precondition keeps a bound one alive."""
        name = name_of(handle)

        async def write(current: Mapping[str, Any]) -> None:
            await self.ctx.api.delete(HANDLE, self.namespace, name,
                                      resource_version=Meta.of(current).resource_version or None)

        try:  # a conflict is usually the handle's own status write: delete it if it is still unbound
            outcome = await commit(self.ctx.api, HANDLE, self.namespace, name, handle, write, free)
        except ApiFailure as error:
            log.warning("pool %s/%s: deleting handle %s failed: %s", self.namespace, self.name, name, error)
            return
        if isinstance(outcome, Lost | GaveUp):  # bound meanwhile, or it kept changing: the next decision looks again
            self.handles[name] = outcome.fresh
            return
        self.handles.pop(name, None)
        self.cancel(("unclaimed", name))

    async def _delete_all_unbound(self) -> None:
        await _gather(self._delete_unbound(h) for h in self._unbound())

    # --- status ---------------------------------------------------------------------------

    async def _write_status(self) -> None:
        if self.obj is None:
            return
        unbound = sorted(self._unbound(), key=name_of)
        current = self.view.status
        now = self.ctx.now()
        conditions = merge_condition(current.get("conditions"), valid_condition(
            self.errors, now=now, generation=self.view.meta.generation))
        status = {
            "resourceHandleCount": {"available": len(unbound), "ready": sum(1 for h in unbound if ready(h))},
            "resourceHandles": [{"name": name_of(h), "ready": ready(h), "healthy": healthy(h)} for h in unbound],
            "conditions": conditions,
        }
        if all(current.get(key) == status[key] for key in ("resourceHandleCount", "resourceHandles")) \
                and same_conditions(current.get("conditions"), conditions):
            return
        await self.write_status(status)


async def _gather(coroutines: Iterable[Awaitable[Any]]) -> list[Any]:
    """Run the writes of one decision side by side (a handful at a time), in order of results."""
    gate = asyncio.Semaphore(_PARALLEL_WRITES)

    async def one(coroutine: Awaitable[Any]) -> Any:
        async with gate:
            return await coroutine

    return await asyncio.gather(*(one(c) for c in coroutines))
