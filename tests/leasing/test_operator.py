"""Leasing against the real API server, with the operator's actors deciding."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, POLICY
from tests.polling import record
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"


def now(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def exporter(kube: Gateway, ns: str, name: str, *, online: bool = True, status: str = "Available",
                   enabled: bool = True, **labels: str) -> None:
    await kube.create(EXPORTER, ns, {"apiVersion": API, "kind": "Exporter",
                                     "metadata": {"name": name, "labels": labels}, "spec": {"enabled": enabled}})
    if online:
        await kube.patch_status(EXPORTER, ns, name, {"lastSeen": now(), "exporterStatus": status})


async def client(kube: Gateway, ns: str, name: str, **labels: str) -> None:
    await kube.create(CLIENT, ns, {"apiVersion": API, "kind": "Client", "metadata": {"name": name, "labels": labels}})


async def policy(kube: Gateway, ns: str, name: str, exporter_selector: Mapping[str, Any],
                 *rules: Mapping[str, Any]) -> None:
    await kube.create(POLICY, ns, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": name},
                                   "spec": {"exporterSelector": exporter_selector, "policies": list(rules)}})


def rule(priority: int, *, team: str, spot: bool = False, max_duration: str | None = None,
         description: str = "") -> dict[str, Any]:
    r: dict[str, Any] = {"priority": priority, "spotAccess": spot, "from": [{"clientSelector": {"matchLabels": {"team": team}}}],
                         "description": description or f"team {team} at {priority}"}
    if max_duration:
        r["maximumDuration"] = max_duration
    return r


async def lease(kube: Gateway, ns: str, name: str, client_name: str = "alice", *,
                selector: Mapping[str, str] | None = None, **spec: Any) -> None:
    body: dict[str, Any] = {"clientRef": {"name": client_name}, **spec}
    if selector is not None:
        body["selector"] = {"matchLabels": dict(selector)}
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": body})


def condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


async def until(kube: Gateway, ns: str, name: str, check: Callable[[Mapping[str, Any]], bool],
                timeout: float = 20, res: Any = LEASE) -> Mapping[str, Any]:
    deadline = time.monotonic() + scaled(timeout)
    obj: Mapping[str, Any] = {}
    while time.monotonic() < deadline:
        obj = await kube.get(res, ns, name)
        if check(obj):
            return obj
        await asyncio.sleep(0.1)
    raise AssertionError(f"{res.kind} {ns}/{name} never got there; last status: {obj.get('status')}")


def ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready") == ("True", "Ready")


def has(type_: str, reason: str, status: str = "True") -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: condition(obj, type_) == (status, reason)


def ready_on_exporter(obj: Mapping[str, Any]) -> tuple[str, bool]:
    """(lease, whether it is Ready and not ended)."""
    return obj["metadata"]["name"], ready(obj) and not (obj.get("status") or {}).get("ended")


def holder(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("status") or {}).get("leaseRef") or {}).get("name")


async def test_a_lease_gets_an_exporter_and_the_exporter_records_it(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "rpi"}, duration="1h")
    got = await until(kube, namespace, "l1", ready)
    assert got["status"]["exporterRef"]["name"] == "e1"
    assert got["status"]["priority"] == 0 and got["status"]["spotAccess"] is False
    assert holder(await kube.get(EXPORTER, namespace, "e1")) == "l1"
    online = await until(kube, namespace, "e1", lambda o: condition(o, "Online") is not None, res=EXPORTER)
    assert condition(online, "Online") == ("True", "Heartbeat")


async def test_empty_selector_without_exporter_ref_is_invalid(kube: Gateway, namespace: str) -> None:
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={})
    got = await until(kube, namespace, "l1", lambda o: has("Invalid", "InvalidSelector")(o)
                      and (o["metadata"].get("labels") or {}).get("lessor.dev/lease-ended") == "true")
    assert got["status"]["ended"] is True


async def test_inconsistent_times_are_invalid(kube: Gateway, namespace: str) -> None:
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"a": "b"}, duration="1h", beginTime=now(), endTime=now(600))
    await until(kube, namespace, "l1", has("Invalid", "InvalidDuration"))


async def test_release_frees_the_exporter_for_the_next_lease(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "first", selector={"board": "rpi"})
    await until(kube, namespace, "first", ready)
    await lease(kube, namespace, "second", selector={"board": "rpi"})
    await until(kube, namespace, "second", has("Pending", "NotAvailable"))
    await kube.merge_patch(LEASE, namespace, "first", {"spec": {"release": True}})
    await until(kube, namespace, "first", has("Ready", "Released", "False"))
    got = await until(kube, namespace, "second", ready)
    assert got["status"]["exporterRef"]["name"] == "e1"
    assert holder(await kube.get(EXPORTER, namespace, "e1")) == "second"


async def test_expiry_ends_the_lease_at_its_end(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "short", selector={"board": "rpi"}, duration="2s")
    await until(kube, namespace, "short", ready)
    got = await until(kube, namespace, "short", has("Ready", "Expired", "False"), timeout=15)
    assert got["status"]["ended"] is True
    await until(kube, namespace, "e1", lambda o: holder(o) is None, res=EXPORTER)


async def test_pinned_exporter_that_does_not_exist_is_not_found(kube: Gateway, namespace: str) -> None:
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", exporterRef={"name": "ghost"})
    got = await until(kube, namespace, "l1", has("Unsatisfiable", "ExporterNotFound"))
    assert "ghost" in next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Unsatisfiable")


async def test_pinned_exporter_not_matching_the_selector_is_a_mismatch(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "stm32"}, exporterRef={"name": "e1"})
    await until(kube, namespace, "l1", has("Unsatisfiable", "SelectorMismatch"))


async def test_disabled_exporters(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "off", enabled=False, board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "pinned", exporterRef={"name": "off"})
    await lease(kube, namespace, "selected", selector={"board": "rpi"})
    await lease(kube, namespace, "allowed", exporterRef={"name": "off"}, allowDisabled=True)
    await until(kube, namespace, "pinned", has("Unsatisfiable", "ExporterDisabled"))
    await until(kube, namespace, "selected", has("Unsatisfiable", "AllDisabled"))
    got = await until(kube, namespace, "allowed", ready)
    assert got["status"]["exporterRef"]["name"] == "off"


async def test_duration_beyond_every_limit_names_the_longest_allowed(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}},
                 rule(10, team="qa", max_duration="1h"), rule(5, team="qa", max_duration="2h"))
    await lease(kube, namespace, "long", selector={"board": "rpi"}, duration="3h")
    got = await until(kube, namespace, "long", has("Unsatisfiable", "DurationExceeded"))
    message = next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Unsatisfiable")
    assert "2h" in message


async def test_a_policy_created_after_a_waiting_lease_ends_it_when_too_short(kube: Gateway, namespace: str) -> None:
    """Objects reach lessor in any order (`lessor dev` applies policies then leases, but each kind has its own
    watch): a lease waiting under no policy is judged again when a policy appears that refuses its duration."""
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "short", selector={"board": "rpi"}, duration="1h")
    await until(kube, namespace, "short", ready)
    await lease(kube, namespace, "long", selector={"board": "rpi"}, duration="4h")
    await until(kube, namespace, "long", has("Ready", "NotAvailable", "False"))
    await policy(kube, namespace, "p", {"matchExpressions": [{"key": "board", "operator": "Exists"}]},
                 rule(20, team="qa", max_duration="2h"))
    got = await until(kube, namespace, "long", has("Unsatisfiable", "DurationExceeded"))
    assert "2h" in next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Unsatisfiable")
    assert ready(await kube.get(LEASE, namespace, "short"))


@pytest.fixture
def no_settle(monkeypatch: pytest.MonkeyPatch) -> None:
    """The settle time an hour long: a lease decided within the test was not waiting for it."""
    monkeypatch.setattr("lessor.actors.leasing.lease._SETTLE", dt.timedelta(hours=1))


@pytest.mark.usefixtures("no_settle")
async def test_a_lease_applied_just_after_its_policy_is_not_granted_under_open_access(
        kube: Gateway, namespace: str) -> None:
    """Found by `lessor dev`: its sample policy's watch event came after the lease's, and the lease, seeing no
    policy at all, was granted under open access what the policy forbids. The lease reads from the API server
    whether the namespace has a policy before it counts on there being none, instead of waiting a settle time."""
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}}, rule(20, team="qa", max_duration="2h"))
    await lease(kube, namespace, "long", selector={"board": "rpi"}, duration="4h")
    got = await until(kube, namespace, "long", has("Unsatisfiable", "DurationExceeded"))
    assert not ready(got)
    assert "exporterRef" not in (got.get("status") or {})


@pytest.mark.usefixtures("no_settle")
async def test_a_lease_in_a_namespace_without_policies_is_granted_under_open_access_without_a_settle_wait(
        kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "open", selector={"board": "rpi"}, duration="4h")
    got = await until(kube, namespace, "open", ready)
    assert got["status"]["exporterRef"]["name"] == "e1"


async def test_a_policy_created_after_a_lease_was_granted_under_open_access_applies_to_later_leases(
        kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await exporter(kube, namespace, "e2", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "first", selector={"board": "rpi"}, duration="4h")
    assert (await until(kube, namespace, "first", ready))["status"]["exporterRef"]["name"] in {"e1", "e2"}
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}}, rule(20, team="qa", max_duration="2h"))
    await lease(kube, namespace, "second", selector={"board": "rpi"}, duration="4h")
    await until(kube, namespace, "second", has("Unsatisfiable", "DurationExceeded"))
    assert ready(await kube.get(LEASE, namespace, "first"))


async def test_a_policy_without_limit_is_used_when_the_limited_one_is_too_short(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}},
                 rule(10, team="qa", max_duration="1h"), rule(5, team="qa"))
    await lease(kube, namespace, "long", selector={"board": "rpi"}, duration="3h")
    got = await until(kube, namespace, "long", ready)
    assert got["status"]["priority"] == 5


async def test_an_unbounded_lease_passes_no_maximum_duration(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}}, rule(10, team="qa", max_duration="1h"))
    await lease(kube, namespace, "forever", selector={"board": "rpi"})
    await until(kube, namespace, "forever", has("Unsatisfiable", "DurationExceeded"))


async def test_best_approval_wins_non_spot_before_spot(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await policy(kube, namespace, "spotty", {"matchLabels": {"board": "rpi"}}, rule(100, team="qa", spot=True))
    await policy(kube, namespace, "steady", {"matchLabels": {"board": "rpi"}}, rule(10, team="qa"))
    await lease(kube, namespace, "l1", selector={"board": "rpi"})
    got = await until(kube, namespace, "l1", ready)
    assert got["status"]["priority"] == 10 and got["status"]["spotAccess"] is False


async def test_no_approval_is_no_access_listing_the_policies(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "bob", team="dev")
    await policy(kube, namespace, "qa-only", {"matchLabels": {"board": "rpi"}},
                 rule(10, team="qa", description="QA rigs"))
    await lease(kube, namespace, "l1", "bob", selector={"board": "rpi"})
    got = await until(kube, namespace, "l1", has("Unsatisfiable", "NoAccess"))
    assert "QA rigs" in next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Unsatisfiable")


async def test_a_lease_for_a_missing_client_ends_saying_so_and_stays_ended(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await lease(kube, namespace, "early", "carol", selector={"board": "rpi"})
    got = await until(kube, namespace, "early", has("Unsatisfiable", "NoAccess"))
    message = next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Unsatisfiable")
    assert "there is no Client carol" in message and "this lease has ended" in message, message
    assert "create the Client carol, then a new lease" in message, message
    assert got["status"]["ended"] is True
    # As the message says: the Client appears, this lease stays ended, and a new one is granted.
    await client(kube, namespace, "carol")
    await lease(kube, namespace, "again", "carol", selector={"board": "rpi"})
    await until(kube, namespace, "again", ready)
    after = await kube.get(LEASE, namespace, "early")
    assert after["status"]["ended"] is True and condition(after, "Unsatisfiable") == ("True", "NoAccess")
    assert not (after["status"].get("exporterRef") or {}).get("name"), after["status"]


async def test_pending_reasons_offline_and_not_ready(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "dark", online=False, board="dark")
    await exporter(kube, namespace, "busy", status="BeforeLeaseHook", board="busy")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "to-dark", selector={"board": "dark"})
    await lease(kube, namespace, "to-busy", selector={"board": "busy"})
    await until(kube, namespace, "to-dark", has("Pending", "Offline"))
    await until(kube, namespace, "to-busy", has("Pending", "NotReady"))
    # The exporter comes online: the waiting lease gets it without being told again.
    await kube.patch_status(EXPORTER, namespace, "dark", {"lastSeen": now(), "exporterStatus": "Available"})
    await until(kube, namespace, "to-dark", ready)


async def test_choice_prefers_the_free_exporter_then_the_name(kube: Gateway, namespace: str) -> None:
    for name in ("e-c", "e-b", "e-a"):
        await exporter(kube, namespace, name, board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "first", selector={"board": "rpi"})
    assert (await until(kube, namespace, "first", ready))["status"]["exporterRef"]["name"] == "e-a"
    await lease(kube, namespace, "second", selector={"board": "rpi"})
    assert (await until(kube, namespace, "second", ready))["status"]["exporterRef"]["name"] == "e-b"


async def test_a_freed_exporter_goes_to_the_best_waiter(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "lo", team="lo")
    await client(kube, namespace, "hi", team="hi")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}}, rule(1, team="lo"), rule(50, team="hi"))
    await lease(kube, namespace, "holder", "lo", selector={"board": "rpi"})
    await until(kube, namespace, "holder", ready)
    await lease(kube, namespace, "lo-old", "lo", selector={"board": "rpi"})
    await asyncio.sleep(1.1)  # creation times are kept to the second
    await lease(kube, namespace, "hi-new", "hi", selector={"board": "rpi"})
    await lease(kube, namespace, "lo-new", "lo", selector={"board": "rpi"})
    for name in ("lo-old", "hi-new", "lo-new"):
        await until(kube, namespace, name, has("Pending", "NotAvailable"))
    await kube.merge_patch(LEASE, namespace, "holder", {"spec": {"release": True}})
    await until(kube, namespace, "hi-new", ready)
    await kube.merge_patch(LEASE, namespace, "hi-new", {"spec": {"release": True}})
    await until(kube, namespace, "lo-old", ready)
    assert condition(await kube.get(LEASE, namespace, "lo-new"), "Pending") == ("True", "NotAvailable")


async def test_leases_created_together_are_served_by_priority(kube: Gateway, namespace: str) -> None:
    exporters = [f"e{i}" for i in range(3)]
    for name in exporters:
        await exporter(kube, namespace, name, board="rpi")
    await client(kube, namespace, "lo", team="lo")
    await client(kube, namespace, "hi", team="hi")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}}, rule(1, team="lo"), rule(50, team="hi"))
    names = [f"lo-{i}" for i in range(6)] + [f"hi-{i}" for i in range(3)]
    await asyncio.gather(*(lease(kube, namespace, n, n.split("-")[0], selector={"board": "rpi"}) for n in names))
    await asyncio.sleep(scaled(3))
    leases, _ = await kube.list(LEASE, namespace)
    winners = {x["metadata"]["name"] for x in leases if ready(x)}
    holders = [holder(e) for e in (await kube.list(EXPORTER, namespace))[0]]
    assert sorted(h for h in holders if h) == sorted(winners), "every ready lease holds exactly one exporter"
    assert len(winners) == 3 and winners == {"hi-0", "hi-1", "hi-2"}


async def test_spot_only_lease_gets_a_free_exporter_and_is_evicted_by_a_steady_one(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "dev", team="dev")
    await client(kube, namespace, "qa", team="qa")
    await policy(kube, namespace, "p", {"matchLabels": {"board": "rpi"}},
                 rule(10, team="dev", spot=True), rule(5, team="qa"))
    await lease(kube, namespace, "spotty", "dev", selector={"board": "rpi"})
    got = await until(kube, namespace, "spotty", ready)
    assert got["status"]["spotAccess"] is True
    _, version = await kube.list(LEASE, namespace)
    history: list[tuple[str, bool]] = []  # every write to the leases from here on, in etcd's order
    watcher = asyncio.create_task(record(kube, LEASE, namespace, version, ready_on_exporter, history))
    await lease(kube, namespace, "steady", "qa", selector={"board": "rpi"})
    got = await until(kube, namespace, "steady", ready)
    assert got["status"]["exporterRef"]["name"] == "e1" and got["status"]["spotAccess"] is False
    evicted = await until(kube, namespace, "spotty", has("Ready", "Evicted", "False"))
    assert evicted["status"]["ended"] is True
    assert holder(await kube.get(EXPORTER, namespace, "e1")) == "steady"
    await asyncio.sleep(scaled(0.5))
    watcher.cancel()
    # At no moment were both Ready: the evicted lease's end was written before the winner's Ready.
    state: dict[str, bool] = {"spotty": True}
    for name, is_ready in history:
        state[name] = is_ready
        assert not (state.get("spotty") and state.get("steady")), f"both Ready at once: {history}"
    assert state == {"spotty": False, "steady": True}, history


async def test_scheduled_lease_holds_nothing_until_begin_and_skips_exporters_gone_offline(
    kube: Gateway, namespace: str
) -> None:
    await exporter(kube, namespace, "e-a", board="rpi")
    await exporter(kube, namespace, "e-b", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "later", selector={"board": "rpi"}, beginTime=now(4), duration="1h")
    await until(kube, namespace, "later", has("Pending", "Scheduled"))
    assert holder(await kube.get(EXPORTER, namespace, "e-a")) is None
    await kube.patch_status(EXPORTER, namespace, "e-a", {"exporterStatus": "Offline"})
    got = await until(kube, namespace, "later", ready, timeout=20)
    assert got["status"]["exporterRef"]["name"] == "e-b"


async def test_release_cancels_a_scheduled_lease(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "later", selector={"board": "rpi"}, beginTime=now(3600), duration="1h")
    await until(kube, namespace, "later", has("Pending", "Scheduled"))
    await kube.merge_patch(LEASE, namespace, "later", {"spec": {"release": True}})
    await until(kube, namespace, "later", has("Ready", "Released", "False"))


async def test_moving_the_end_moves_the_expiry(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "rpi"}, duration="1h")
    await until(kube, namespace, "l1", ready)
    await kube.merge_patch(LEASE, namespace, "l1", {"spec": {"duration": "3s"}})
    await until(kube, namespace, "l1", has("Ready", "Expired", "False"), timeout=20)


async def test_deleting_the_lease_frees_the_exporter(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "rpi"})
    await until(kube, namespace, "l1", ready)
    await kube.delete(LEASE, namespace, "l1")
    await until(kube, namespace, "e1", lambda o: holder(o) is None, res=EXPORTER)


async def test_deleting_the_exporter_ends_its_lease_as_evicted(kube: Gateway, namespace: str) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "rpi"})
    await until(kube, namespace, "l1", ready)
    await kube.delete(EXPORTER, namespace, "e1")
    got = await until(kube, namespace, "l1", has("Ready", "Evicted", "False"))
    assert "deleted" in next(c["message"] for c in got["status"]["conditions"] if c["type"] == "Ready")


async def test_an_ended_lease_stays_ended_and_has_no_actor(kube: Gateway, namespace: str, operator: Any) -> None:
    await exporter(kube, namespace, "e1", board="rpi")
    await client(kube, namespace, "alice", team="qa")
    await lease(kube, namespace, "l1", selector={"board": "rpi"})
    await until(kube, namespace, "l1", ready)
    await kube.merge_patch(LEASE, namespace, "l1", {"spec": {"release": True}})
    await until(kube, namespace, "l1", has("Ready", "Released", "False"))
    await kube.merge_patch(LEASE, namespace, "l1", {"spec": {"release": False, "duration": "5h"}})
    await asyncio.sleep(scaled(1))
    got = await kube.get(LEASE, namespace, "l1")
    assert got["status"]["ended"] is True and condition(got, "Ready") == ("False", "Released")
    assert f"lease/{namespace}/l1" not in operator.system.live("lease")
