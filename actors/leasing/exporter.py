"""The exporter actor: the single arbiter of one Exporter.

Who gets exporter X is decided here and nowhere else. Leases queue with
`Want`; whenever X can be handed out (free, online, ready, enabled) the actor
offers it to the best waiter (highest priority, then oldest lease), and on
`Accept` writes `status.leaseRef` with a resourceVersion precondition: that
write is the commit point. A spot holder is evicted the same way, by a
non-spot waiter's accepted offer replacing its name in `status.leaseRef`.
The evicted lease is told first and its end observed before the winner hears
`Granted`, so no moment shows both Ready; a restarted exporter first ends any
lease still Ready on it that its `status.leaseRef` no longer names (an
eviction cut short by a stop), before it grants anyone.

It heals at every observation, not only at a start: a `leaseRef` that names
a lease which is gone, ended, or Ready on another exporter is written back to
null as soon as this actor sees it (the topology routes every change of the
named lease here), whichever replica made it.

State: the last Exporter object, the holder (lease name, priority, spot),
the waiting queue, the one outstanding offer, the leases told `Evicted` whose
end is not yet seen, and the `Granted` that waits for them. Everything but the queue is
rebuilt from the topology's copy on restart (no API read per exporter: at
worst that copy trails this actor's own last write, which the commit's
resourceVersion precondition catches, and an answer that would evict a lease
is checked against the API first); the queue is rebuilt by telling the
waiting leases (`ExporterRestarted`) to queue again.

Writes: `status.leaseRef` (commit points), the `Online` condition and, for agents that report devices,
`Registered` (see registration).

The whole decision, message by message and file by file (the lease's
resolution in `resolution.py`, the queue in `queue.py`, the offer and
commit here, the lease's choice in `lease.py`), is in docs/architecture.md,
"Exporter X goes to lease Y, step by step".
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.model.fields import newer
from lessor.model.keys import actor_address
from lessor.model.views.leasing import ExporterView, Holder, LeaseView, holder_of

from ..api import EXPORTER, LEASE, Conflict, NotFound
from ..conditions import merge_condition, new_condition
from ..context import Context
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
from ..object_actor import GaveUp, Gone, Lost, ObjectActor, Written, commit
from ..observed import Observed
from .agent import AgentReport, agent_status
from .credentials import CredentialState, RenewCredential, ensure_credential
from .exporter_state import may_take
from ..queries import TOPOLOGY, GetObject
from .world import ReadyHolders, WaitingLeases
from .queue import WaitQueue, Waiter
from .registration import registered_condition

log = logging.getLogger(__name__)

ONLINE = "Online"


@dataclass(frozen=True, slots=True)
class _Decide:
    """Sent to self: decide after the messages already queued (all Wants of a burst) are in."""


@dataclass(frozen=True, slots=True)
class _OfferExpired:
    ticket: int


@dataclass(frozen=True, slots=True)
class _HeartbeatDue:
    """Sent to self when `lastSeen` is about to go stale."""


_PATIENCE_DOUBLINGS = 4
"""An offer's timeout doubles each time the lease is found still waiting, up to 16 times the offer timeout."""

HEARTBEAT_DUE = _HeartbeatDue()
"""The one instance every exporter's heartbeat timer carries (it has no fields): 32 bytes less per exporter."""


@dataclass(frozen=True, slots=True)
class _EvictionsDue:
    """Sent to self while evicted leases have not shown their end: look again, and tell them again."""


@dataclass(frozen=True, slots=True)
class _Heal:
    """Sent to self when the adopted holder may be a lease that cannot hold this exporter."""

    lease: str


class ExporterActor(ObjectActor):
    __slots__ = ("holder", "queue", "offer", "tickets", "deciding", "allow_disabled", "verified", "evicting",
                 "grant_due", "unheard", "patience", "credential")
    kind = EXPORTER  # given up on a version (`guard`): its leaseRef stays, as its lease's commit point
    view_kind = ExporterView

    def __init__(self, address: str, ctx: Context) -> None:
        super().__init__(address, ctx)
        self.holder: Holder | None = None
        self.queue = WaitQueue()
        self.offer: tuple[str, int] | None = None  # (lease, ticket)
        self.tickets = 0
        self.deciding = False
        self.allow_disabled = NO_NAMES  # most never hold one
        self.verified = False  # `obj` came from the API or a write, not only from the topology's copy
        self.evicting = NO_NAMES  # told Evicted, end not yet seen: nobody is Granted meanwhile
        self.grant_due: str | None = None  # the holder, told Granted once `evicting` is empty
        self.unheard = NO_NAMES  # waiting leases told `ExporterRestarted` that have not answered: no offer before
        self.patience = 0  # offer timeouts the outstanding offer has already outlived (each wait twice the last)
        self.credential = CredentialState()  # its Jumpstarter token's Secret, healed (credentials.py)

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        # The topology's copy, not an API read per exporter (start-up stays lists and watches). It may
        # trail this actor's last write: a commit then conflicts and re-reads, and a `Confirm` that would
        # evict a restarted lease reads the API first (`_verify`).
        self.obj = await self.ask(TOPOLOGY, GetObject(EXPORTER.kind, self.namespace, self.name))
        # A commit the previous incarnation sent is the API's now: wait for it, and start from its answer.
        written = await self.ctx.inflight.settled((EXPORTER.kind, self.namespace, self.name))
        if written is not None and newer(written, self.obj):
            self.obj, self.verified = written, True
        if self.obj is None:  # the topology may trail a creation: the API decides (rare)
            self.obj = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
            self.verified = True
        if self.obj is None:
            self.stop()
            return
        holder_obj = await self._adopt_holder(self._seen().held_by)
        holder = adopted = self.holder.lease if self.holder else None
        for lease in await self.ask(TOPOLOGY, ReadyHolders(self.namespace, self.name)):
            if lease != holder and not self.verified:
                holder = await self._verify()  # the copy may trail the grant that made `lease` Ready
            if lease != holder:
                self._evict(lease, holder or "")
        await self._update_online()
        await ensure_credential(self, "exporter", self.credential)
        if self.holder is not None and self.holder.lease != adopted:  # `_verify` found another holder
            holder_obj = LeaseView.maybe(
                await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, self.holder.lease)))
        await self._heal(holder_obj)
        if self.holder is not None and (holder_obj is None or holder_obj.exporter != self.name):
            self._tell_granted(self.holder.lease)  # a Granted may have died with the previous incarnation
        told = []
        for lease in await self.ask(TOPOLOGY, WaitingLeases(self.namespace, self.name)):
            # Not to the holder: to a lease, `ExporterRestarted` says nothing of it is in flight here, and it
            # would stop waiting for this exporter to settle and take another's offer while this one names it
            # (its Granted may be held back until an evicted lease has ended: `_tell_granted`).
            if self.holder is None or lease != self.holder.lease:
                self.tell(_lease_address(self.namespace, lease), ExporterRestarted(self.name))
                told.append(lease)
        # No offer before every one of them has said where it stands (`Want` or `Withdraw`), or is seen to wait no
        # more: a new leader's first Want may come from a lease of low priority whose actor merely started first.
        self.unheard = frozenset(told) or NO_NAMES

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case Observed(kind=EXPORTER.kind):
                await self._observed_exporter(message.object)
            case Observed(kind=LEASE.kind):
                await self._observed_lease(message.name, message.object)
            case Want():
                self._want(message)
            case RenewCredential():
                await ensure_credential(self, "exporter", self.credential, renew=True)
            case Settle(lease=lease):
                if self.holder is not None and self.holder.lease == lease:
                    self._tell_granted(lease)
                else:  # handled after any commit in hand: nothing for this lease is in flight here
                    self.tell(_lease_address(self.namespace, lease), NotHeld(self.name))
            case Withdraw(lease=lease):
                self._forget(lease)
                self._heard(lease)
                self._schedule_decision()
            case Accept():
                await self._accept(message)
            case Decline(lease=lease, ticket=ticket):
                if self.offer is not None and self.offer[0] == lease and self.offer[1] != ticket:
                    return None  # of an offer that expired and was made to it again: it keeps its place
                if self.offer == (lease, ticket):
                    self.offer = None
                self._forget(lease)
                self._heard(lease)
                self._schedule_decision()
            case Confirm(lease=lease):
                holder = self.holder.lease if self.holder else None
                if holder != lease and not self.verified:
                    holder = await self._verify()
                    self._schedule_decision()  # the API may say the exporter is free
                if holder == lease:
                    self._tell_granted(lease)
                else:
                    self.tell(_lease_address(self.namespace, lease), Evicted(self.name, holder or ""))
            case Release(lease=lease):
                self._forget(lease)
                if lease in self.evicting:  # it says it holds us not: its actor writes no Ready for us now
                    self._evicted(lease)
                if self.grant_due == lease:
                    self.grant_due = None
                if self.holder is not None and self.holder.lease == lease:
                    await self._commit(None)
                self._schedule_decision()
            case _Decide():
                self.deciding = False
                if self.unheard:
                    await self._hear_from_topology()
                self._decide()
            case _OfferExpired(ticket=ticket):
                if self.offer is not None and self.offer[1] == ticket:
                    await self._offer_unanswered(self.offer[0])
            case _EvictionsDue():
                await self._check_evictions()
            case _Heal(lease=lease):
                if self.holder is not None and self.holder.lease == lease:
                    await self._heal(LeaseView.maybe(
                        await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, lease))))
            case AgentReport():
                return await self._agent_report(message)
            case _HeartbeatDue():
                if self.obj is not None and not self._online(self.ctx.now()) and not self._seen().says_offline:
                    await self._heartbeat_from_api()
                was = self._available()
                await self._update_online()
                if self.obj is not None and self._available() != was:
                    self._tell_waiters()
            case _:
                self.unexpected(message)

    def while_parked(self, message: Any) -> None:
        """Parked on a version of the exporter: it commits nothing, so leases are not left waiting on it."""
        match message:
            case Settle(lease=lease) if self.holder is None or self.holder.lease != lease:
                self.tell(_lease_address(self.namespace, lease), NotHeld(self.name))
            case Settle(lease=lease) | Confirm(lease=lease) | Want(lease=lease):
                if self.holder is not None and self.holder.lease == lease:
                    self.tell(_lease_address(self.namespace, lease), Granted(self.name))
            case Accept(lease=lease, ticket=ticket):
                self.tell(_lease_address(self.namespace, lease), OfferWithdrawn(self.name, ticket))

    # --- what the topology tells us --------------------------------------------------------

    async def _observed_exporter(self, obj: Mapping[str, Any] | None) -> None:
        if obj is None:  # deleted: its leases see the deletion themselves and end
            self.stop()
            return
        if newer(obj, self.obj):
            was = self.obj is not None and self._available()
            self.obj = obj
            held_by = self._seen().held_by
            if held_by != (self.holder.lease if self.holder else None):
                # newer than anything this actor wrote, so the truth (a copy adopted at start may have trailed,
                # or another replica wrote): adopt it, and free it if that lease cannot hold the exporter
                await self._heal(await self._adopt_holder(held_by))
            await self._update_online()
            if self.obj is not None and self._available() != was:
                self._tell_waiters()
            await ensure_credential(self, "exporter", self.credential)
        self._schedule_decision()

    async def _agent_report(self, report: AgentReport) -> bool:
        """Write what the agent reported over gRPC (agent.py) as it would itself, then judge as on any change."""
        if self.obj is None:
            return False
        was = self._available()
        for _ in range(3):  # a conflict is usually a lease commit: the report applies to any version
            patch = {"metadata": {"resourceVersion": self._seen().meta.resource_version},
                     "status": agent_status(report, self.ctx.now())}
            try:
                self.obj = await self.ctx.api.merge_patch(EXPORTER, self.namespace, self.name, patch,
                                                          subresource="status")
                break
            except Conflict:  # take the newer version as an observation (its holder), then report again
                fresh = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
                if fresh is None:
                    self.stop()
                    return False
                await self._observed_exporter(fresh)
            except NotFound:
                self.stop()
                return False
        await self._update_online()
        if self.obj is not None and self._available() != was:
            self._tell_waiters()
        self._schedule_decision()
        return self.obj is not None

    async def _observed_lease(self, lease: str, obj: Mapping[str, Any] | None) -> None:
        seen = LeaseView.maybe(obj)
        ended = seen is None or seen.ended
        if ended:
            self._forget(lease)
        if lease in self.evicting and _let_go_of(seen, self.name):
            self._evicted(lease)
        if self.holder is None or self.holder.lease != lease:
            return
        if seen is not None and not ended:
            self.holder = holder_of(lease, seen)
        await self._heal(seen, gone=seen is None)

    async def _heal(self, lease: LeaseView | None, *, gone: bool = False) -> None:
        """Give the exporter back if its holder cannot hold it: a lease that is gone (`gone`: a deletion
        event, else the API is asked, since the topology may trail a creation), ended, or Ready on
        another exporter. Level-based: called at every observation of the exporter or its holder."""
        if self.holder is None:
            return
        if lease is None and not gone:
            lease = LeaseView.maybe(await self.ctx.api.get(LEASE, self.namespace, self.holder.lease))
        if lease is not None and not lease.ended and lease.exporter in (None, self.name):
            return
        log.info("exporter %s/%s: lease %s %s; freeing the exporter", self.namespace, self.name, self.holder.lease,
                 "is gone" if lease is None else "has ended" if lease.ended else f"holds exporter {lease.exporter}")
        if self.grant_due == self.holder.lease:
            self.grant_due = None
        await self._commit(None)
        self._schedule_decision()

    # --- the queue and the decision ------------------------------------------------------

    def _want(self, want: Want) -> None:
        if self.holder is not None and self.holder.lease == want.lease:
            self._tell_granted(want.lease)
            return
        burst = not len(self.queue)  # the first request after a quiet spell opens a decision window
        # A repeated request (after this exporter restarted, say) is the same one: the offer goes on in the
        # trace of the first, the lease's story, rather than in that of whatever made the lease ask again.
        repeated = self.queue.remove(want.lease)
        cause = repeated.cause if repeated is not None and repeated.cause is not None else self.cause()
        self.queue.add(Waiter(want.lease, want.priority, want.created, want.spot, cause))
        if want.allow_disabled:
            self.allow_disabled = self.allow_disabled | {want.lease}
        self._heard(want.lease)
        if self.offer is not None and self.offer[0] == want.lease:  # a restarted lease lost our offer
            self.tell(_lease_address(self.namespace, want.lease),
                      Offer(self.name, self.offer[1], self.holder.lease if self.holder else None),
                      coalesce=_offer_key(self.name))
            return
        if self.offer is not None and self._outranks(want.lease, self.offer[0]):
            self._withdraw_offer()  # a better waiter came: the offer is its, not a slower lease's to answer
        self._schedule_decision(window=burst)

    def _outranks(self, lease: str, offered: str) -> bool:
        """Whether waiter `lease` may have the exporter and comes before the lease the offer is out to."""
        waiter, holding = self.queue.get(lease), self.queue.get(offered)
        return (waiter is not None and (holding is None or waiter.key < holding.key)
                and self._may_have()(waiter))

    def _withdraw_offer(self) -> None:
        """Take the outstanding offer back. Its lease may have accepted already: that Accept is answered
        `OfferWithdrawn` (`_accept`), so nothing is committed for it."""
        assert self.offer is not None
        lease, ticket = self.offer
        self.offer = None
        self.cancel("offer")
        self.tell(_lease_address(self.namespace, lease), OfferWithdrawn(self.name, ticket))

    async def _offer_unanswered(self, lease: str) -> None:
        """An offer outlived the offer timeout. A slow lease (a starved replica) keeps it: moving on would hand
        the exporter to a lower waiter, and every new offer is more work for a process already behind. Only a
        lease that the topology no longer shows waiting (deleted, ended, granted elsewhere while its actor was
        down) loses it. The offer is sent again with a fresh ticket (a stale answer to the old one is then told
        apart, `Decline`), replacing the copy still waiting in the lease's mailbox; and the next look comes
        twice as late."""
        seen = LeaseView.maybe(await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, lease)))
        if seen is None or seen.ended or seen.exporter is not None:  # one lookup, not the group's waiting list
            log.debug("exporter %s/%s: %s no longer waits; its offer goes to the next waiter",
                      self.namespace, self.name, lease)
            self.offer = None
            self._forget(lease)
            self._decide()
            return
        self.patience += 1
        self._offer(lease)

    def _heard(self, lease: str) -> None:
        """`lease` said where it stands after this exporter's start (the caller decides again when that is due)."""
        if lease in self.unheard:
            self.unheard = self.unheard - {lease} or NO_NAMES

    async def _hear_from_topology(self) -> None:
        """Leases that the topology no longer shows waiting here (ended, deleted, granted elsewhere) will not
        answer `ExporterRestarted`: stop waiting for them. Looked at again while some are still unheard (a
        lease's end may reach the topology after this look): the look decides nothing by the clock."""
        waiting = set(await self.ask(TOPOLOGY, WaitingLeases(self.namespace, self.name)))
        self.unheard = self.unheard & waiting or NO_NAMES
        if self.unheard and not self.deciding:
            self.deciding = True
            self.schedule("decide", _Decide(), delay=self.ctx.offer_timeout)

    def _forget(self, lease: str) -> None:
        self.queue.remove(lease)
        if lease in self.allow_disabled:
            self.allow_disabled = self.allow_disabled - {lease} or NO_NAMES
        if self.offer is not None and self.offer[0] == lease:
            self.offer = None
            self._schedule_decision()

    def _tell_waiters(self) -> None:
        """Availability changed: waiting leases may show another Pending reason now.

        (Status-only changes of an exporter are routed to its actor alone, not to every
        lease that selects it; this is how those leases hear of what matters to them.)
        """
        for waiter in self.queue:
            self.tell(_lease_address(self.namespace, waiter.name), AvailabilityChanged(self.name))

    def _schedule_decision(self, *, window: bool = False) -> None:
        """Decide after the messages already queued; after the decision window when a burst of
        requests is just starting, so that they are all in before the first offer. Not while a non-spot
        lease holds the exporter: nothing can be offered then, and whatever lets it go decides again."""
        if (not self.deciding and self.offer is None and len(self.queue)
                and (self.holder is None or self.holder.spot)):
            self.deciding = True
            self.schedule("decide", _Decide(), delay=self.ctx.decision_window if window else 0)

    def _decide(self) -> None:
        """Offer the exporter to the best waiter that may have it now; none before every lease waiting at this
        exporter's start has answered (`unheard`)."""
        if self.offer is not None or self.unheard or self.obj is None or not self._available():
            return
        if self.holder is not None and not self.holder.spot:
            return
        waiter = self.queue.best(self._may_have())
        if waiter is None:
            return
        self.patience = 0
        self._offer(waiter.name)

    def _offer(self, lease: str) -> None:
        """Send the offer (a fresh ticket) and arm its timeout, longer after each one it outlived."""
        waiter = self.queue.get(lease)
        self.tickets += 1
        self.offer = (lease, self.tickets)
        # In the waiter's trace (its Want's), linked to what made the exporter free now (a release, a burst's window).
        self.tell(_lease_address(self.namespace, lease),
                  Offer(self.name, self.tickets, self.holder.lease if self.holder else None),
                  coalesce=_offer_key(self.name), on_behalf_of=waiter.cause if waiter is not None else None)
        self.schedule("offer", _OfferExpired(self.tickets),
                      delay=self.ctx.offer_timeout * 2 ** min(self.patience, _PATIENCE_DOUBLINGS))

    def _may_have(self) -> Callable[[Waiter], bool]:
        """Which waiters may take the exporter now (enabled or allowed disabled; spot rules against the holder)."""
        enabled, holder, allow_disabled = self._seen().enabled, self.holder, self.allow_disabled
        return lambda w: may_take(enabled=enabled, allow_disabled=w.name in allow_disabled, holder=holder, spot=w.spot)

    def _available(self) -> bool:
        """Online and ready; whether disabled matters depends on the waiter."""
        return self._online(self.ctx.now()) and self._seen().ready

    async def _accept(self, accept: Accept) -> None:
        lease_address = _lease_address(self.namespace, accept.lease)
        # An older ticket of the lease the offer is out to counts too: the offer expired and was made to it
        # again. Else a lease slower than the offer timeout (on a starved replica) never accepted in time, and
        # the offers went round the queue to leases of lower priority. (Replies name the lease's own ticket.)
        if self.offer is None or self.offer[0] != accept.lease:
            self.tell(lease_address, OfferWithdrawn(self.name, accept.ticket))
            return
        self.offer = None
        self.cancel("offer")
        if self.obj is None or not self._available():  # it went offline or busy since the offer
            self.tell(lease_address, OfferWithdrawn(self.name, accept.ticket))
            return
        waiter = self.queue.remove(accept.lease)
        evicted = self.holder
        if not await self._commit(Holder(accept.lease, waiter.priority if waiter else 0,
                                          waiter.spot if waiter else False)):
            self.tell(lease_address, OfferWithdrawn(self.name, accept.ticket))
            self._schedule_decision()
            return
        if evicted is not None:
            self._evict(evicted.lease, accept.lease)
        self._tell_granted(accept.lease)

    # --- granting only once no other lease is Ready here -----------------------------------

    def _tell_granted(self, lease: str) -> None:
        """Tell the holder it is granted, once every lease told `Evicted` has shown its end: no moment
        shows two leases Ready on this exporter, however slow the evicted lease's write is."""
        if self.evicting:
            self.grant_due = lease
        else:
            self.tell(_lease_address(self.namespace, lease), Granted(self.name))

    def _evict(self, lease: str, by: str) -> None:
        """Tell `lease` it lost this exporter; the winner waits until its end is seen (`_evicted`).
        Never by the clock alone: a lease slow to write its end is told again, and looked at again."""
        self.evicting = self.evicting | {lease}
        self.tell(_lease_address(self.namespace, lease), Evicted(self.name, by))
        self.schedule("evictions", _EvictionsDue(), delay=self.ctx.offer_timeout)

    def _evicted(self, lease: str) -> None:
        self.evicting = self.evicting - {lease} or NO_NAMES
        if not self.evicting:
            self.cancel("evictions")
            due, self.grant_due = self.grant_due, None
            if due is not None and self.holder is not None and self.holder.lease == due:
                self.tell(_lease_address(self.namespace, due), Granted(self.name))

    async def _check_evictions(self) -> None:
        """Level-based: a lease that is gone, ended or granted elsewhere is evicted (or one that said it does
        not hold this exporter: Release); the others are told again."""
        for lease in sorted(self.evicting):
            obj = LeaseView.maybe(await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, lease)))
            if not _let_go_of(obj, self.name):
                by = self.holder.lease if self.holder else ""
                self.tell(_lease_address(self.namespace, lease), Evicted(self.name, by), coalesce=("Evicted", self.name))
            else:
                self._evicted(lease)
        if self.evicting:
            self.schedule("evictions", _EvictionsDue(), delay=self.ctx.offer_timeout)

    # --- writes ------------------------------------------------------------------------

    async def _commit(self, holder: Holder | None) -> bool:
        """Write `status.leaseRef` under a resourceVersion precondition; False if the exporter
        is gone or its leaseRef was not what this actor believed."""
        assert self.obj is not None
        expected = self.holder.lease if self.holder else None

        async def write(obj: Mapping[str, Any]) -> Mapping[str, Any]:
            patch = {
                "metadata": {"resourceVersion": ExporterView.of(obj).meta.resource_version},
                "status": {"leaseRef": {"name": holder.lease} if holder else None},
            }
            return await self.ctx.api.merge_patch(EXPORTER, self.namespace, self.name, patch, subresource="status")

        # a conflict is usually a heartbeat: try again while leaseRef is unchanged
        match await commit(self.ctx.api, EXPORTER, self.namespace, self.name, self.obj, write,
                           lambda fresh: ExporterView.of(fresh).held_by == expected, inflight=self.ctx.inflight,
                           naming=(LEASE.kind, self.namespace, holder.lease) if holder else None):
            case Written(result=written):
                self.obj, self.holder, self.verified = written, holder, True
                return True
            case Gone():
                self.obj, self.holder = None, None
                self.stop()
            case Lost(fresh=fresh):
                self.obj, self.verified = fresh, True
                await self._adopt_holder(self._seen().held_by)
                if self.holder is not None:  # written by another incarnation or replica: may need healing
                    self.tell(self.address, _Heal(self.holder.lease))
            case GaveUp(fresh=fresh):
                self.obj = fresh
        return False

    async def _verify(self) -> str | None:
        """Read the exporter from the API once, so that who holds it is known for certain; the holder's lease."""
        fresh = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
        self.verified = True
        if fresh is not None and newer(fresh, self.obj):
            self.obj = fresh
            await self._adopt_holder(self._seen().held_by)
        return self.holder.lease if self.holder else None

    async def _adopt_holder(self, lease: str | None) -> LeaseView | None:
        """Take `lease` as the holder; the topology's copy of it (None: unknown there, or no holder)."""
        if lease is None:
            self.holder = None
            return None
        obj = LeaseView.maybe(await self.ask(TOPOLOGY, GetObject(LEASE.kind, self.namespace, lease)))
        self.holder = holder_of(lease, obj)
        return obj

    async def _heartbeat_from_api(self) -> None:
        """The clock says the heartbeat is stale; the API says whether it is. A starved process may not have read
        the newer `lastSeen` from its watch yet: going Offline on the clock alone would write the condition, tell
        every waiter, and write it back a moment later (one read saves those writes)."""
        fresh = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
        if fresh is None:
            return  # its deletion event stops this actor
        if newer(fresh, self.obj):
            await self._observed_exporter(fresh)

    def _seen(self) -> ExporterView:
        """The exporter as last seen (its view, built once per version)."""
        exporter = self.seen_as(ExporterView)
        assert exporter is not None
        return exporter

    def _online(self, now: datetime) -> bool:
        return self._seen().online(now, self.ctx.heartbeat_timeout)

    async def _update_online(self) -> None:
        """Keep the `Online` condition true to the heartbeat, with a timer instead of polling."""
        if self.obj is None:
            return
        now = self.ctx.now()
        exporter = self._seen()
        last_seen = exporter.last_seen
        online = self._online(now)
        if online and last_seen is not None:
            self.schedule("heartbeat", HEARTBEAT_DUE,
                          at=last_seen + self.ctx.heartbeat_timeout + timedelta(milliseconds=10))
        if exporter.says_offline:
            reason, message = "ExporterOffline", "status.exporterStatus is Offline"
        elif online:
            reason = "Heartbeat"  # no timestamp here: the message would go stale with every heartbeat
            message = f"status.lastSeen is less than {int(self.ctx.heartbeat_timeout.total_seconds())}s old"
        elif last_seen is None:
            reason, message = "NeverSeen", "status.lastSeen was never written by the exporter's agent"
        else:
            reason = "HeartbeatTimeout"
            message = (f"last seen {exporter.status.get('lastSeen')}, more than "
                       f"{int(self.ctx.heartbeat_timeout.total_seconds())}s ago")
        written = exporter.condition_dicts
        conditions: Sequence[Mapping[str, Any]] = written
        current = exporter.condition(ONLINE)
        if current is None or current.status != str(online) or current.reason != reason:
            conditions = merge_condition(conditions, new_condition(ONLINE, online, reason, message, now=now,
                                                                   observed_generation=exporter.meta.generation))
        if (registered := registered_condition(exporter, now=now)) is not None:
            conditions = merge_condition(conditions, registered)
        if conditions is written:
            return
        if not await self.write_status({"conditions": conditions}):
            self.stop()


def _lease_address(namespace: str, lease: str) -> str:
    return actor_address(LEASE, namespace, lease)


def _offer_key(exporter: str) -> tuple[str, str]:
    """One offer of an exporter waits in a lease's mailbox at a time: a newer one replaces it in its place."""
    return ("Offer", exporter)


def _let_go_of(lease: LeaseView | None, exporter: str) -> bool:
    """Whether an evicted lease has let go of `exporter`: deleted, ended, or granted another exporter.
    Not "no longer Ready here": a lease granted a moment before may not have written its Ready yet, and its
    write, landing late on a starved leader, made an exporter Ready for two leases (the next one granted
    meanwhile). Its actor ends it on `Evicted` after that write, or answers `Release` if it holds us not."""
    return lease is None or lease.ended or lease.exporter not in (None, exporter)
