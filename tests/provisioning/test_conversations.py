"""The pool, handle and claim conversations (WantHandle, HandleBound, NoHandle) between the real actors, over
an in-memory API (tests/memory_api.py): fast, and able to see every write."""

from __future__ import annotations

import asyncio
from typing import Any

from lessor.actors.api import CLAIM, Kind
from lessor.topology.actor import Event, TopologyActor
from tests.memory_api import OPS, MemoryApi, world
from tests.slowness import scaled

API = "lessor.dev/v1alpha1"
NS = "team"
CONFIG_MAP = Kind("v1", "ConfigMap")
ENTRIES = [{"provider": {"name": "cm"}, "template": {"data": {"a": "b"}}}]


def provider_and_pool(api: MemoryApi, available: int) -> None:
    api.seed({"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": "cm", "namespace": OPS},
              "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": NS}}}})
    api.seed({"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": "p", "namespace": OPS},
              "spec": {"minAvailable": available, "resources": ENTRIES}})


def claim(api: MemoryApi, name: str) -> None:
    api.seed({"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name, "namespace": NS},
              "spec": {"resources": ENTRIES}})


def handles(api: MemoryApi) -> list[dict[str, Any]]:
    return [obj for (kind, _, _), obj in api.objects.items() if kind == "ResourceHandle"]


def bound_to(handle: dict[str, Any]) -> str | None:
    return ((handle.get("spec") or {}).get("resourceClaim") or {}).get("name")


def claim_handle(api: MemoryApi, name: str) -> str | None:
    return (((api.object("ResourceClaim", NS, name) or {}).get("status") or {}).get("resourceHandle") or {}).get("name")


async def until(check: Any, timeout: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + scaled(timeout)
    while not check():
        assert asyncio.get_running_loop().time() < deadline, "never got there"
        await asyncio.sleep(0.01)


async def test_a_pool_fills_and_a_claim_binds_one_of_its_handles() -> None:
    async with world() as (_, api):
        provider_and_pool(api, 2)
        await until(lambda: len(handles(api)) == 2)
        pooled = {h["metadata"]["name"] for h in handles(api)}
        claim(api, "c1")
        await until(lambda: claim_handle(api, "c1") is not None)
        assert claim_handle(api, "c1") in pooled
        await until(lambda: len(handles(api)) == 3)  # the pool replaces what it gave away
    assert sorted(bound_to(h) or "" for h in handles(api)) == ["", "", "c1"]


async def test_two_claims_racing_for_one_handle_each_get_their_own() -> None:
    async with world() as (_, api):
        provider_and_pool(api, 1)
        await until(lambda: len(handles(api)) == 1)
        claim(api, "c1")
        claim(api, "c2")
        await until(lambda: claim_handle(api, "c1") is not None and claim_handle(api, "c2") is not None)
        await asyncio.sleep(0.2)
    assert claim_handle(api, "c1") != claim_handle(api, "c2")
    bound = [bound_to(h) for h in handles(api) if bound_to(h)]
    assert sorted(bound) == ["c1", "c2"]  # no handle bound twice, no claim with two handles
    binds = [w for w in api.writes if w.kind == "ResourceHandle" and bound_to(w.object or {})]
    assert len({(w.name, bound_to(w.object or {})) for w in binds}) == 2


async def test_a_deleted_claim_takes_its_handle_and_the_pool_refills() -> None:
    async with world() as (_, api):
        provider_and_pool(api, 1)
        await until(lambda: len(handles(api)) == 1)
        claim(api, "c1")
        await until(lambda: claim_handle(api, "c1") is not None)
        taken = claim_handle(api, "c1")
        await api.delete(CLAIM, NS, "c1")  # as kubectl delete would
        await until(lambda: api.object("ResourceHandle", OPS, taken) is None)
        await until(lambda: len(handles(api)) == 1 and not bound_to(handles(api)[0]))


def claim_status_writes(api: MemoryApi, name: str) -> list[dict[str, Any]]:
    return [w.object["status"] for w in api.writes
            if w.kind == "ResourceClaim" and w.name == name and w.verb == "patch status" and w.object]


def condition(status: dict[str, Any], kind: str) -> str | None:
    return next((c["status"] for c in status.get("conditions") or () if c["type"] == kind), None)


async def test_a_claim_writes_its_status_once_on_the_way_to_ready_with_its_own_handle_or_a_pools() -> None:
    async with world() as (_, api):
        provider_and_pool(api, 1)
        await until(lambda: len(handles(api)) == 1 and (handles(api)[0].get("status") or {}).get("ready"))
        claim(api, "pooled")
        await until(lambda: claim_handle(api, "pooled") is not None)
        claim(api, "own")  # the pool's handle is taken, and its replacement is not ready yet: a handle of its own
        await until(lambda: all(any(condition(s, "Ready") == "True" for s in claim_status_writes(api, name))
                                for name in ("pooled", "own")))
        await asyncio.sleep(0.2)
    for name in ("pooled", "own"):
        writes = claim_status_writes(api, name)
        assert len(writes) == 1, writes
        assert condition(writes[0], "Bound") == "True" and writes[0]["resources"][0]["state"]


async def test_a_handle_that_never_reports_holds_its_claims_status_no_longer_than_the_settle_time(
        monkeypatch: Any) -> None:
    from lessor.actors.provisioning import claim as claim_module
    from lessor.actors.provisioning.handle import HandleActor

    async def silent(*_: Any) -> None:
        return None

    monkeypatch.setattr(claim_module, "_SETTLE", 0.3)
    monkeypatch.setattr(HandleActor, "_write_status", silent)
    async with world() as (_, api):
        provider_and_pool(api, 0)
        claim(api, "c1")
        await until(lambda: claim_status_writes(api, "c1"))
    status = claim_status_writes(api, "c1")[0]
    assert condition(status, "Bound") == "True" and condition(status, "Ready") == "False"


async def test_a_pool_handle_gets_its_references_in_the_patch_that_binds_it() -> None:
    async with world() as (_, api):
        provider_and_pool(api, 1)
        await until(lambda: len(handles(api)) == 1 and (handles(api)[0].get("status") or {}).get("ready"))
        pooled = handles(api)[0]["metadata"]["name"]
        reported = handles(api)[0]["status"]["resources"][0]["reference"]
        assert "reference" not in handles(api)[0]["spec"]["resources"][0]  # in its status only, while it waits
        claim(api, "c1")
        await until(lambda: any(condition(s, "Ready") == "True" for s in claim_status_writes(api, "c1")))
        await asyncio.sleep(0.2)
    spec_writes = [w.object for w in api.writes if w.kind == "ResourceHandle" and w.name == pooled
                   and w.verb == "patch" and w.object]
    assert len(spec_writes) == 1  # the binding, with the reference: no write of its own for it
    assert bound_to(spec_writes[0]) == "c1" and spec_writes[0]["spec"]["resources"][0]["reference"] == reported
    assert [name for (kind, _, name) in api.objects if kind == "ConfigMap"].count(reported["name"]) == 1
    assert claim_status_writes(api, "c1")[-1]["resources"][0]["reference"] == reported


async def test_a_pool_that_asks_for_a_huge_minimum_grows_in_paced_steps_and_still_serves_its_claims() -> None:
    """A fuzzed `minAvailable: 2147483647` once made the pool build every create at once (the operator ran out
    of memory). Now each step creates at most CREATE_STEP, the next comes STEP_PAUSE later, and a claim is
    answered between two steps, long before the pool is full (before, it waited for all of them)."""
    from lessor.actors.provisioning.pool import CREATE_STEP, STEP_PAUSE

    huge = 100_000
    loop = asyncio.get_running_loop()
    async with world() as (_, api):
        started = loop.time()
        provider_and_pool(api, huge)
        await until(lambda: len(handles(api)) >= 3 * CREATE_STEP)  # it keeps going, step after step
        assert loop.time() - started >= 2 * STEP_PAUSE  # paced: three steps take two pauses at least
        claim(api, "c1")
        await until(lambda: claim_handle(api, "c1") is not None)
        assert len(handles(api)) < huge / 2


def configmaps(api: MemoryApi) -> list[dict[str, Any]]:
    return [obj for (kind, _, _), obj in api.objects.items() if kind == "ConfigMap"]


async def test_a_claim_change_answered_by_the_claims_own_status_write_still_reaches_its_resource() -> None:
    """The claim's actor writes the claim's status (its resource changed) and, before that write lands, the
    user changes the claim's template: the status write answers with the changed claim, so the watch event of
    the change is no news to the actor. It brings the handle, and so the resource, in step all the same."""
    async with world() as (_, api):
        api.seed({"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": "cm", "namespace": OPS},
                  "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": NS}},
                           "updateFilters": [{"pathMatch": "/data/c", "allowedOps": ["add", "remove"]}]}})
        claim(api, "c1")
        await until(lambda: any(condition(s, "Ready") == "True" for s in claim_status_writes(api, "c1")))
        await asyncio.sleep(0.1)
        name = configmaps(api)[0]["metadata"]["name"]
        changes: list[asyncio.Task[Any]] = []

        def template_changes_under_the_status_write(kind: str, _: str, patch: dict[str, Any]) -> float:
            if kind != "ResourceClaim" or "status" not in patch or changes:
                return 0.0
            changes.append(asyncio.get_running_loop().create_task(api.merge_patch(CLAIM, NS, "c1", {"spec": {
                "resources": [{"provider": {"name": "cm"}, "template": {"data": {"a": "b", "c": "d"}}}]}})))
            return 0.1  # the user's change lands while the status write is on its way

        api.delay = template_changes_under_the_status_write
        await api.merge_patch(CONFIG_MAP, NS, name, {"metadata": {"labels": {"someone": "else"}}})
        await until(lambda: bool(changes) and changes[0].done())
        await until(lambda: (api.object("ConfigMap", NS, name) or {}).get("data") == {"a": "b", "c": "d"})



class LaggingHandles(TopologyActor):
    """A topology that sees the events of the handles in `held` only on `release`, in order: in the operator
    the handles' watch is a stream of its own, which may lag behind the claims' and the created resources'."""

    held: set[str] = set()
    waiting: list[Event] = []

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Event) and message.object.get("kind") == "ResourceHandle" \
                and message.object["metadata"]["name"] in LaggingHandles.held:
            LaggingHandles.waiting.append(message)
            return None
        return await super().receive(message)


async def test_a_handle_bound_to_a_claim_the_topology_saw_deleted_first_ends() -> None:
    """Handle H learns of its binding before the topology does, and the claim is deleted in between. The pool's
    binding of H to c1 lands, but its answer is slow; H's actor learns of the binding from the answer to its
    own status write (its resource changed), and reads c1 from the API while c1 still exists; then c1 is
    deleted. The topology sees the deletion before H's binding (the handles' watch lags), and c1's actor before
    the pool's answer: neither the deletion's route, nor c1's actor (`ClaimHandles`; nor its next incarnation,
    which the pool's answer starts) can name H. H kept rendering for the claim it had read, bound to a claim that was gone, for good: the symptom of
    the SIGKILL chaos test's one failure (seed 973296085: "handle guid-... is bound to claim c10, which is
    gone"), whose logs were not kept."""
    LaggingHandles.held, LaggingHandles.waiting = set(), []
    async with world(topology=LaggingHandles) as (system, api):
        provider_and_pool(api, 1)
        await until(lambda: len(handles(api)) == 1 and (handles(api)[0].get("status") or {}).get("ready"))
        taken, resource = handles(api)[0]["metadata"]["name"], configmaps(api)[0]["metadata"]["name"]
        LaggingHandles.held.add(taken)

        def binding(kind: str, name: str, patch: dict[str, Any]) -> bool:
            return kind == "ResourceHandle" and name == taken and "resourceClaim" in (patch.get("spec") or {})

        answered = asyncio.Event()

        async def pool_answered_late(kind: str, name: str, patch: dict[str, Any]) -> None:
            if binding(kind, name, patch):
                await answered.wait()

        api.before_answer = pool_answered_late
        claim(api, "c1")
        await until(lambda: bound_to(api.object("ResourceHandle", OPS, taken) or {}) == "c1")

        def status_writes() -> int:
            return sum(1 for w in api.writes if w.kind == "ResourceHandle" and w.name == taken
                       and w.verb == "patch status")

        for edit in ("one", "two"):  # the first status write tells H it is bound; the next change reads c1
            before = status_writes()
            await api.merge_patch(CONFIG_MAP, NS, resource, {"metadata": {"labels": {"edited": edit}}})
            await until(lambda before=before: status_writes() > before)
        await api.delete(CLAIM, NS, "c1")
        await until(lambda: f"claim/{NS}/c1" not in system.live("claim"))  # told no handle, and stopped
        answered.set()  # the pool's answer starts c1's actor afresh: gone, it asks for its handles, finds none
        await until(lambda: system.busy() == 0)  # (the pool's step counted as work until then)
        LaggingHandles.held.clear()
        for event in LaggingHandles.waiting:
            system.tell("topology", event)
        await until(lambda: api.object("ResourceHandle", OPS, taken) is None)
        assert api.object("ConfigMap", NS, resource) is None
        await until(lambda: len(handles(api)) == 1 and not bound_to(handles(api)[0]))
