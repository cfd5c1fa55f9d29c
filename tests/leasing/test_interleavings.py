"""Every interleaving of docs/architecture.md's "Interleavings" table, as a conversation between the real
exporter, lease and topology actors over the in-memory API: slow commits, a lease deleted while its exporter
commits, an offer timeout racing a commit, actors killed mid-commit, a replica's late write, and the messes
a deposed replica can leave (healed at the next observation).

Each test replays the API's write history and checks it at every version, not only at the end: no lease is
ever named by two exporters, and no exporter is ever Ready for two leases.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tests.leasing.test_conversations import API, NS, exporter, is_ready, lab, lease, until
from tests.memory_api import MemoryApi, Write, world
from tests.slowness import scaled


def lease_ref(obj: Any) -> str | None:
    return (((obj or {}).get("status") or {}).get("leaseRef") or {}).get("name")


def exporter_ref(obj: Any) -> str | None:
    return (((obj or {}).get("status") or {}).get("exporterRef") or {}).get("name")


def assert_never_double_booked(writes: list[Write]) -> None:
    """Replay the history: at no version is a lease named by two exporters, or an exporter Ready for two leases."""
    named: dict[str, str | None] = {}  # exporter -> the lease its leaseRef names
    ready: dict[str, str | None] = {}  # lease -> the exporter it is Ready on
    for i, w in enumerate(writes):
        if w.kind == "Exporter":
            named[w.name] = lease_ref(w.object)
        elif w.kind == "Lease":
            ready[w.name] = exporter_ref(w.object) if is_ready(w.object) else None
        by_lease: dict[str, list[str]] = {}
        for ex, held in named.items():
            if held is not None:
                by_lease.setdefault(held, []).append(ex)
        assert all(len(exs) == 1 for exs in by_lease.values()), (i, w, by_lease)
        by_exporter: dict[str, list[str]] = {}
        for held_lease, ex in ready.items():
            if ex is not None:
                by_exporter.setdefault(ex, []).append(held_lease)
        assert all(len(ls) == 1 for ls in by_exporter.values()), (i, w, by_exporter)


def slow(api: MemoryApi, kind: str, name: str, seconds: float, *, when: Any = lambda patch: True) -> None:
    before = api.delay
    api.delay = lambda k, n, patch: seconds if (k, n) == (kind, name) and when(patch) else before(k, n, patch)


def commits_lease(patch: Any) -> bool:
    return bool(lease_ref(patch))


def spot_client(api: MemoryApi) -> None:
    api.seed({"apiVersion": API, "kind": "Client", "metadata": {"name": "sam", "namespace": NS,
                                                                "labels": {"spot": "yes"}}})


async def test_a_commit_slower_than_the_offer_timeout_never_names_the_lease_twice() -> None:
    async with world(decision_window=0.05, offer_timeout=0.1) as (_, api):
        lab(api, "e1", "e2")
        slow(api, "Exporter", "e1", 0.6, when=commits_lease)
        slow(api, "Exporter", "e2", 0.6, when=commits_lease)
        lease(api, "l1")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        await asyncio.sleep(scaled(0.8))  # every commit sent has landed (or failed) by now
        holders = [e for e in ("e1", "e2") if lease_ref(api.object("Exporter", NS, e)) == "l1"]
        assert holders == [exporter_ref(api.object("Lease", NS, "l1"))]
    assert_never_double_booked(api.writes)


async def test_a_lease_deleted_while_its_exporter_commits_leaves_the_exporter_free() -> None:
    async with world(decision_window=0.05, offer_timeout=0.1) as (_, api):
        lab(api, "e1")
        slow(api, "Exporter", "e1", 0.4, when=commits_lease)
        lease(api, "l1")
        await asyncio.sleep(0.25)  # the Accept is in, the commit is on its way, the offer timeout has passed
        await api.delete(_lease_kind(), NS, "l1")
        await until(lambda: any(lease_ref(w.object) == "l1" for w in api.writes if w.kind == "Exporter"))
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) is None)  # healed: the lease is gone
    assert_never_double_booked(api.writes)


async def test_an_exporter_killed_mid_commit_starts_from_that_commit_and_grants_once() -> None:
    async with world(decision_window=0.05, offer_timeout=0.1) as (system, api):
        lab(api, "e1", "e2")
        slow(api, "Exporter", "e1", 0.4, when=commits_lease)
        slow(api, "Exporter", "e2", 0.4, when=commits_lease)
        lease(api, "l1")
        await asyncio.sleep(0.2)  # inside the slow commit
        system.kill("exporter/lab/e1")
        system.kill("exporter/lab/e2")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        await asyncio.sleep(scaled(0.6))
        holders = [e for e in ("e1", "e2") if lease_ref(api.object("Exporter", NS, e)) == "l1"]
        assert holders == [exporter_ref(api.object("Lease", NS, "l1"))]
    assert_never_double_booked(api.writes)


async def test_a_lease_killed_while_its_accept_commits_settles_before_taking_another_offer() -> None:
    async with world(decision_window=0.05, offer_timeout=0.1) as (system, api):
        lab(api, "e1", "e2")
        slow(api, "Exporter", "e1", 0.4, when=commits_lease)
        slow(api, "Exporter", "e2", 0.4, when=commits_lease)
        lease(api, "l1")
        await asyncio.sleep(0.2)  # its Accept is being committed
        system.kill("lease/lab/l1")  # the new incarnation does not know it accepted anything
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        await asyncio.sleep(scaled(0.6))
        holders = [e for e in ("e1", "e2") if lease_ref(api.object("Exporter", NS, e)) == "l1"]
        assert holders == [exporter_ref(api.object("Lease", NS, "l1"))]
    assert_never_double_booked(api.writes)


async def test_a_spot_holder_slow_to_end_is_never_ready_beside_the_lease_that_evicts_it() -> None:
    async with world(decision_window=0.05, offer_timeout=0.1) as (_, api):
        lab(api, "e1")
        spot_client(api)
        lease(api, "spot", client="sam")
        await until(lambda: is_ready(api.object("Lease", NS, "spot")))
        slow(api, "Lease", "spot", 0.5)  # its end lands long after the offer timeout
        lease(api, "boss")
        await until(lambda: is_ready(api.object("Lease", NS, "boss")))
        assert api.object("Lease", NS, "spot")["status"]["ended"] is True
    assert_never_double_booked(api.writes)


async def test_a_spot_lease_evicted_before_its_ready_lands_is_never_ready_beside_the_lease_that_evicts_it() -> None:
    """The exporter committed the spot lease and told it Granted; its Ready write, slow on a starved leader,
    had not landed when a better lease evicted it. "Not Ready here" read as gone: the better lease was
    granted, then the spot lease's Ready landed (bench failover at 200m: Ready for two leases for 0.2 s)."""
    async with world(decision_window=0.05, offer_timeout=0.1) as (_, api):
        lab(api, "e1")
        spot_client(api)
        slow(api, "Lease", "spot", 0.5)  # each of its writes lands long after the offer timeout
        lease(api, "spot", client="sam")
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) == "spot")  # committed, Ready in flight
        lease(api, "boss")
        await until(lambda: is_ready(api.object("Lease", NS, "boss")))
        assert api.object("Lease", NS, "spot")["status"]["ended"] is True
    assert_never_double_booked(api.writes)


async def test_a_late_write_of_a_deposed_replica_does_not_tear_the_lease() -> None:
    """Replica A decided `Pending` and its write is late; meanwhile replica B granted the lease. A's write
    carries the version it decided from, so it fails, and A's actor adopts B's grant instead."""
    async with world(decision_window=0.05, offer_timeout=0.2, pending_grace=0.0) as (_, api):
        lab(api, "e1")
        exporter(api, "busy")
        api.objects[("Exporter", NS, "e1")]["status"]["exporterStatus"] = "Offline"  # nothing takeable: Pending
        slow(api, "Lease", "l1", 0.3, when=lambda patch: "conditions" in (patch.get("status") or {}))
        lease(api, "l1")
        await asyncio.sleep(0.1)  # A's Pending write is on its way
        # B (the new leader) grants: the exporter's commit, then the lease's Ready.
        await api.merge_patch(_exporter_kind(), NS, "busy", {"status": {"leaseRef": {"name": "l1"}}},
                              subresource="status")
        api.delay = lambda kind, name, patch: 0.0
        await api.merge_patch(_lease_kind(), NS, "l1", {"status": {
            "exporterRef": {"name": "busy"}, "ended": False,
            "conditions": [{"type": "Ready", "status": "True", "reason": "Ready", "message": "by B",
                            "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, subresource="status")
        granted_at = len(api.writes)
        await asyncio.sleep(scaled(0.5))
        assert is_ready(api.object("Lease", NS, "l1"))
        assert exporter_ref(api.object("Lease", NS, "l1")) == "busy"
    after = [w for w in api.writes[granted_at:] if w.kind == "Lease" and w.name == "l1"]
    assert all(is_ready(w.object) for w in after), after  # never torn back to Pending


async def test_an_exporter_naming_a_gone_lease_is_freed_at_its_next_observation() -> None:
    async with world(decision_window=0.05) as (_, api):
        lab(api, "e1")
        await asyncio.sleep(0.1)
        # a deposed replica's late commit for a lease that no longer exists
        await api.merge_patch(_exporter_kind(), NS, "e1", {"status": {"leaseRef": {"name": "ghost"}}},
                              subresource="status")
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) is None)
        lease(api, "l1")  # and it is leasable again
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))


async def test_an_exporter_naming_a_lease_that_holds_another_is_freed() -> None:
    async with world(decision_window=0.05) as (_, api):
        lab(api, "e1", "e2")
        lease(api, "l1")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        held = exporter_ref(api.object("Lease", NS, "l1"))
        other = "e2" if held == "e1" else "e1"
        await api.merge_patch(_exporter_kind(), NS, other, {"status": {"leaseRef": {"name": "l1"}}},
                              subresource="status")
        await until(lambda: lease_ref(api.object("Exporter", NS, other)) is None)
        assert lease_ref(api.object("Exporter", NS, held)) == "l1"
        assert is_ready(api.object("Lease", NS, "l1"))


async def test_an_ended_lease_gets_its_label_back() -> None:
    async with world(decision_window=0.05) as (_, api):
        lab(api, "e1")
        lease(api, "l1")
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        await api.merge_patch(_lease_kind(), NS, "l1", {"spec": {"release": True}})
        await until(lambda: _labels(api, "l1").get("lessor.dev/lease-ended") == "true")
        await api.merge_patch(_lease_kind(), NS, "l1", {"metadata": {"labels": {"lessor.dev/lease-ended": None}}})
        await until(lambda: _labels(api, "l1").get("lessor.dev/lease-ended") == "true")


def _labels(api: MemoryApi, name: str) -> dict[str, str]:
    return ((api.object("Lease", NS, name) or {}).get("metadata") or {}).get("labels") or {}


def _lease_kind() -> Any:
    from lessor.actors.api import LEASE
    return LEASE


def _exporter_kind() -> Any:
    from lessor.actors.api import EXPORTER
    return EXPORTER


async def test_a_release_that_lands_under_the_grants_own_write_still_ends_the_lease() -> None:
    """The user releases the lease while its grant (Ready) is on its way: the grant's write, refused for the
    version, is written again on the released lease, and its answer is newer than the release's watch event,
    which is then no news to the actor. The release still ends the lease and frees the exporter."""
    async with world(decision_window=0.05, offer_timeout=0.2) as (_, api):
        lab(api, "e1")
        slow(api, "Lease", "l1", 0.3, when=lambda patch: exporter_ref(patch.get("status") and patch) is not None)
        lease(api, "l1")
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) == "l1")  # committed; Ready on its way
        await api.merge_patch(_lease_kind(), NS, "l1", {"spec": {"release": True}})
        await until(lambda: ((api.object("Lease", NS, "l1") or {}).get("status") or {}).get("ended") is True)
        await until(lambda: lease_ref(api.object("Exporter", NS, "e1")) is None)
    assert_never_double_booked(api.writes)


async def test_a_lease_an_exporter_already_names_takes_that_exporter_and_no_other() -> None:
    """A deposed replica's commit whose grant it never wrote: the exporter names the lease, the lease names
    nobody. The new leader's lease hears the exporter out before it takes anyone's offer, even when a free
    exporter offers first (here: the naming exporter's actor is slow to start)."""
    async with world(decision_window=0.05, offer_timeout=0.2) as (_, api):
        lease(api, "l1")
        lab(api, "e1")
        api.seed({"apiVersion": API, "kind": "Exporter", "metadata": {"name": "e2", "namespace": NS,
                                                                      "labels": {"board": "rpi"}},
                  "spec": {}, "status": {**api.object("Exporter", NS, "e1")["status"], "leaseRef": {"name": "l1"}}})
        slow(api, "Exporter", "e2", 0.5, when=lambda patch: "conditions" in (patch.get("status") or {}))
        await until(lambda: is_ready(api.object("Lease", NS, "l1")))
        await asyncio.sleep(scaled(0.3))
        assert exporter_ref(api.object("Lease", NS, "l1")) == "e2"
        assert lease_ref(api.object("Exporter", NS, "e1")) is None
    assert_never_double_booked(api.writes)
