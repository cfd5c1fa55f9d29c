"""A lease slower than the offer timeout (its replica starved of CPU) keeps its place in an exporter's queue.

The exporter actor is real; the leases are scripted stand-ins that record what the exporter tells them and
answer only when the test says, late. Before: the late `Accept` of an offer that had expired and been made
to the same lease again was refused, and a late `Decline` of the expired one dropped the lease from the
queue and took back the offer made to it again, so the exporter went to a lease of lower priority
(`bench failover` under CPU hogs: hundreds of "offer ... expired", and priority inversions).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from lessor.actors.context import Context
from lessor.actors.leasing.protocol import Accept, Decline, Evicted, ExporterRestarted, Granted, Offer, Want
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


async def _two_waiting(api: MemoryApi, system: Any) -> None:
    HEARD.clear()
    lab(api, "e1")
    now = datetime.now(UTC)
    system.tell(EXPORTER, Want("gold", 30, False, now, False))
    system.tell(EXPORTER, Want("bronze", 10, False, now, False))
    await until(lambda: len(offers_to("gold")) >= 2)  # offered, expired, offered again


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
