"""A lease slower than the offer timeout (its replica starved of CPU) keeps its place in an exporter's queue.

The exporter actor is real; the leases are scripted stand-ins that record what the exporter tells them and
answer only when the test says, late. Before: the late `Accept` of an offer that had expired and been made
to the same lease again was refused, and a late `Decline` of the expired one dropped the lease from the
queue and took back the offer made to it again, so the exporter went to a lease of lower priority
(`bench failover` under CPU hogs: hundreds of "offer ... expired", and priority inversions).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from lessor.actors.context import Context
from lessor.actors.leasing.protocol import (Accept, Decline, Evicted, ExporterRestarted, Granted, Offer, OfferWithdrawn,
                                            Want, Withdraw)
from lessor.mailbox.actor import Actor
from tests.leasing.test_conversations import API, NS, lab, until
from tests.leasing.test_interleavings import lease_ref
from tests.memory_api import MemoryApi, world

EXPORTER = f"exporter/{NS}/e1"
HEARD: list[tuple[str, Any]] = []


class Scripted(Actor):
    """A lease that only listens: what it hears goes to `HEARD`."""

    @classmethod
    def make(cls, address: str, ctx: Context) -> Scripted:
        return cls()

    async def receive(self, message: Any) -> Any:
        HEARD.append((self.address.rsplit("/", 1)[-1], message))
        return None


def offers_to(lease: str) -> list[int]:
    return [m.ticket for who, m in HEARD if who == lease and isinstance(m, Offer)]


def waiting(api: MemoryApi, *names: str) -> None:
    """Leases the topology shows waiting for e1 (their actors are the scripted stand-ins)."""
    for name in names:
        api.seed({"apiVersion": API, "kind": "Lease", "metadata": {"name": name, "namespace": NS},
                  "spec": {"clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi"}},
                           "duration": "1h"}})


async def _two_waiting(api: MemoryApi, system: Any, offers: int = 2) -> None:
    """gold and bronze wait for e1; gold has been offered it `offers` times (offered, expired, offered again...)."""
    HEARD.clear()
    waiting(api, "gold", "bronze")
    lab(api, "e1")
    now = datetime.now(UTC)
    system.tell(EXPORTER, Want("gold", 30, False, now, False))
    system.tell(EXPORTER, Want("bronze", 10, False, now, False))
    await until(lambda: len(offers_to("gold")) >= offers)


async def test_a_late_accept_of_an_expired_offer_made_again_is_taken() -> None:
    async with world(decision_window=0.02, offer_timeout=0.15, kinds={"lease": Scripted.make}) as (system, api):
        await _two_waiting(api, system)
        system.tell(EXPORTER, Accept("gold", offers_to("gold")[0]))  # the first ticket, answered late
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) == "gold")
        await until(lambda: ("gold", Granted("e1")) in HEARD)
        assert offers_to("bronze") == []


async def test_a_late_decline_of_an_expired_offer_made_again_keeps_the_lease_in_its_place() -> None:
    async with world(decision_window=0.02, offer_timeout=0.15, kinds={"lease": Scripted.make}) as (system, api):
        await _two_waiting(api, system)
        system.tell(EXPORTER, Decline("gold", offers_to("gold")[0]))  # it took another exporter, which failed
        await until(lambda: len(offers_to("gold")) >= 3)  # still the one offered to, again and again
        assert offers_to("bronze") == []
        system.tell(EXPORTER, Accept("gold", offers_to("gold")[-1]))
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) == "gold")
        assert offers_to("bronze") == []


async def test_an_exporter_starting_with_a_grant_held_back_by_an_eviction_never_tells_its_holder_it_restarted() -> None:
    """A new leader after a SIGKILL (`bench failover`, kill mode): the deposed leader committed e1 to `boss`,
    evicting the spot lease still Ready there, and died before either lease wrote. The new leader's e1 starts
    holding `boss`, tells `spot` it is evicted and holds `boss`'s Granted until `spot` has ended. It must not
    tell `boss` `ExporterRestarted` meanwhile: to a lease that means "nothing of yours is in flight here", so
    `boss` stopped waiting for e1 to settle and took another exporter's offer, and two exporters named it."""
    async with world(decision_window=0.02, offer_timeout=0.15, kinds={"lease": Scripted.make}) as (system, api):
        HEARD.clear()
        lab(api)  # the client and the policy
        selector = {"matchLabels": {"board": "rpi"}}
        api.seed({"apiVersion": API, "kind": "Lease", "metadata": {"name": "spot", "namespace": NS},
                  "spec": {"clientRef": {"name": "alice"}, "selector": selector, "duration": "1h"},
                  "status": {"exporterRef": {"name": "e1"}, "spotAccess": True, "priority": 5,
                             "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                                             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}})
        api.seed({"apiVersion": API, "kind": "Lease", "metadata": {"name": "boss", "namespace": NS},
                  "spec": {"clientRef": {"name": "alice"}, "selector": selector, "duration": "1h"}})
        api.seed({"apiVersion": API, "kind": "Exporter", "metadata": {"name": "e1", "namespace": NS,
                                                                      "labels": {"board": "rpi"}},
                  "spec": {}, "status": {"lastSeen": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                         "exporterStatus": "Available", "leaseRef": {"name": "boss"}}})
        await until(lambda: any(who == "spot" and isinstance(m, Evicted) for who, m in HEARD))
        await system.ask(EXPORTER, Want("late", 1, False, datetime.now(UTC), False))  # e1's start is over
        told_boss = [m for who, m in HEARD if who == "boss"]
        assert not any(isinstance(m, ExporterRestarted) for m in told_boss), told_boss
        assert not any(isinstance(m, Granted) for m in told_boss), told_boss  # not before spot has ended


def told(lease: str, kind: type) -> list[Any]:
    return [m for who, m in HEARD if who == lease and isinstance(m, kind)]


async def test_a_slow_lease_costs_a_few_offers_not_one_per_timeout() -> None:
    """An offer that outlives its timeout stays with its lease, sent again each time twice as late: a starved
    replica's lease is not buried in offers (one per timeout made 3,149 log lines and as many messages in four
    minutes of `bench failover`), and nothing is offered to a lower waiter meanwhile."""
    async with world(decision_window=0.02, offer_timeout=0.05, kinds={"lease": Scripted.make}) as (system, api):
        await _two_waiting(api, system, offers=4)  # the timeouts: 0.05, 0.1, 0.2 s
        await asyncio.sleep(1.6)  # 32 timeouts of the first length; the next look at 0.4 s, then 0.8 s, then 0.8 s
        assert len(offers_to("gold")) <= 8, offers_to("gold")
        assert offers_to("bronze") == []
        system.tell(EXPORTER, Accept("gold", offers_to("gold")[0]))  # the first ticket still takes it
        await until(lambda: ("gold", Granted("e1")) in HEARD)


async def test_a_better_waiter_takes_the_offer_from_a_slow_lower_one_at_once() -> None:
    """The offer is out to the only waiter, of low priority, which is slow to answer; a lease of higher
    priority then asks. It gets the offer now, not after the slow lease's timeout, and the slow lease is told
    its offer is withdrawn (its late Accept is refused: no grant below a waiting higher priority)."""
    async with world(decision_window=0.02, offer_timeout=60.0, kinds={"lease": Scripted.make}) as (system, api):
        HEARD.clear()
        waiting(api, "gold", "bronze")
        lab(api, "e1")
        system.tell(EXPORTER, Withdraw("gold"))  # not asking yet
        system.tell(EXPORTER, Want("bronze", 10, False, datetime.now(UTC), False))
        await until(lambda: len(offers_to("bronze")) == 1)
        system.tell(EXPORTER, Want("gold", 30, False, datetime.now(UTC), False))
        await until(lambda: len(offers_to("gold")) == 1)
        assert told("bronze", OfferWithdrawn) == [OfferWithdrawn("e1", offers_to("bronze")[0])]
        system.tell(EXPORTER, Accept("bronze", offers_to("bronze")[0]))
        await until(lambda: len(told("bronze", OfferWithdrawn)) == 2)
        assert lease_ref(api.object("Exporter", NS, "e1")) is None


async def test_a_new_exporter_actor_offers_nothing_before_every_waiting_lease_has_answered() -> None:
    """A new leader: e1's actor starts while two leases wait for it. The low-priority one's actor happens to
    ask first; the high-priority one's actor is slow to start. e1 offers nothing until the slow one has said
    where it stands, then offers it to the higher priority (bench failover: 10 grants to a lower priority
    around a leadership change while a higher one of the same group waited)."""
    async with world(decision_window=0.02, offer_timeout=0.1, kinds={"lease": Scripted.make}) as (system, api):
        HEARD.clear()
        waiting(api, "gold", "bronze")
        lab(api, "e1")
        await until(lambda: len([m for _, m in HEARD if isinstance(m, ExporterRestarted)]) == 2)
        system.tell(EXPORTER, Want("bronze", 10, False, datetime.now(UTC), False))
        await asyncio.sleep(0.5)  # 25 decision windows, 5 offer timeouts
        assert offers_to("bronze") == []
        system.tell(EXPORTER, Want("gold", 30, False, datetime.now(UTC), False))
        await until(lambda: len(offers_to("gold")) == 1)
        assert offers_to("bronze") == []


async def test_a_waiting_lease_that_ends_without_answering_holds_up_no_offer() -> None:
    """A lease the topology showed waiting when e1 started ends before its actor answers: e1 sees that in the
    topology and offers to the next waiter."""
    async with world(decision_window=0.02, offer_timeout=0.1, kinds={"lease": Scripted.make}) as (system, api):
        HEARD.clear()
        waiting(api, "gold", "bronze")
        lab(api, "e1")
        await until(lambda: len([m for _, m in HEARD if isinstance(m, ExporterRestarted)]) == 2)
        system.tell(EXPORTER, Want("bronze", 10, False, datetime.now(UTC), False))
        gold = api.object("Lease", NS, "gold")
        api.seed({**gold, "status": {"ended": True}})
        await until(lambda: len(offers_to("bronze")) == 1)


async def test_an_exporter_whose_heartbeat_the_watch_has_not_brought_yet_does_not_go_offline() -> None:
    """A starved process reads its watch late: the clock says the heartbeat is stale while the API already has a
    newer one. The exporter asks the API before it writes Offline (and tells its waiters), so it never flaps."""
    async with world(decision_window=0.02, heartbeat_timeout=timedelta(seconds=2)) as (system, api):
        lab(api, "e1")
        key = ("Exporter", NS, "e1")
        for _ in range(10):  # 5 s: past two timeouts, each heartbeat written where the watch does not see it
            await asyncio.sleep(0.5)
            stored = api.objects[key]
            stored["status"]["lastSeen"] = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            stored["metadata"]["resourceVersion"] = str(int(stored["metadata"]["resourceVersion"]) + 1000)
        online = [c for w in api.writes if w.kind == "Exporter"
                  for c in ((w.object or {}).get("status") or {}).get("conditions") or () if c.get("type") == "Online"]
        assert online and all(c["status"] == "True" for c in online), online
