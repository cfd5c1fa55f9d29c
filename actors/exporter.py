"""The exporter actor: the single arbiter of one Exporter.

Who gets exporter X is decided here and nowhere else. Leases queue with
`Want`; whenever X can be handed out (free, online, ready, enabled) the actor
offers it to the best waiter (highest priority, then oldest lease), and on
`Accept` writes `status.leaseRef` with a resourceVersion precondition: that
write is the commit point. A spot holder is evicted the same way, by a
non-spot waiter's accepted offer replacing its name in `status.leaseRef`.

State: the last Exporter object, the holder (lease name, priority, spot),
the waiting queue, the one outstanding offer. Everything but the queue is
rebuilt from the API on restart; the queue is rebuilt by telling the waiting
leases (`ExporterReset`) to queue again.

Writes: `status.leaseRef` (commit points) and the `Online` condition.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.mailbox import Actor
from lessor.templates.timestamps import parse_timestamp

from .api import EXPORTER, Conflict, NotFound
from .conditions import find_condition, new_condition
from .context import Context, split_address
from .lease_protocol import (
    Accept,
    Confirm,
    Decline,
    Evicted,
    ExporterReset,
    Granted,
    Offer,
    OfferWithdrawn,
    Release,
    Want,
    Withdraw,
)
from .observed import Observed
from .policy import Holder, exporter_online, exporter_ready
from .queries import TOPOLOGY, GetObject, WaitingLeases
from .queue import WaitQueue, Waiter

log = logging.getLogger(__name__)

ONLINE = "Online"
_COMMIT_ATTEMPTS = 5


@dataclass(frozen=True, slots=True)
class _Decide:
    """Sent to self: decide after the messages already queued (all Wants of a burst) are in."""


@dataclass(frozen=True, slots=True)
class _OfferExpired:
    ticket: int


@dataclass(frozen=True, slots=True)
class _HeartbeatDue:
    """Sent to self when `lastSeen` is about to go stale."""


class ExporterActor(Actor):
    __slots__ = ("ctx", "namespace", "name", "obj", "holder", "queue", "offer", "tickets",
                 "deciding", "allow_disabled")

    def __init__(self, address: str, ctx: Context) -> None:
        self.ctx = ctx
        self.namespace, self.name = split_address(address)
        self.obj: Mapping[str, Any] | None = None
        self.holder: Holder | None = None
        self.queue = WaitQueue()
        self.offer: tuple[str, int] | None = None  # (lease, ticket)
        self.tickets = 0
        self.deciding = False
        self.allow_disabled: set[str] = set()

    # --- life ---------------------------------------------------------------------------

    async def started(self) -> None:
        # From the API, not the topology's copy: who holds the exporter must be known for
        # certain, since restarted leases ask this actor whether they still hold it.
        self.obj = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
        if self.obj is None:
            self.stop()
            return
        await self._adopt_holder(_lease_ref(self.obj))
        await self._update_online()
        for lease in await self.ask(TOPOLOGY, WaitingLeases(self.namespace, self.name)):
            self.tell(_lease_address(self.namespace, lease), ExporterReset(self.name))

    async def receive(self, message: Any) -> Any:
        match message:
            case Observed(kind="Exporter"):
                await self._observed_exporter(message.object)
            case Observed(kind="Lease"):
                await self._observed_lease(message.name, message.object)
            case Want():
                self._want(message)
            case Withdraw(lease=lease):
                self._forget(lease)
            case Accept():
                await self._accept(message)
            case Decline(lease=lease, ticket=ticket):
                if self.offer == (lease, ticket):
                    self.offer = None
                self._forget(lease)
                self._schedule_decision()
            case Confirm(lease=lease):
                holder = self.holder.lease if self.holder else None
                self.tell(_lease_address(self.namespace, lease),
                          Granted(self.name) if holder == lease else Evicted(self.name, holder or ""))
            case Release(lease=lease):
                self._forget(lease)
                if self.holder is not None and self.holder.lease == lease:
                    await self._commit(None)
                self._schedule_decision()
            case _Decide():
                self.deciding = False
                self._decide()
            case _OfferExpired(ticket=ticket):
                if self.offer is not None and self.offer[1] == ticket:
                    # The lease may have restarted and lost the offer: offer again (a fresh ticket).
                    log.info("exporter %s/%s: offer to %s expired", self.namespace, self.name, self.offer[0])
                    self.offer = None
                    self._decide()
            case _HeartbeatDue():
                was = self._available()
                await self._update_online()
                if self.obj is not None and self._available() != was:
                    self._tell_waiters()
            case _:
                log.warning("exporter %s/%s: unexpected message %r", self.namespace, self.name, message)

    # --- what the topology tells us --------------------------------------------------------

    async def _observed_exporter(self, obj: Mapping[str, Any] | None) -> None:
        if obj is None:  # deleted: its leases see the deletion themselves and end
            self.stop()
            return
        if _newer(obj, self.obj):
            was = self.obj is not None and self._available()
            self.obj = obj
            await self._update_online()
            if self.obj is not None and self._available() != was:
                self._tell_waiters()
        self._schedule_decision()

    async def _observed_lease(self, lease: str, obj: Mapping[str, Any] | None) -> None:
        ended = obj is None or (obj.get("status") or {}).get("ended") is True
        if ended:
            self._forget(lease)
        if self.holder is None or self.holder.lease != lease:
            return
        if ended:  # a deleted or ended holder gives the exporter back
            await self._commit(None)
            self._schedule_decision()
        elif obj is not None:
            status = obj.get("status") or {}
            self.holder = Holder(lease, int(status.get("priority") or 0), status.get("spotAccess") is True)

    # --- the queue and the decision ------------------------------------------------------

    def _want(self, want: Want) -> None:
        if self.holder is not None and self.holder.lease == want.lease:
            self.tell(_lease_address(self.namespace, want.lease), Granted(self.name))
            return
        burst = not len(self.queue)  # the first request after a quiet spell opens a decision window
        self.queue.add(Waiter(want.lease, want.priority, want.created, want.spot))
        if want.allow_disabled:
            self.allow_disabled.add(want.lease)
        if self.offer is not None and self.offer[0] == want.lease:  # a restarted lease lost our offer
            self.tell(_lease_address(self.namespace, want.lease),
                      Offer(self.name, self.offer[1], self.holder.lease if self.holder else None))
            return
        self._schedule_decision(window=burst)

    def _forget(self, lease: str) -> None:
        self.queue.remove(lease)
        self.allow_disabled.discard(lease)
        if self.offer is not None and self.offer[0] == lease:
            self.offer = None
            self._schedule_decision()

    def _tell_waiters(self) -> None:
        """Availability changed: waiting leases may show another Pending reason now.

        (Status-only changes of an exporter are routed to its actor alone, not to every
        lease that selects it; this is how those leases hear of what matters to them.)
        """
        for waiter in self.queue:
            self.tell(_lease_address(self.namespace, waiter.name), ExporterReset(self.name))

    def _schedule_decision(self, *, window: bool = False) -> None:
        """Decide after the messages already queued; after the decision window when a burst of
        requests is just starting, so that they are all in before the first offer."""
        if not self.deciding and self.offer is None and len(self.queue):
            self.deciding = True
            self.schedule("decide", _Decide(), delay=self.ctx.decision_window if window else 0)

    def _decide(self) -> None:
        """Offer the exporter to the best waiter that may have it now."""
        if self.offer is not None or self.obj is None or not self._available():
            return
        enabled = (self.obj.get("spec") or {}).get("enabled") is not False
        holder = self.holder
        if holder is not None and not holder.spot:
            return
        waiter = self.queue.best(lambda w: (enabled or w.name in self.allow_disabled)
                                 # only a non-spot approval evicts a spot holder
                                 and (holder is None or not w.spot))
        if waiter is None:
            return
        self.tickets += 1
        self.offer = (waiter.name, self.tickets)
        self.tell(_lease_address(self.namespace, waiter.name),
                  Offer(self.name, self.tickets, holder.lease if holder else None))
        self.schedule("offer", _OfferExpired(self.tickets), delay=self.ctx.offer_timeout)

    def _available(self) -> bool:
        """Online and ready; whether disabled matters depends on the waiter."""
        assert self.obj is not None
        status = self.obj.get("status") or {}
        return self._online(self.ctx.now()) and exporter_ready(status.get("exporterStatus"))

    async def _accept(self, accept: Accept) -> None:
        lease_address = _lease_address(self.namespace, accept.lease)
        if self.offer != (accept.lease, accept.ticket):
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
            self.tell(_lease_address(self.namespace, evicted.lease), Evicted(self.name, accept.lease))
        self.tell(lease_address, Granted(self.name))

    # --- writes ------------------------------------------------------------------------

    async def _commit(self, holder: Holder | None) -> bool:
        """Write `status.leaseRef` under a resourceVersion precondition; False if the exporter
        is gone or its leaseRef was not what this actor believed."""
        expected = self.holder.lease if self.holder else None
        for _ in range(_COMMIT_ATTEMPTS):
            assert self.obj is not None
            patch = {
                "metadata": {"resourceVersion": self.obj["metadata"]["resourceVersion"]},
                "status": {"leaseRef": {"name": holder.lease} if holder else None},
            }
            try:
                self.obj = await self.ctx.api.merge_patch(EXPORTER, self.namespace, self.name, patch,
                                                          subresource="status")
                self.holder = holder
                return True
            except NotFound:
                self.obj, self.holder = None, None
                self.stop()
                return False
            except Conflict:  # usually a heartbeat: re-read and try again if leaseRef is unchanged
                fresh = await self.ctx.api.get(EXPORTER, self.namespace, self.name)
                if fresh is None:
                    self.obj, self.holder = None, None
                    self.stop()
                    return False
                self.obj = fresh
                if _lease_ref(fresh) != expected:
                    await self._adopt_holder(_lease_ref(fresh))
                    return False
        return False

    async def _adopt_holder(self, lease: str | None) -> None:
        if lease is None:
            self.holder = None
            return
        obj = await self.ask(TOPOLOGY, GetObject("Lease", self.namespace, lease))
        status = (obj or {}).get("status") or {}
        self.holder = Holder(lease, int(status.get("priority") or 0), status.get("spotAccess") is True)

    def _online(self, now: datetime) -> bool:
        assert self.obj is not None
        status = self.obj.get("status") or {}
        return exporter_online(_last_seen(status), status.get("exporterStatus"), now=now,
                               timeout=self.ctx.heartbeat_timeout)

    async def _update_online(self) -> None:
        """Keep the `Online` condition true to the heartbeat, with a timer instead of polling."""
        if self.obj is None:
            return
        now = self.ctx.now()
        status = self.obj.get("status") or {}
        last_seen = _last_seen(status)
        online = self._online(now)
        if online and last_seen is not None:
            self.schedule("heartbeat", _HeartbeatDue(),
                          at=last_seen + self.ctx.heartbeat_timeout + timedelta(milliseconds=10))
        if status.get("exporterStatus") == "Offline":
            reason, message = "ExporterOffline", "status.exporterStatus is Offline"
        elif online:
            reason, message = "Heartbeat", f"last seen {status.get('lastSeen')}"
        elif last_seen is None:
            reason, message = "NeverSeen", "status.lastSeen was never written by the exporter's agent"
        else:
            reason = "HeartbeatTimeout"
            message = (f"last seen {status.get('lastSeen')}, more than "
                       f"{int(self.ctx.heartbeat_timeout.total_seconds())}s ago")
        current = find_condition(status.get("conditions"), ONLINE)
        if current is not None and current.get("status") == str(online) and current.get("reason") == reason:
            return
        condition = new_condition(ONLINE, online, reason, message, now=now,
                                  observed_generation=self.obj["metadata"].get("generation"))
        others = [c for c in status.get("conditions") or () if c.get("type") != ONLINE]
        if current is not None and current.get("status") == condition["status"]:
            condition["lastTransitionTime"] = current.get("lastTransitionTime", condition["lastTransitionTime"])
        try:
            self.obj = await self.ctx.api.patch_status(EXPORTER, self.namespace, self.name,
                                                       {"conditions": [*others, condition]})
        except NotFound:
            self.stop()


def _lease_ref(obj: Mapping[str, Any]) -> str | None:
    ref = (obj.get("status") or {}).get("leaseRef") or {}
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) and name else None


def _last_seen(status: Mapping[str, Any]) -> datetime | None:
    value = status.get("lastSeen")
    try:
        return parse_timestamp(value) if isinstance(value, str) else None
    except ValueError:
        return None


def _newer(obj: Mapping[str, Any], than: Mapping[str, Any] | None) -> bool:
    """Snapshots can trail our own writes; keep the one with the higher resourceVersion."""
    if than is None:
        return True
    try:
        return int(obj["metadata"]["resourceVersion"]) >= int(than["metadata"]["resourceVersion"])
    except (KeyError, ValueError):
        return True


def _lease_address(namespace: str, lease: str) -> str:
    return f"lease/{namespace}/{lease}"
