"""The lease actor: one Lease from creation to its end.

It validates the lease (`spec`), resolves it against the topology's view
of its namespace (`policy.resolve`), queues at every approved exporter, and
accepts the best offer it gets (see `protocol` for the conversation;
the exporter actor decides who gets an exporter, the lease only which of its
offers to take). Timers, not polling, begin scheduled leases and end expired
ones.

State: the last Lease object, the held exporter, the exporters it waits on,
the offers in hand, the candidates that have yet to answer `Settle`. All of it
is rebuilt from the API on restart: a held exporter is found in
`status.exporterRef` or, if the lease died between the exporter's commit and
its own status write, by asking every candidate to `Settle` (the exporter
answers a holder with `Granted`); no offer is taken before they all answered,
and an accepted offer is never given up by the clock (see `protocol`).

Writes: the Lease status (conditions, exporterRef, times, priority,
spotAccess, ended), each under the resourceVersion it was decided from (a
write that loses decides again from the fresh object), and, once ended, the
`lessor.dev/lease-ended` label, put back whenever it is found missing. An
ended lease stops its actor: it costs nothing afterwards.

A lease whose content keeps making this actor fail (`guard`) gives back its
exporter and offers, shows `Ready=False`/`InternalError`, and waits for the
lease to change.
"""

from __future__ import annotations

import contextlib
import operator
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.mailbox import Cause
from lessor.model.fields import newer
from lessor.model.keys import actor_address
from lessor.model.times import format_time
from lessor.model.views.leasing import ExporterView, LeaseView

from ..api import CLIENT, EXPORTER, LEASE, POLICY, ApiFailure, Conflict, NotFound
from ..conditions import merge_condition, new_condition, remove_condition, same_conditions
from ..context import Context, Slot
from ..events import NORMAL, severity
from .protocol import (
    NO_NAMES,
    Accept,
    AvailabilityChanged,
    Confirm,
    Decline,
    Evicted,
    ExporterRestarted,
    Granted,
    NotHeld,
    Offer,
    OfferWithdrawn,
    Release,
    Settle,
    Want,
    Withdraw,
)
from .exporter_state import ExporterState, ExporterStates
from .access_policy import PolicySet
from .resolution import Candidate, Pending, Plan, State, resolve
from .spec import ConditionType, LeaseRequest, Reason, Verdict, parse_lease
from .tags import missing_tag_labels
from ..object_actor import COMMIT_ATTEMPTS, Gone, Lost, ObjectActor, Outcome, Written
from ..observed import Observed
from ..queries import TOPOLOGY, GetObject, GetObjects
from .world import LeaseWorld, LeaseWorldView
from lessor.model.labels import LEASE_ENDED

READY = ConditionType.READY
# Verdicts that a moment's wait can change: the exporter, client or policy may simply not have
# reached the topology yet when lease and lab are applied together.
_SETTLING = {Reason.EXPORTER_NOT_FOUND, Reason.NO_ACCESS, Reason.ALL_DISABLED}
_SETTLE = timedelta(seconds=3)
_REEVALUATE_DELAY = 0.1
_RECHECKS = 3
"""Graces (1, 2, 4 s after the first) a lease with a free exporter in its plan re-resolves before it shows
Pending all the same: the grant is late, and the user should see why it waits."""
PENDING_REFRESH = timedelta(seconds=30)
"""How often at most a waiting lease rewrites its Pending message when only the message changed (the candidates'
states, say): every grant around it would otherwise be a status write of each lease waiting in its group."""
_CHOICE_WINDOW = 0.05  # after a first offer, how long to wait for better ones already on their way


@dataclass(frozen=True, slots=True)
class _Evaluate:
    """Sent to self: resolve again (begin time reached, expiry, or the world changed)."""


@dataclass(frozen=True, slots=True)
class _Choose:
    """Sent to self a decision window after the first offer: pick among the offers in hand."""


@dataclass(frozen=True, slots=True)
class _AcceptUnanswered:
    """Sent to self when an Accept got neither Granted nor OfferWithdrawn in time: ask where it stands
    (`Settle`), never move on by the clock alone."""

    exporter: str
    ticket: int


@dataclass(frozen=True, slots=True)
class _SettleDue:
    """Sent to self while candidates have not answered `Settle`: ask them again."""


@dataclass(frozen=True, slots=True)
class _RefreshPending:
    """Sent to self when the Pending message may be rewritten (`PENDING_REFRESH` after the last)."""


@dataclass(frozen=True, slots=True)
class _ShowPending:
    """Sent to self when a lease still waits after the grace: now it is worth a status write."""


@dataclass(frozen=True, slots=True)
class _Inputs:
    """What `resolve` answers from, `now` as far as it enters a plan (the duration asked, whether scheduled).
    Compared by identity: every one is immutable, and a new version (of the lease, an exporter or its holder,
    the client, a policy) is a new object."""

    request: LeaseRequest
    client_labels: Mapping[str, str] | None
    exporters: list[ExporterState]
    policies: PolicySet
    requested: timedelta | None
    scheduled: bool

    def same(self, other: _Inputs) -> bool:
        return (self.request is other.request and self.client_labels is other.client_labels
                and self.policies is other.policies and self.requested == other.requested
                and self.scheduled == other.scheduled and len(self.exporters) == len(other.exporters)
                and all(map(operator.is_, self.exporters, other.exporters)))


@dataclass(frozen=True, slots=True)
class _Resolved:
    """A plan and its inputs: `resolve` is pure, so the same inputs give the same plan (only a plan is kept,
    never a verdict: that one's message reads the clock)."""

    inputs: _Inputs
    plan: Plan


class LeaseActor(ObjectActor):
    __slots__ = ("request", "parsed", "exporter", "plan", "resolved", "wanted", "offers", "choosing", "accepting",
                 "pending", "states", "settling", "settle_due", "rechecks", "story", "owed", "decided", "pending_armed",
                 "refreshed_at", "open_confirmed")
    kind = LEASE
    view_kind = LeaseView

    def __init__(self, address: str, ctx: Context) -> None:
        super().__init__(address, ctx)  # `parked`: given up on this version of the lease (see `guard`)
        self.request: LeaseRequest | None = None
        self.parsed: Mapping[str, Any] | None = None  # the version of the lease `request` was parsed from
        self.exporter: str | None = None
        self.plan: Plan | None = None
        self.resolved: _Resolved | None = None  # the last plan resolved, with what it was resolved from
        self.wanted: dict[str, Candidate] = {}
        self.offers: dict[str, Offer] = {}
        self.choosing = False
        self.accepting: tuple[str, int] | None = None
        self.pending: Pending | None = None
        self.states: dict[str, ExporterState] = {}  # each candidate as last resolved against
        self.settling = NO_NAMES  # candidates asked to Settle that have not answered
        self.settle_due = True  # this incarnation has yet to ask its first candidates to Settle (see `started`)
        self.rechecks = 0  # re-resolves at the end of a grace instead of writing Pending (see `_ShowPending`)
        self.story: Cause | None = None  # the trace this incarnation started in (see `_resolve_again`)
        self.owed = NO_NAMES  # restarted exporters owed an answer (`Want` or `Withdraw`) once this lease has decided
        self.decided = False  # the last evaluation reached a decision (not deferred: see `_SETTLE`)
        self.pending_armed = False  # the grace before Pending is shown is running (re-evaluations do not restart it)
        self.refreshed_at: datetime | None = None  # when the Pending message was last written, or found as it was
        self.open_confirmed = False  # the API server had no policy in the namespace after this lease was created

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        # Settling guards against an Accept of an earlier incarnation whose commit may still land. A first
        # activation has none unless a commit of this process naming this lease is in flight: a new leader's
        # thousands of leases start without asking every candidate first (a starved new leader once spent
        # minutes on that), and so do a storm's new leases while other leases' commits are on the wire.
        self.settle_due = self.restarted or self.ctx.inflight.may_name((LEASE.kind, self.namespace, self.name))
        cause = self.cause()
        self.story = cause.detached() if cause is not None else None
        # The topology's copy, not an API read per activation: at worst it trails our own last
        # write, and redoing a decision is safe (the exporter's commit point arbitrates).
        self.obj = await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, self.name))
        lease = self.lease
        if lease is None or lease.ended:
            if lease is not None:
                await self._label_ended()  # an ended lease keeps its label, whoever took it off
            self.stop()
            return
        await self._label_tags()
        self.exporter = self._seen().exporter
        if self.exporter is not None:  # an eviction told to a previous incarnation may be lost
            self.tell(_exporter_address(self.namespace, self.exporter), Confirm(self.name))
        await self._evaluate()

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case Observed(kind=LEASE.kind):
                await self._observed_self(message.object)
            case Observed(kind=EXPORTER.kind, name=exporter, object=None) if exporter == self.exporter:
                await self._end(READY, False, Reason.EVICTED,
                                f"exporter {exporter} was deleted while leased")
            case Observed(kind=EXPORTER.kind, name=exporter, object=obj) if exporter == self.exporter:
                # it does not name us back: ask it (Granted, or Evicted ends us)
                if obj is None or ExporterView.of(obj).held_by != self.name:
                    self.tell(_exporter_address(self.namespace, exporter), Confirm(self.name))
            case Observed(kind=EXPORTER.kind) if self.exporter is None:
                if message.object is None:
                    await self._gone(message.name)
                self._exporter_changed(message.name, message.object)
            case Observed():  # a client or policy changed: resolve again, once per burst
                if self.exporter is None:
                    self._resolve_again(_REEVALUATE_DELAY)
            case Offer():
                self.offers[message.exporter] = message
                if self.settling:
                    return None  # taken once every candidate has settled (NotHeld)
                takeable = {c.exporter for c in self.plan.takeable} if self.plan else set()
                if takeable and takeable <= self.offers.keys():  # every exporter it could want has offered
                    self.cancel("choose")
                    self.choosing = False
                    self._choose()
                elif not self.choosing:  # wait a moment for the better offers that may be on their way
                    self.choosing = True
                    self.schedule("choose", _Choose(), delay=_CHOICE_WINDOW)
            case _Choose():
                self.choosing = False
                self._choose()
            case Granted(exporter=exporter) if exporter == self.exporter:
                pass  # the answer to Confirm: still ours
            case Granted(exporter=exporter):
                await self._granted(exporter)
                self._settled(exporter)  # after: held now, so the offers in hand are declined, not taken
            case NotHeld(exporter=exporter):
                if self.accepting is not None and self.accepting[0] == exporter:
                    await self._accept_failed()  # answered after our Accept: that commit is over, not for us
                self._settled(exporter)
            case OfferWithdrawn(exporter=exporter, ticket=ticket):
                if (offer := self.offers.get(exporter)) is not None and offer.ticket == ticket:
                    del self.offers[exporter]  # a better waiter came there: not ours to take any more
                if self.accepting == (exporter, ticket):
                    await self._accept_failed()
            case _AcceptUnanswered(exporter=exporter, ticket=ticket):
                if self.accepting == (exporter, ticket):  # a slow commit, most likely: ask, and keep waiting
                    self.tell(_exporter_address(self.namespace, exporter), Settle(self.name), coalesce=_settle_key(self.name))
                    self.schedule("accepting", message, delay=self.ctx.offer_timeout)
            case Evicted(exporter=exporter, by=by) if exporter == self.exporter:
                self.exporter = None  # it is not ours to release any more
                message = (f"spot access: exporter {exporter} went to lease {by}, which is not spot" if by
                           else f"exporter {exporter} is no longer held for this lease")
                await self._end(READY, False, Reason.EVICTED, message)
            case ExporterRestarted(exporter=exporter):
                self._settled(exporter)  # its new incarnation started after its commits settled
                if self.accepting is not None and self.accepting[0] == exporter:
                    await self._accept_failed()  # a restarted exporter forgot our Accept (a commit it made is Granted)
                if candidate := self.wanted.get(exporter):
                    # Queue again, and nothing more: a restart changed no object, so the plan and the Pending
                    # reason stand (a new leader's exporters start over a minute at a fifth of a core; a
                    # re-resolve at each one's restart was most of a takeover's CPU).
                    self._want(candidate)
                else:  # it makes no offer before it has heard from every lease that waited on it: answer
                    self.owed = self.owed | {exporter}
                    if self.decided:
                        self._answer_owed()
            case AvailabilityChanged(exporter=exporter):  # still queued there: only the Pending reason may change
                if exporter in self.wanted:
                    self.schedule("evaluate", _Evaluate(), delay=_REEVALUATE_DELAY * 5)
            case _Evaluate():
                await self._evaluate()
            case _SettleDue():
                for exporter in self.settling:  # no answer yet: ask again, never go on without one
                    self.tell(_exporter_address(self.namespace, exporter), Settle(self.name), coalesce=_settle_key(self.name))
                if self.settling:
                    self.schedule("settle", _SettleDue(), delay=self.ctx.offer_timeout)
            case _RefreshPending():
                if self.exporter is None and self.pending is not None:
                    await self._show_pending(self.pending)
            case _ShowPending():
                self.pending_armed = False
                if self.exporter is None and self.pending is not None:
                    if (self.plan is not None and self.plan.takeable and self.rechecks < _RECHECKS
                            and not self._shows(self.pending)):
                        # A free exporter in the plan: it may only be lessor's grants that are slow. Resolve
                        # afresh: Pending is written only if the lease now really waits. A few times, each
                        # grace twice the last, not every second: on a starved node thousands of leases
                        # re-resolving every second keep the topology and the exporters from the grants.
                        self.rechecks += 1
                        if self.rechecks < _RECHECKS and await self._still_free():
                            # Nothing it waits for has changed: the next grace, without resolving again (the
                            # last recheck resolves, so that a Pending shown after it is of the world as it is).
                            self.pending_armed = True
                            self.schedule("pending", _ShowPending(),
                                          delay=self.ctx.pending_grace * 2 ** self.rechecks)
                        else:
                            await self._evaluate()
                    else:
                        await self._show_pending(self.pending)
            case Evicted(exporter=exporter):  # from an exporter this lease does not hold (a late answer to
                # Confirm, or one whose Granted it never took): say so, so that it stops waiting for our end
                self.tell(_exporter_address(self.namespace, exporter), Release(self.name))
            case _:
                self.unexpected(message)

    # --- the crash guard ------------------------------------------------------------------

    wake_kinds = (CLIENT.kind, POLICY.kind)

    def release(self) -> None:
        self._let_go()

    def while_parked(self, message: Any) -> None:
        """Hold nothing: an exporter granted meanwhile goes back, an offer is declined."""
        match message:
            case Granted(exporter=exporter):
                self.tell(_exporter_address(self.namespace, exporter), Release(self.name))
            case Offer(exporter=exporter, ticket=ticket):
                self.tell(_exporter_address(self.namespace, exporter), Decline(self.name, ticket))
            case ExporterRestarted(exporter=exporter):  # it waits for every lease's answer before it offers
                self.tell(_exporter_address(self.namespace, exporter), Withdraw(self.name))

    def _exporter_changed(self, name: str, obj: Mapping[str, Any] | None) -> None:
        """Resolve again only when the change can alter what this lease may have.

        A waiting lease is queued at every approved exporter, so an exporter
        being leased or freed needs nothing from it: the exporter offers
        itself. New, vanished or relabelled exporters change the candidates;
        liveness changes only matter for the Offline/NotReady reason shown.
        """
        if obj is None or name not in self.wanted or not _same_shape(ExporterView.of(obj), self.states.get(name)):
            self._resolve_again(_REEVALUATE_DELAY)
        elif self.pending is not None and self.pending.reason in (Reason.OFFLINE, Reason.NOT_READY):
            self._resolve_again(_REEVALUATE_DELAY * 5)

    def _resolve_again(self, delay: float) -> None:
        """Resolve again soon, because another object changed. The grant that may follow belongs to this
        lease's story, not to the policy, client or exporter that changed (linked to it): a lease seen before
        its policy is still one trace from its creation to its Ready."""
        self.schedule("evaluate", _Evaluate(), delay=delay, on_behalf_of=self.story)

    async def _observed_self(self, obj: Mapping[str, Any] | None) -> None:
        if obj is None:  # deleted: give everything back, write nothing
            self._let_go()
            self.stop()
            return
        if not newer(obj, self.obj):
            return  # older than what our own write returned
        before = self.lease
        self.obj = obj
        lease = self._seen()
        generation_changed = lease.meta.generation != (before.meta.generation if before is not None else None)
        if lease.ended:
            self._let_go()
            self.stop()
        elif generation_changed:
            await self._label_tags()
            await self._evaluate()

    async def _label_tags(self) -> None:
        """Copy `spec.tags` onto the lease as labels (see `tags`)."""
        if (lease := self.lease) is not None and (labels := missing_tag_labels(lease)):
            with contextlib.suppress(NotFound):
                self.obj = await self.ctx.api.merge_patch(LEASE, self.namespace, self.name,
                                                          {"metadata": {"labels": labels}})

    async def _label_ended(self) -> None:
        """The `lessor.dev/lease-ended` label on an ended lease (a separate patch: labels are not status)."""
        lease = self.lease
        if lease is None or lease.meta.labels.get(LEASE_ENDED) != "true":
            with contextlib.suppress(NotFound):
                self.obj = await self.ctx.api.merge_patch(LEASE, self.namespace, self.name,
                                                          {"metadata": {"labels": {LEASE_ENDED: "true"}}})

    # --- settling: no offer is taken while a commit naming this lease may be open -------------

    def _settled(self, exporter: str) -> None:
        if exporter not in self.settling:
            return
        self.settling = self.settling - {exporter} or NO_NAMES
        if not self.settling:
            self.cancel("settle")
            if self.offers and not self.choosing:
                self._choose()

    async def _still_free(self) -> bool:
        """Whether an exporter the plan found free is free still: one lookup of those candidates in the topology,
        not a resolution (which reads every candidate, the client and the policies). Only what can take a free
        exporter away without telling this lease is looked at: a holder, the heartbeat, the agent's status."""
        assert self.plan is not None and self.request is not None
        now, timeout = self.ctx.now(), self.ctx.heartbeat_timeout
        free = tuple(candidate.exporter for candidate in self.plan.takeable if candidate.state is State.FREE)
        if not free:
            return False
        for obj in await self.ask(TOPOLOGY, GetObjects(EXPORTER.kind, self.namespace, free)):
            seen = ExporterView.maybe(obj)
            if (seen is not None and seen.held_by in (None, self.name) and seen.online(now, timeout) and seen.ready
                    and (seen.enabled or self.request.allow_disabled)):
                return True
        return False

    async def _gone(self, exporter: str) -> None:
        """A candidate exporter was deleted: nothing of ours can be committed there any more."""
        if self.accepting is not None and self.accepting[0] == exporter:
            await self._accept_failed()
        self._settled(exporter)

    async def _reconsider(self) -> None:
        """Our conditional write lost: someone wrote the lease since we decided. Decide again from it."""
        lease = self._seen()
        if lease.ended:
            self._let_go()
            await self._label_ended()
            self.stop()
            return
        held = lease.exporter
        if held is not None and self.exporter is None:  # granted meanwhile (by another replica): adopt, and ask
            self.exporter = held
            self._withdraw_all()
            self._decline_all()
            self.tell(_exporter_address(self.namespace, held), Confirm(self.name))
            return
        self.schedule("evaluate", _Evaluate(), delay=_REEVALUATE_DELAY)

    # --- deciding -------------------------------------------------------------------------

    async def _evaluate(self) -> None:
        """Resolve the lease and act on the plan; then answer the restarted exporters waiting to hear from it."""
        self.decided = True  # unless `_decide` defers (`_SETTLE`)
        await self._decide()
        if self.owed and self.decided:
            self._answer_owed()

    async def _open(self) -> bool:
        """Whether "no policy in the namespace" may be counted on now. It is a verdict on absence: a policy
        applied with the lease may still be on its way (another watch), and open access would grant what it
        forbids. One consistent read of the API server, made after this lease was created, settles it at once: a
        policy created before the lease is in it. Only when it finds one that the topology lacks (or the read
        fails) does the lease wait, for that policy's event or the settle time (`_SETTLE`)."""
        if not self.open_confirmed:
            with contextlib.suppress(ApiFailure):
                self.open_confirmed = not await self.ctx.api.any_in(POLICY, self.namespace)
        return self.open_confirmed

    def _answer_owed(self) -> None:
        """Tell each restarted exporter that asked where this lease stands: `Want` where it is a candidate,
        else `Withdraw` (scheduled, holding another, ended, or not approved there)."""
        for exporter in self.owed:
            candidate = self.wanted.get(exporter) if self.exporter is None else None
            if candidate is not None:
                self._want(candidate)
            else:
                self.tell(_exporter_address(self.namespace, exporter), Withdraw(self.name))
        self.owed = NO_NAMES

    async def _decide(self) -> None:
        lease = self._seen()
        now = self.ctx.now()
        if self.request is not None and self.parsed is lease.body:
            request: LeaseRequest | Verdict = self.request  # parsing is pure: once per version of the lease
        else:
            request = parse_lease(lease)
        if isinstance(request, Verdict):
            await self._end_with(request)
            return
        self.request = request
        self.parsed = lease.body
        if request.release:
            await self._end(READY, False, Reason.RELEASED, "spec.release is true")
            return
        if self.exporter is not None:
            await self._keeptimestamp(request, now)
            return
        if request.expired(now):
            assert request.expiry is not None
            await self._end(READY, False, Reason.EXPIRED,
                            f"the lease ended at {format_time(request.expiry)} before it got an exporter")
            return
        view: LeaseWorldView = await self.ask(TOPOLOGY, LeaseWorld(
            self.namespace, lease.selector, request.exporter_ref, request.client))
        states, timeout, namespace, holders = (exporter_states(self.ctx), self.ctx.heartbeat_timeout, self.namespace,
                                               view.holders)
        exporters = [states.of(namespace, e, holders, now=now, heartbeat_timeout=timeout) for e in view.exporters]
        self.states = {e.name: e for e in exporters}
        client_labels = view.client.labels if view.client is not None else None
        policies = view.policies
        if policies.open and request.created and now < request.created + _SETTLE and not await self._open():
            self.schedule("evaluate", _Evaluate(), at=request.created + _SETTLE)
            self.decided = False
            return
        inputs = _Inputs(request, client_labels, exporters, policies, request.requested_duration(now),
                         request.scheduled(now))
        resolved = self.resolved
        if resolved is not None and resolved.inputs.same(inputs):
            result: Verdict | Plan = resolved.plan  # a recheck that finds the world as it was: the same plan
        else:
            result = resolve(request, client_labels, exporters, policies, now=now)
            self.resolved = _Resolved(inputs, result) if isinstance(result, Plan) else None
        if isinstance(result, Verdict):
            if result.reason in _SETTLING and request.created and now < request.created + _SETTLE:
                self.schedule("evaluate", _Evaluate(), at=request.created + _SETTLE)
                self.decided = False
                return
            await self._end_with(result)
            return
        if request.expiry is not None:
            self.schedule("expire", _Evaluate(), at=request.expiry)
        if result.scheduled_until is not None:
            self.plan = None  # nothing may be accepted before the begin, not even an offer in flight
            self._withdraw_all()
            self.schedule("evaluate", _Evaluate(), at=result.scheduled_until)
            await self._show_pending(result.pending)
            return
        self.plan = result
        self._queue_at(result.candidates, naming_us=[e.name for e in exporters
                                                     if e.holder is not None and e.holder.lease == self.name])
        self.pending = result.pending
        if self._pending_shown() and (not result.takeable or self._shows(result.pending)):
            # Already waiting: a new reason is shown at once. One already shown needs no grace, and no re-resolve
            # to save a write (a new leader's thousands of waiting leases re-resolved three times each for none).
            await self._show_pending(result.pending)
        elif not self.pending_armed:  # a lease granted within the grace writes one status: Ready
            self.pending_armed = True
            delay = self.ctx.pending_grace * (2 ** self.rechecks if result.takeable else 1)
            self.schedule("pending", _ShowPending(), delay=delay)

    def _queue_at(self, candidates: tuple[Candidate, ...], naming_us: list[str]) -> None:
        """Wait in the queue of every approved exporter: whichever frees up first serves us. The first
        time in an incarnation, also ask each to `Settle` (a previous incarnation may have accepted there).
        Always ask an exporter whose `leaseRef` already names this lease (`naming_us`: another replica's
        commit whose grant was never written, say): no offer is taken before it answers, so the lease is
        never committed on a second exporter while the first still names it."""
        fresh = {c.exporter: c for c in candidates}
        for exporter in self.wanted.keys() - fresh.keys():
            self.tell(_exporter_address(self.namespace, exporter), Withdraw(self.name))
        for exporter, candidate in fresh.items():
            old = self.wanted.get(exporter)
            if old is None or (old.priority, old.spot) != (candidate.priority, candidate.spot):
                self._want(candidate)
        self.wanted = fresh
        if self.settle_due:
            self.settle_due = False
            for exporter in fresh:
                self.tell(_exporter_address(self.namespace, exporter), Settle(self.name), coalesce=_settle_key(self.name))
            self.settling = frozenset(fresh)
            if self.settling:
                self.schedule("settle", _SettleDue(), delay=self.ctx.offer_timeout)
        elif asked := [e for e in naming_us if e not in self.settling]:
            for exporter in asked:
                self.tell(_exporter_address(self.namespace, exporter), Settle(self.name), coalesce=_settle_key(self.name))
            self.settling = self.settling | frozenset(asked)
            self.schedule("settle", _SettleDue(), delay=self.ctx.offer_timeout)

    def _want(self, candidate: Candidate) -> None:
        assert self.request is not None and self.obj is not None
        created = self.request.created or self.ctx.now()
        self.tell(_exporter_address(self.namespace, candidate.exporter),
                  Want(self.name, candidate.priority, candidate.spot, created, self.request.allow_disabled))

    def _choose(self) -> None:
        """Take the best offer in hand (in the plan's order); decline the rest."""
        if self.exporter is not None or self.plan is None:
            self._decline_all()
            return
        if self.settling:
            return  # a candidate has yet to say that nothing of ours is in flight there
        if self.accepting is not None:
            return  # offers wait until the accepted one is granted (then declined) or withdrawn
        order = {c.exporter: i for i, c in enumerate(self.plan.candidates)}
        usable = sorted((o for o in self.offers.values() if o.exporter in order), key=lambda o: order[o.exporter])
        if not usable:
            self._decline_all()
            return
        best = usable[0]
        del self.offers[best.exporter]
        self.accepting = (best.exporter, best.ticket)
        self.tell(_exporter_address(self.namespace, best.exporter), Accept(self.name, best.ticket))
        # The Accept may die with a killed exporter incarnation: never wait on it forever, since
        # the offers in hand keep their exporters reserved meanwhile.
        self.schedule("accepting", _AcceptUnanswered(best.exporter, best.ticket), delay=self.ctx.offer_timeout)
        self._decline_all()

    def _decline_all(self) -> None:
        for offer in self.offers.values():
            self.tell(_exporter_address(self.namespace, offer.exporter), Decline(self.name, offer.ticket))
            self.wanted.pop(offer.exporter, None)
        self.offers.clear()

    async def _accept_failed(self) -> None:
        self.accepting = None
        self.cancel("accepting")
        if self.offers:
            self._choose()
        else:
            await self._evaluate()

    async def _granted(self, exporter: str) -> None:
        self.accepting = None
        self.cancel("accepting")
        if self.exporter is not None and self.exporter != exporter:
            self.tell(_exporter_address(self.namespace, exporter), Release(self.name))
            return
        if self.request is None or self.obj is None or self._seen().ended:
            self.tell(_exporter_address(self.namespace, exporter), Release(self.name))
            return
        terms = self.wanted.get(exporter)
        self.exporter = exporter
        self.wanted.pop(exporter, None)
        self._withdraw_all()
        self._decline_all()
        self.cancel("pending")
        self.cancel("refresh")
        self.pending_armed = False
        self.pending = None
        now = self.ctx.now()
        begin, end = self.request.window(now)
        changed = False  # the lease changed under the write: its watch event will be older than our answer
        for _ in range(COMMIT_ATTEMPTS):
            lease = self._seen()
            conditions = remove_condition(lease.condition_dicts, ConditionType.PENDING)
            conditions = merge_condition(conditions, new_condition(
                READY, True, "Ready", f"exporter {exporter} is leased", now=now,
                observed_generation=self._generation()))
            outcome: Outcome[Any] = await self.write_status_as_seen({
                "exporterRef": {"name": exporter},
                "beginTime": format_time(begin),
                "endTime": format_time(end) if end else None,
                "priority": terms.priority if terms else lease.priority,
                "spotAccess": terms.spot if terms else lease.spot,
                "ended": False,
                "conditions": conditions,
            })
            match outcome:
                case Written():
                    self.ctx.events.record(LEASE, self.obj, NORMAL, "Ready", f"exporter {exporter} is leased",
                                           "Lease")
                    if end is not None:
                        self.schedule("expire", _Evaluate(), at=end)
                    if changed:  # decide on that change (a release, say): its event is no news any more
                        self.schedule("evaluate", _Evaluate(), delay=0)
                    return
                case Gone():
                    return  # its deletion event gives the exporter back
                case Lost(fresh=fresh) if LeaseView.of(fresh).ended:
                    await self._reconsider()  # ended meanwhile: lets the exporter go
                    return
                case Lost(fresh=fresh) if LeaseView.of(fresh).exporter not in (None, exporter):
                    # another replica's grant stands: give this exporter back, hold that one
                    self.tell(_exporter_address(self.namespace, exporter), Release(self.name))
                    self.exporter = None
                    await self._reconsider()
                    return
                case Lost():
                    changed = True
                    continue  # a change that does not touch the grant (labels, a spec edit): write it on that
        raise Conflict(f"Lease {self.namespace}/{self.name} changed {COMMIT_ATTEMPTS} times while its grant "
                       f"was written; starting again")

    async def _keeptimestamp(self, request: LeaseRequest, now: datetime) -> None:
        """An active lease: expire it at its end, which may have moved since it was granted."""
        lease = self._seen()
        begin = lease.begin or now
        end = request.end_for(begin)
        if end is not None and end <= now:
            await self._end(READY, False, Reason.EXPIRED, f"the lease ended at {format_time(end)}")
            return
        if end is None:
            self.cancel("expire")
        else:
            self.schedule("expire", _Evaluate(), at=end)
        wanted = format_time(end) if end else None
        if lease.end_text != wanted and isinstance(await self.write_status_as_seen({"endTime": wanted}), Lost):
            await self._reconsider()

    # --- ending ---------------------------------------------------------------------------

    async def _end_with(self, verdict: Verdict) -> None:
        await self._end(verdict.type, True, verdict.reason, verdict.message)

    async def _end(self, condition: str, status: bool, reason: str, message: str) -> None:
        """Every way a lease ends: one status write, the label, then the exporter given back (after the
        write: the exporter must not go to another lease while this one still shows Ready on it).

        The write is conditional on the version decided from. If it loses, an eviction (the exporter's
        commit already decided it) is written again on the fresh version; any other end is decided again."""
        assert self.obj is not None
        for _ in range(COMMIT_ATTEMPTS):
            now = self.ctx.now()
            lease = self._seen()
            conditions = remove_condition(lease.condition_dicts, ConditionType.PENDING)
            conditions = merge_condition(conditions, new_condition(
                condition, status, reason, message, now=now, observed_generation=self._generation()))
            if condition != READY:  # Ready=False says why in `kubectl get`, even for a lease never granted
                conditions = merge_condition(conditions, new_condition(
                    READY, False, reason, message, now=now, observed_generation=self._generation()))
            outcome: Outcome[Any] = await self.write_status_as_seen(
                {"ended": True, "conditions": conditions, "endTime": _real_end(lease, now)})
            match outcome:
                case Written():
                    self.ctx.events.record(LEASE, self.obj, severity(condition, status, reason), reason, message,
                                           "End")
                    break
                case Gone():
                    self._let_go()
                    self.stop()
                    return
                case Lost(fresh=fresh) if LeaseView.of(fresh).ended:
                    break  # ended meanwhile, by another writer
                case Lost() if reason == Reason.EVICTED:
                    continue
                case Lost():
                    await self._reconsider()
                    return
        else:
            raise Conflict(f"Lease {self.namespace}/{self.name} changed {COMMIT_ATTEMPTS} times while its end "
                           f"was written; starting again")
        self._let_go()
        await self._label_ended()
        self.stop()

    def _let_go(self) -> None:
        """Give back the exporter and leave every queue (nothing is written here)."""
        if self.exporter is not None:
            self.tell(_exporter_address(self.namespace, self.exporter), Release(self.name))
        if self.accepting is not None:
            self.tell(_exporter_address(self.namespace, self.accepting[0]), Release(self.name))
            self.accepting = None
        self._decline_all()
        self._withdraw_all()
        for exporter in self.owed:
            self.tell(_exporter_address(self.namespace, exporter), Withdraw(self.name))
        self.owed = NO_NAMES
        self.settling = NO_NAMES
        for timer in ("evaluate", "expire", "pending", "refresh", "choose", "accepting", "settle"):
            self.cancel(timer)
        self.pending_armed = False

    def _withdraw_all(self) -> None:
        for exporter in self.wanted:
            self.tell(_exporter_address(self.namespace, exporter), Withdraw(self.name))
        self.wanted = {}

    # --- writes ---------------------------------------------------------------------------

    def _shows(self, pending: Pending) -> bool:
        """Whether the lease already shows `pending`'s reason (for this generation): nothing to write at once."""
        shown = self._seen().condition(ConditionType.PENDING)
        return (shown is not None and shown.status == "True" and shown.reason == pending.reason
                and shown.observed_generation == self._generation())

    def _pending_shown(self) -> bool:
        shown = self._seen().condition(ConditionType.PENDING)
        return shown is not None and shown.status == "True"

    async def _show_pending(self, pending: Pending) -> None:
        """Write why the lease waits. A new reason (or a new generation of the lease) is written at once; a new
        message under the same reason (the candidates' states, which change with every grant around) at most every
        `PENDING_REFRESH`, and not at once by a new incarnation (a new leader's waiting leases rewrite nothing)."""
        current = list(self._seen().condition_dicts)
        now = self.ctx.now()
        shown = self._seen().condition(ConditionType.PENDING)
        if shown is not None and self._shows(pending):  # a spec change (a new generation) is acknowledged at once
            if self.refreshed_at is None:
                self.refreshed_at = now  # as written by a previous incarnation: the refresh counts from here
            due = self.refreshed_at + PENDING_REFRESH
            if now < due:
                if shown.message != pending.message:
                    self.schedule("refresh", _RefreshPending(), at=due)
                return
        conditions = merge_condition(current, new_condition(
            ConditionType.PENDING, True, pending.reason, pending.message, now=now,
            observed_generation=self._generation()))
        conditions = merge_condition(conditions, new_condition(  # the same write: why it is not Ready
            READY, False, pending.reason, pending.message, now=now, observed_generation=self._generation()))
        if not same_conditions(_without_times(conditions), _without_times(current)):
            match await self.write_status_as_seen({"conditions": conditions}):
                case Written():
                    self.refreshed_at = now
                    if pending.news:
                        self.ctx.events.record(LEASE, self.obj, NORMAL, pending.reason, pending.message, "Queue")
                case Lost():
                    await self._reconsider()

    def _generation(self) -> int | None:
        lease = self.lease
        return lease.meta.generation if lease is not None else None

    @property
    def lease(self) -> LeaseView | None:
        """The lease as last seen (None before it is known)."""
        return self.seen_as(LeaseView)

    def _seen(self) -> LeaseView:
        lease = self.seen_as(LeaseView)
        assert lease is not None
        return lease


def _real_end(lease: LeaseView, now: datetime) -> str:
    """When the lease really ended: its planned end if that has passed (expiry), else now
    (released, evicted, refused early), so a released lease does not show its planned end."""
    planned = lease.end
    return format_time(planned if planned is not None and planned <= now else now)


def _same_shape(exporter: ExporterView, resolved: ExporterState | None) -> bool:
    """Whether what of an exporter decides whether it is a candidate, its labels and enabled, is as resolved."""
    return resolved is not None and exporter.enabled == resolved.enabled and exporter.meta.labels == resolved.labels


def _without_times(conditions: Any) -> list[dict[str, Any]]:
    return [{k: v for k, v in c.items() if k != "lastTransitionTime"} for c in conditions or ()]


def _settle_key(lease: str) -> tuple[str, str]:
    """One Settle of a lease waits in an exporter's mailbox at a time: re-asked every offer timeout, a starved
    exporter's mailbox once held 770,000 of them."""
    return ("Settle", lease)


EXPORTER_STATES: Slot[ExporterStates] = Slot("leasing.exporter_states", ExporterStates)


def exporter_states(ctx: Context) -> ExporterStates:
    """The operator's exporter states, shared by its leases (kept in the context's `slots`)."""
    return ctx.slots[EXPORTER_STATES]


def _exporter_address(namespace: str, exporter: str) -> str:
    return actor_address(EXPORTER, namespace, exporter)
