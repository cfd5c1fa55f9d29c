"""The leasing conversations (Want, Offer, Accept, Granted, Evicted) between the real exporter, lease and
topology actors, over an in-memory API (tests/memory_api.py): fast, and able to see the order of writes."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from typing import Any

from prometheus_client import CollectorRegistry

from lessor.actors.api import EXPORTER as EXPORTER_KIND, LEASE
from lessor.actors.leasing.world import LeaseWorld
from lessor.mailbox.actor import DEFAULT_ASK_TIMEOUT
from lessor.topology.actor import TopologyActor
from tests.memory_api import MemoryApi, Write, world
from tests.slowness import scaled

API = "lessor.dev/v1alpha1"
NS = "lab"


def exporter(api: MemoryApi, name: str) -> None:
    api.seed({"apiVersion": API, "kind": "Exporter", "metadata": {"name": name, "namespace": NS,
                                                                  "labels": {"board": "rpi"}},
              "spec": {}, "status": {"lastSeen": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                                     "exporterStatus": "Available"}})


def lab(api: MemoryApi, *exporters: str) -> None:
    for name in exporters:
        exporter(api, name)
    api.seed({"apiVersion": API, "kind": "Client", "metadata": {"name": "alice", "namespace": NS,
                                                                "labels": {"team": "qa"}}})
    api.seed({"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "p", "namespace": NS},
              "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                  {"priority": 20, "from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}]},
                  {"priority": 5, "spotAccess": True, "from": [{"clientSelector": {"matchLabels": {"spot": "yes"}}}]},
              ]}})


def lease(api: MemoryApi, name: str, client: str = "alice") -> None:
    api.seed({"apiVersion": API, "kind": "Lease", "metadata": {"name": name, "namespace": NS},
              "spec": {"clientRef": {"name": client}, "selector": {"matchLabels": {"board": "rpi"}},
                       "duration": "1h"}})


def is_ready(obj: Any) -> bool:
    status = (obj or {}).get("status") or {}
    return not status.get("ended") and any(c.get("type") == "Ready" and c.get("status") == "True"
                                           for c in status.get("conditions") or ())


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "never got there"
        await asyncio.sleep(0.01)


def first(writes: list[Write], match: Any) -> int:
    return next(i for i, w in enumerate(writes) if match(w))


def commit_of(lease_name: str) -> Any:
    return lambda w: w.kind == "Exporter" and ((w.object or {}).get("status") or {}).get(
        "leaseRef") == {"name": lease_name}


def ready_write_of(lease_name: str) -> Any:
    return lambda w: w.kind == "Lease" and w.name == lease_name and is_ready(w.object)


async def test_a_grant_commits_on_the_exporter_before_the_lease_says_ready() -> None:
    async with world(decision_window=0.05) as (_, api):
        lab(api, "e1")
        lease(api, "l1")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
    assert first(api.writes, commit_of("l1")) < first(api.writes, ready_write_of("l1"))
    assert api.object("Lease", NS, "l1")["status"]["exporterRef"] == {"name": "e1"}


async def test_leases_created_together_are_served_by_priority_one_exporter_each_time() -> None:
    async with world(decision_window=0.2) as (_, api):
        lab(api, "e1")
        api.seed({"apiVersion": API, "kind": "Client", "metadata": {"name": "sam", "namespace": NS,
                                                                    "labels": {"spot": "yes"}}})
        lease(api, "low", client="sam")  # first, but only spot priority 5
        lease(api, "high")
        await until(lambda: is_ready(api.object("Lease", NS, "high")))
        await asyncio.sleep(0.2)
        assert not is_ready(api.object("Lease", NS, "low"))
    holders = [(w.object or {}).get("status", {}).get("leaseRef") for w in api.writes if w.kind == "Exporter"]
    assert {"name": "low"} not in holders  # never granted to the lower priority, not even for a moment


async def test_a_spot_holder_is_ended_before_the_evicting_lease_is_ready() -> None:
    async with world(decision_window=0.05) as (_, api):
        lab(api, "e1")
        api.seed({"apiVersion": API, "kind": "Client", "metadata": {"name": "sam", "namespace": NS,
                                                                    "labels": {"spot": "yes"}}})
        lease(api, "spot", client="sam")
        await until(lambda: is_ready(api.object("Lease", NS, "spot")))
        lease(api, "boss")
        await until(lambda: is_ready(api.object("Lease", NS, "boss")))
    ended = first(api.writes, lambda w: w.kind == "Lease" and w.name == "spot"
                  and ((w.object or {}).get("status") or {}).get("ended"))
    assert ended < first(api.writes, ready_write_of("boss"))
    ready_now: set[str] = set()  # replay the writes: never two leases Ready at once
    for w in api.writes:
        if w.kind == "Lease":
            (ready_now.add if is_ready(w.object) else ready_now.discard)(w.name)
            assert len(ready_now) <= 1, (w, ready_now)


async def test_an_exporter_killed_mid_conversation_still_grants_one_lease() -> None:
    async with world(decision_window=0.1, offer_timeout=0.5) as (system, api):
        lab(api, "e1")
        lease(api, "l1")
        await asyncio.sleep(0.05)  # inside the decision window: the exporter holds the Want
        system.kill("exporter/lab/e1")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
    commits = [w for w in api.writes if commit_of("l1")(w)]
    assert len(commits) == 1


class SlowTopology(TopologyActor):
    """A topology too busy to answer any lease's question until `opened` (in the operator: a burst on a
    starved CPU). It handles nothing else meanwhile either: one mailbox."""

    opened = asyncio.Event()

    async def receive(self, message: Any) -> Any:
        if isinstance(message, LeaseWorld):
            await SlowTopology.opened.wait()
        return await super().receive(message)


async def test_a_topology_slower_than_the_old_ask_timeout_restarts_no_one_and_priority_order_holds() -> None:
    SlowTopology.opened = asyncio.Event()
    registry = CollectorRegistry()
    async with world(topology=SlowTopology, registry=registry, decision_window=0.05) as (_, api):
        exporter(api, "e1")
        for name, team in (("gold", "gold"), ("silver", "silver")):
            api.seed({"apiVersion": API, "kind": "Client", "metadata": {"name": name, "namespace": NS,
                                                                        "labels": {"team": team}}})
        api.seed({"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "p", "namespace": NS},
                  "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                      {"priority": 30, "from": [{"clientSelector": {"matchLabels": {"team": "gold"}}}]},
                      {"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "silver"}}}]}]}})
        created = datetime.now(UTC) - timedelta(minutes=10)
        order = ["silver-1", "silver-2", "gold-1", "gold-2"]  # created in this order; granted gold first
        for minute, name in enumerate(order):
            api.seed({"apiVersion": API, "kind": "Lease", "metadata": {
                "name": name, "namespace": NS,
                "creationTimestamp": (created + timedelta(minutes=minute)).strftime("%Y-%m-%dT%H:%M:%SZ")},
                "spec": {"clientRef": {"name": name.split("-")[0]}, "selector": {"matchLabels": {"board": "rpi"}},
                         "duration": "1h"}})
        await asyncio.sleep(DEFAULT_ASK_TIMEOUT + 1)  # every lease has waited past the old ask timeout
        SlowTopology.opened.set()
        granted = []
        for _ in order:  # one exporter: each holder releases it for the next
            await until(lambda: any(is_ready(api.object("Lease", NS, n)) for n in order if n not in granted),
                        timeout=60)
            holder = next(n for n in order if n not in granted and is_ready(api.object("Lease", NS, n)))
            granted.append(holder)
            await api.merge_patch(LEASE, NS, holder, {"spec": {"release": True}})
        assert granted == ["gold-1", "gold-2", "silver-1", "silver-2"]
        assert (registry.get_sample_value("lessor_mailbox_slow_asks_total", {"kind": "topology"}) or 0) >= 1
        restarts = [m for m in registry.collect() if m.name == "lessor_actor_restarts"]
        assert sum(s.value for m in restarts for s in m.samples) == 0


def pending_writes(api: MemoryApi, lease_name: str) -> int:
    return sum(1 for w in api.writes if w.kind == "Lease" and w.name == lease_name and any(
        c.get("type") == "Pending" for c in ((w.object or {}).get("status") or {}).get("conditions") or ()))


async def test_only_a_lease_that_really_waits_writes_pending_even_if_its_grant_is_slow() -> None:
    # The exporter offers itself only after its decision window, past the lease's Pending grace (0.1 s) and
    # its first re-resolve (0.3 s), within the graces it re-resolves in before showing Pending anyway (0.7 s).
    async with world(decision_window=0.5, pending_grace=0.1) as (_, api):
        lab(api, "e1")
        lease(api, "first")
        await until(lambda: is_ready(api.object("Lease", NS, "first")))
        lease(api, "second")  # e1 is held: this one really waits
        await until(lambda: pending_writes(api, "second") == 1)
        await api.merge_patch(LEASE, NS, "first", {"spec": {"release": True}})
        await until(lambda: is_ready(api.object("Lease", NS, "second")))
    assert pending_writes(api, "first") == 0  # slow, but an exporter was free all along: commit and Ready only
    assert [w.verb for w in api.writes if w.kind == "Lease" and w.name == "first"][:2] == ["create", "patch status"]
    assert pending_writes(api, "second") == 1


async def test_a_lease_whose_free_exporter_never_comes_shows_pending_after_a_few_graces() -> None:
    """Re-resolving instead of writing Pending is bounded (graces of 1, 2, 4 and 8 × the first): a starved node
    does not re-resolve every waiting lease every second, and the user sees why the lease waits."""
    async with world(decision_window=30.0, pending_grace=0.02) as (_, api):  # the exporter will not offer in time
        lab(api, "e1")
        lease(api, "l1")
        await until(lambda: pending_writes(api, "l1") == 1)
        assert not is_ready(api.object("Lease", NS, "l1"))


def lease_status_writes(api: MemoryApi, lease_name: str) -> list[Any]:
    return [w for w in api.writes if w.kind == "Lease" and w.name == lease_name and w.verb == "patch status"]


async def test_a_lease_whose_busy_exporter_frees_up_within_the_grace_writes_one_status_ready() -> None:
    """Every candidate held when the lease came, one released a moment later: the lease's only status write
    is Ready (a storm of leases, half of them served within a second, writes no Pending for those)."""
    async with world(decision_window=0.02, pending_grace=2.0) as (_, api):
        lab(api, "e1")
        lease(api, "first")
        await until(lambda: is_ready(api.object("Lease", NS, "first")))
        lease(api, "second")  # e1 is held: nothing it could take now
        await asyncio.sleep(0.2)
        await api.merge_patch(LEASE, NS, "first", {"spec": {"release": True}})
        await until(lambda: is_ready(api.object("Lease", NS, "second")))
    assert pending_writes(api, "second") == 0
    assert len(lease_status_writes(api, "second")) == 1


async def test_a_waiting_lease_rewrites_its_pending_message_at_most_every_refresh() -> None:
    """A lease waiting for a group whose exporters keep changing hands writes its reason once; the new list of
    states in the message waits for the refresh (every grant around would otherwise be a write of each waiter)."""
    async with world(decision_window=0.02, pending_grace=0.05) as (_, api):
        lab(api, "e1", "e2")
        lease(api, "a")
        lease(api, "b")
        await until(lambda: is_ready(api.object("Lease", NS, "a")) and is_ready(api.object("Lease", NS, "b")))
        lease(api, "waiter")
        await until(lambda: pending_writes(api, "waiter") == 1)
        for _ in range(3):  # e2 changes hands: the waiter is told, and its message would change each time
            await api.merge_patch(EXPORTER_KIND, NS, "e2", {"status": {"exporterStatus": "Offline"}},
                                  subresource="status")
            await asyncio.sleep(0.7)
            await api.merge_patch(EXPORTER_KIND, NS, "e2", {"status": {"exporterStatus": "Available"}},
                                  subresource="status")
            await asyncio.sleep(0.7)
        assert pending_writes(api, "waiter") <= 2, [w.object["status"]["conditions"]
                                                    for w in lease_status_writes(api, "waiter")]


class CountingTopology(TopologyActor):
    """Counts the leases' resolutions (each asks `LeaseWorld` once)."""

    resolutions = 0

    async def receive(self, message: Any) -> Any:
        if isinstance(message, LeaseWorld):
            CountingTopology.resolutions += 1
        return await super().receive(message)


async def test_a_waiting_lease_queues_again_at_a_restarted_exporter_without_resolving_again() -> None:
    """An exporter's actor restart changes no object: the leases waiting for it queue again (it grants them
    later) and resolve nothing (a new leader starts its thousand exporters over a minute at a fifth of a core,
    and a re-resolve of every waiting lease at each exporter's start was most of a takeover's CPU)."""
    CountingTopology.resolutions = 0
    async with world(topology=CountingTopology, decision_window=0.02, pending_grace=0.05) as (system, api):
        lab(api, "e1")
        lease(api, "holder")
        await until(lambda: is_ready(api.object("Lease", NS, "holder")))
        lease(api, "waiter")
        await until(lambda: pending_writes(api, "waiter") == 1)
        await asyncio.sleep(0.5)  # the waiter's own re-resolves are over
        before = CountingTopology.resolutions
        for _ in range(3):
            system.kill(f"exporter/{NS}/e1")
            await asyncio.sleep(1.0)  # the restart, the waiter's answer, and a re-resolve's delay (0.5 s)
        assert CountingTopology.resolutions == before
        await api.merge_patch(LEASE, NS, "holder", {"spec": {"release": True}})
        await until(lambda: is_ready(api.object("Lease", NS, "waiter")))


async def test_a_new_incarnation_of_a_lease_already_shown_pending_resolves_once() -> None:
    """A new leader's waiting lease that already shows why it waits writes nothing at once, so it has no write to
    save by resolving again after graces, even with a free exporter in its plan (each of thousands of waiting
    leases re-resolved three times while a new leader at a fifth of a core had not granted yet)."""
    CountingTopology.resolutions = 0
    async with world(topology=CountingTopology, decision_window=30.0, pending_grace=0.02) as (system, api):
        lab(api, "e1")  # free, but it will not offer in time: the lease waits with a free exporter in its plan
        lease(api, "l1")
        await until(lambda: pending_writes(api, "l1") == 1)
        before = CountingTopology.resolutions
        system.kill(f"lease/{NS}/l1")  # a new incarnation, as after a takeover
        await until(lambda: CountingTopology.resolutions > before)
        await asyncio.sleep(0.5)  # graces of 0.02, 0.04 and 0.08 s, many times over
        assert CountingTopology.resolutions == before + 1
        assert pending_writes(api, "l1") == 1


async def test_a_lease_whose_free_exporter_stays_free_looks_it_up_between_graces_and_resolves_once_more() -> None:
    """Between its graces a lease with a free exporter in its plan looks that exporter up, and resolves again only
    at the last (then shows Pending of the world as it is): at a fifth of a core, a storm's thousands of leases
    each resolved four times before their first grant."""
    CountingTopology.resolutions = 0
    async with world(topology=CountingTopology, decision_window=30.0, pending_grace=0.02) as (_, api):
        lab(api, "e1")  # free, but it will not offer in time
        lease(api, "l1")
        await until(lambda: pending_writes(api, "l1") == 1)
        assert CountingTopology.resolutions == 2  # the first, and the last grace's
        assert "free a moment ago: e1" in next(c["message"] for c in api.object("Lease", NS, "l1")["status"][
            "conditions"] if c["type"] == "Pending")


def _handled(registry: CollectorRegistry, kind: str, message_type: str) -> float:
    return sum(registry.get_sample_value("lessor_messages_handled_total",
                                         {"kind": kind, "message_type": message_type, "outcome": outcome}) or 0
               for outcome in ("ok", "error"))


async def test_a_lease_created_while_another_leases_commit_is_in_flight_asks_no_exporter_to_settle() -> None:
    """Settling guards a lease against its own earlier incarnation's commit; another lease's commit on the wire is
    none of its business. In a storm some commit is always in flight, and every new lease used to ask each of its
    candidates where it stands (two messages each: a third of `bench leases`' messages)."""
    registry = CollectorRegistry()
    async with world(registry=registry, decision_window=0.02) as (_, api):
        lab(api, "e1", "e2")
        sent = asyncio.Event()

        def slow_commit_of_first(kind: str, name: str, patch: Any) -> float:
            if kind == "Exporter" and (patch.get("status") or {}).get("leaseRef") == {"name": "first"}:
                sent.set()
                return 1.0
            return 0.0

        api.delay = slow_commit_of_first
        lease(api, "first")
        await sent.wait()  # the first lease's commit is on its way, for a second
        lease(api, "second")
        await until(lambda: is_ready(api.object("Lease", NS, "first")) and is_ready(api.object("Lease", NS, "second")))
        assert _handled(registry, "exporter", "Settle") == 0
