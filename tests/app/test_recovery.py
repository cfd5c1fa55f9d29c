"""Changed while lessor was down: each case, against the real API server.

Every test runs `lessor run` as its own process, brings something to a
settled state, SIGKILLs the operator, changes the cluster as a user (or a
dying operator) could while none runs, starts a new operator and waits for
what the user would see. The control plane is this module's own, so no other
operator acts on it meanwhile. See "Changed while lessor was down" in
docs/architecture.md for the list of cases and where each is handled.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any, TypeVar

import pytest

from lessor.tools.controlplane import ControlPlane
from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import (
    CLAIM,
    CLIENT,
    CONFIGMAP,
    EXPORTER,
    HANDLE,
    LEASE,
    NAMESPACE,
    POOL,
    PROVIDER,
)
from lessor.model.handles import templates_record
from lessor.model.labels import CLAIM_TEMPLATES
from tests.clusters import own_cluster
from tests.polling import get, record
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
WAIT = 60.0  # bounded: a restarted operator lists, syncs and acts well within this
T = TypeVar("T")


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[ControlPlane, Gateway]]:
    """A control plane of this module's own: only the operator under test acts on it."""
    async with own_cluster(tmp_path_factory.mktemp("recovery")) as (cp, kube):
        yield cp, kube


@pytest.fixture
def kube(cluster: tuple[ControlPlane, Gateway]) -> Gateway:
    return cluster[1]


@pytest.fixture
def lessor(cluster: tuple[ControlPlane, Gateway], operator_process: Callable[[ControlPlane], Any]) -> Any:
    """The operator under test, started."""
    process = operator_process(cluster[0])
    process.start()
    return process


@pytest.fixture
async def ns(kube: Gateway) -> str:
    name = f"r-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    return name


@pytest.fixture
def suffix() -> str:
    return uuid.uuid4().hex[:6]


# --- helpers ---------------------------------------------------------------------------------------


async def until(probe: Callable[[], Awaitable[T | None]], what: str, timeout: float = WAIT) -> T:
    """Poll `probe` until it returns something truthy; fail naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + scaled(timeout)
    last: T | None = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.2)
    pytest.fail(f"{what}: not within {scaled(timeout):.0f}s (last seen: {last!r})")


def condition(obj: Mapping[str, Any] | None, type_: str) -> tuple[str, str] | None:
    for c in ((obj or {}).get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


def ready(obj: Mapping[str, Any] | None) -> bool:
    return condition(obj, "Ready") == ("True", "Ready")


def lease_ref(exporter: Mapping[str, Any] | None) -> str | None:
    return (((exporter or {}).get("status") or {}).get("leaseRef") or {}).get("name")


async def object_when(kube: Gateway, res: Resource, ns: str, name: str,
                      check: Callable[[Mapping[str, Any] | None], bool], what: str) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        obj = await get(kube, res, ns, name)
        return obj if obj is not None and check(obj) else None

    return await until(probe, what)


async def absent(kube: Gateway, res: Resource, ns: str, name: str) -> None:
    async def probe() -> bool:
        return await get(kube, res, ns, name) is None

    await until(probe, f"{res.kind} {ns}/{name} deleted")


# --- leasing ---------------------------------------------------------------------------------------


async def lab(kube: Gateway, ns: str, *exporters: str) -> None:
    """Exporters labelled with their own name, beating; one client, no policy (open access)."""
    for name in exporters:
        await kube.create(EXPORTER, ns, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": name, "labels": {"board": name}}})
    await heartbeat(kube, ns, *exporters)
    await kube.create(CLIENT, ns, {"apiVersion": API, "kind": "Client", "metadata": {"name": "qa"}})


async def heartbeat(kube: Gateway, ns: str, *exporters: str) -> None:
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    for name in exporters:
        await kube.patch_status(EXPORTER, ns, name, {"lastSeen": now, "exporterStatus": "Available"})


async def lease(kube: Gateway, ns: str, name: str, exporter: str, **spec: Any) -> None:
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "qa"}, "selector": {"matchLabels": {"board": exporter}}, **spec}})


async def leased(kube: Gateway, ns: str, lease_name: str, exporter: str) -> None:
    """Wait until `lease_name` is Ready on `exporter` and the exporter names it."""
    await object_when(kube, LEASE, ns, lease_name, ready, f"lease {lease_name} Ready")
    await object_when(kube, EXPORTER, ns, exporter, lambda e: lease_ref(e) == lease_name,
                      f"exporter {exporter} held for {lease_name}")


async def handed_over(kube: Gateway, ns: str, lessor: Any, change: Callable[[], Awaitable[Any]],
                      **first: Any) -> dict[str, Any] | None:
    """Lease `first` (with spec `first`) Ready on exporter e; lessor killed; `change()`; lease `second`
    wanting e; lessor started: wait until `second` is Ready on e. Returns `first` as it is then (None: gone)."""
    await lab(kube, ns, "e")
    await lease(kube, ns, "first", "e", **first)
    await leased(kube, ns, "first", "e")
    lessor.kill()
    await change()
    await lease(kube, ns, "second", "e")
    await heartbeat(kube, ns, "e")
    lessor.start()
    await leased(kube, ns, "second", "e")
    return await get(kube, LEASE, ns, "first")


async def test_lease_deleted_while_down_frees_its_exporter_for_the_next(kube: Gateway, ns: str, lessor: Any) -> None:
    """The issue's repro: `second` gets e, although e's leaseRef still named `first` at the restart."""
    assert await handed_over(kube, ns, lessor, lambda: kube.delete(LEASE, ns, "first")) is None


async def test_lease_ended_while_down_frees_its_exporter(kube: Gateway, ns: str, lessor: Any) -> None:
    """A lease whose end was written but whose exporter was not yet freed when lessor died (what the
    SIGKILL chaos test found): the ended lease is never announced again, yet its exporter goes free."""
    async def end_first_as_a_dying_lessor_would() -> None:
        first = await kube.get(LEASE, ns, "first")
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        conditions = [c for c in first["status"]["conditions"] if c["type"] != "Ready"]
        conditions.append({"type": "Ready", "status": "False", "reason": "Released",
                           "message": "spec.release is true", "lastTransitionTime": now})
        await kube.merge_patch(LEASE, ns, "first", {"spec": {"release": True}})
        await kube.patch_status(LEASE, ns, "first", {"ended": True, "endTime": now, "conditions": conditions})
        await kube.merge_patch(LEASE, ns, "first", {"metadata": {"labels": {"lessor.dev/lease-ended": "true"}}})

    await handed_over(kube, ns, lessor, end_first_as_a_dying_lessor_would)


async def test_lease_released_while_down_ends_and_frees_its_exporter(kube: Gateway, ns: str, lessor: Any) -> None:
    first = await handed_over(kube, ns, lessor,
                              lambda: kube.merge_patch(LEASE, ns, "first", {"spec": {"release": True}}))
    assert first is not None and first["status"]["ended"] is True
    assert condition(first, "Ready") == ("False", "Released")


async def test_lease_expired_while_down_ends_and_frees_its_exporter(kube: Gateway, ns: str, lessor: Any) -> None:
    async def wait_past_its_end() -> None:
        first = await kube.get(LEASE, ns, "first")
        end = dt.datetime.fromisoformat(first["status"]["endTime"].replace("Z", "+00:00"))
        await asyncio.sleep(max(0.0, (end - dt.datetime.now(dt.UTC)).total_seconds()) + 1)

    first = await handed_over(kube, ns, lessor, wait_past_its_end, duration="4s")
    assert first is not None and first["status"]["ended"] is True
    assert condition(first, "Ready") == ("False", "Expired")


async def test_eviction_cut_short_by_the_stop_ends_the_loser_before_the_winner_is_ready(
        kube: Gateway, ns: str, lessor: Any) -> None:
    """lessor died between an eviction's commit (e's leaseRef names `second`) and the loser's end: the
    restarted exporter ends `first` before it grants `second`, so no moment shows both Ready."""
    await lab(kube, ns, "e")
    await lease(kube, ns, "first", "e")
    await leased(kube, ns, "first", "e")
    lessor.kill()
    await lease(kube, ns, "second", "e")
    await kube.patch_status(EXPORTER, ns, "e", {"leaseRef": {"name": "second"}})  # the commit, and no more
    await heartbeat(kube, ns, "e")
    _, version = await kube.list(LEASE, ns)
    history: list[tuple[str, bool]] = []
    watcher = asyncio.create_task(record(kube, LEASE, ns, version, lambda o: (
        o["metadata"]["name"], ready(o) and not (o.get("status") or {}).get("ended")), history))
    lessor.start()
    await leased(kube, ns, "second", "e")
    first = await object_when(kube, LEASE, ns, "first", lambda o: bool((o or {}).get("status", {}).get("ended")),
                              "lease first ended")
    await asyncio.sleep(scaled(0.5))
    watcher.cancel()
    assert condition(first, "Ready") == ("False", "Evicted")
    state = {"first": True}
    for name, is_ready in history:
        state[name] = is_ready
        assert not (state.get("first") and state.get("second")), f"both Ready at once: {history}"


async def test_exporter_deleted_while_leased_ends_the_lease(kube: Gateway, ns: str, lessor: Any) -> None:
    await lab(kube, ns, "e")
    await lease(kube, ns, "first", "e")
    await leased(kube, ns, "first", "e")
    lessor.kill()
    await kube.delete(EXPORTER, ns, "e")
    lessor.start()
    first = await object_when(kube, LEASE, ns, "first", lambda x: (x.get("status") or {}).get("ended") is True,
                              "lease first ended")
    assert condition(first, "Ready") == ("False", "Evicted")


# --- pools, handles, claims ------------------------------------------------------------------------


async def provider(kube: Gateway, name: str, **spec: Any) -> None:
    """A provider of ConfigMaps in the operator's namespace."""
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": name},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": OPS}}, **spec}})


async def pool(kube: Gateway, name: str, provider_name: str, template: Mapping[str, Any], minimum: int) -> None:
    await kube.create(POOL, OPS, {"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": name},
                                  "spec": {"minAvailable": minimum, "resources": [
                                      {"provider": {"name": provider_name}, "template": dict(template)}]}})


async def claim(kube: Gateway, ns: str, name: str, provider_name: str, template: Mapping[str, Any]) -> None:
    await kube.create(CLAIM, ns, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                  "spec": {"resources": [{"provider": {"name": provider_name},
                                                          "template": dict(template)}]}})


async def handles_of_pool(kube: Gateway, pool_name: str) -> list[dict[str, Any]]:
    return [h for h in (await kube.list(HANDLE, OPS))[0]
            if (h["spec"].get("resourcePool") or {}).get("name") == pool_name]


async def configmaps_of(kube: Gateway, provider_name: str) -> dict[str, dict[str, Any]]:
    """The ConfigMaps lessor made from `provider_name`, by name."""
    selector = f"lessor.dev/resource-provider-name={provider_name}"
    return {cm["metadata"]["name"]: cm for cm in (await kube.list(CONFIGMAP, OPS, label_selector=selector))[0]}


def owner(cm: Mapping[str, Any]) -> str | None:
    return (cm["metadata"].get("labels") or {}).get("lessor.dev/resource-handle-name")


async def bound_claim(kube: Gateway, ns: str, name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Wait until the claim is Ready; its handle and its ConfigMap (as the claim reports them)."""
    got = await object_when(kube, CLAIM, ns, name, ready, f"claim {name} Ready")
    reference = got["status"]["resources"][0]["reference"]
    return await kube.get(HANDLE, OPS, got["status"]["resourceHandle"]["name"]), \
        await kube.get(CONFIGMAP, OPS, reference["name"])


async def claimed(kube: Gateway, ns: str, name: str, template: Mapping[str, Any],
                  **provider_spec: Any) -> tuple[dict[str, Any], dict[str, Any]]:
    """Provider `name` (with `provider_spec`) and claim `c` of `ns` on it with `template`; once the claim is
    Ready, its handle and ConfigMap."""
    await provider(kube, name, **provider_spec)
    await claim(kube, ns, "c", name, template)
    return await bound_claim(kube, ns, "c")


async def pool_settled(kube: Gateway, pool_name: str, provider_name: str, unbound: int) -> list[dict[str, Any]]:
    """Wait until the pool has `unbound` unbound handles, each with its ConfigMap; returns them."""
    async def probe() -> list[dict[str, Any]] | None:
        free = [h for h in await handles_of_pool(kube, pool_name) if not h["spec"].get("resourceClaim")]
        made = {owner(cm) for cm in (await configmaps_of(kube, provider_name)).values()}
        return free if len(free) == unbound and all(h["metadata"]["name"] in made for h in free) else None

    return await until(probe, f"pool {pool_name} with {unbound} unbound handles and their ConfigMaps")


async def test_pool_deleted_while_down_takes_its_unbound_handles_and_their_configmaps(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"gone-{suffix}"
    await provider(kube, name, matchIgnore=["/data/owner"])
    await pool(kube, name, name, {"data": {"size": "small"}}, 2)
    await claim(kube, ns, "kept", name, {"data": {"size": "small", "owner": "kept"}})
    bound, bound_cm = await bound_claim(kube, ns, "kept")
    unbound = await pool_settled(kube, name, name, 2)
    lessor.kill()
    await kube.delete(POOL, OPS, name)
    lessor.start()
    for handle in unbound:
        await absent(kube, HANDLE, OPS, handle["metadata"]["name"])

    async def only_the_bound_configmap_is_left() -> bool:
        return set(await configmaps_of(kube, name)) == {bound_cm["metadata"]["name"]}

    await until(only_the_bound_configmap_is_left, "the unbound handles' ConfigMaps deleted")
    # what was bound stays: a pool's deletion never takes a claim's handle
    assert ready(await kube.get(CLAIM, ns, "kept"))
    assert await get(kube, HANDLE, OPS, bound["metadata"]["name"]) is not None


async def test_handle_deleted_while_down_takes_its_configmap_and_nothing_else(
        kube: Gateway, suffix: str, lessor: Any) -> None:
    name = f"lost-{suffix}"
    await provider(kube, name)
    await pool(kube, name, name, {"data": {"size": "small"}}, 1)
    [handle] = await pool_settled(kube, name, name, 1)
    [made] = (await configmaps_of(kube, name)).values()
    # Not lessor's: no handle label, though named like the handle's resources and marked with its provider.
    stranger = f"guid1-{handle['metadata']['name'].removeprefix('guid-')}"
    await kube.create(CONFIGMAP, OPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": stranger, "labels": {"lessor.dev/resource-provider-name": name}}, "data": {"mine": "yes"}})
    lessor.kill()
    await kube.delete(HANDLE, OPS, handle["metadata"]["name"])
    lessor.start()
    await absent(kube, CONFIGMAP, OPS, made["metadata"]["name"])
    [replacement] = await pool_settled(kube, name, name, 1)  # the pool makes up for it
    assert replacement["metadata"]["name"] != handle["metadata"]["name"]
    assert (await kube.get(CONFIGMAP, OPS, stranger))["data"] == {"mine": "yes"}
    await kube.delete(POOL, OPS, name)


async def test_bound_handle_deleted_while_down_is_replaced_and_its_configmap_goes(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"rebind-{suffix}"
    handle, cm = await claimed(kube, ns, name, {"data": {"size": "small"}})
    lessor.kill()
    await kube.delete(HANDLE, OPS, handle["metadata"]["name"])
    lessor.start()
    await absent(kube, CONFIGMAP, OPS, cm["metadata"]["name"])

    async def rebound() -> bool:
        got = await get(kube, CLAIM, ns, "c")
        return ready(got) and got["status"]["resourceHandle"]["name"] != handle["metadata"]["name"]

    await until(rebound, "claim c Ready on a new handle")
    new_handle, new_cm = await bound_claim(kube, ns, "c")
    assert new_cm["data"] == {"size": "small"} and owner(new_cm) == new_handle["metadata"]["name"]


async def test_claim_deleted_while_down_takes_its_handle_and_configmap(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"bye-{suffix}"
    handle, cm = await claimed(kube, ns, name, {"data": {"size": "small"}})
    lessor.kill()
    await kube.delete(CLAIM, ns, "c")
    lessor.start()
    await absent(kube, CONFIGMAP, OPS, cm["metadata"]["name"])
    await absent(kube, HANDLE, OPS, handle["metadata"]["name"])


async def test_claim_template_changed_while_down_reaches_its_own_handle(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"own-{suffix}"
    _, cm = await claimed(kube, ns, name, {"data": {"size": "small", "color": "red"}},
                          updateFilters=[{"pathMatch": "/data/.*"}])
    assert cm["data"] == {"size": "small", "color": "red"}
    lessor.kill()
    await kube.merge_patch(CLAIM, ns, "c", {"spec": {"resources": [
        {"provider": {"name": name}, "template": {"data": {"size": "large"}}}]}})
    lessor.start()
    await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"], lambda x: x.get("data") == {"size": "large"},
                      "the ConfigMap with size replaced and color removed")


async def test_claim_template_removal_while_down_reaches_a_pool_handle(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    """A pool's handle has what the pool provisioned besides what the claim asked for: after a restart
    only the claim's own previous template (recorded on the handle) tells a removal from the pool's part."""
    name = f"pooled-{suffix}"
    await provider(kube, name, matchIgnore=["/data/owner", "/data/note"], updateFilters=[{"pathMatch": "/data/.*"}])
    await pool(kube, name, name, {"data": {"size": "small"}}, 1)
    await pool_settled(kube, name, name, 1)
    await claim(kube, ns, "c", name, {"data": {"size": "small", "owner": "alice", "note": "hi"}})
    handle, cm = await bound_claim(kube, ns, "c")
    assert (handle["spec"].get("resourcePool") or {}).get("name") == name, "bound from the pool"
    await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"],
                      lambda x: x.get("data") == {"size": "small", "owner": "alice", "note": "hi"},
                      "the ConfigMap with the claim's values")
    lessor.kill()
    await kube.merge_patch(CLAIM, ns, "c", {"spec": {"resources": [
        {"provider": {"name": name}, "template": {"data": {"size": "small", "owner": "bob"}}}]}})
    lessor.start()
    await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"],
                      lambda x: x.get("data") == {"size": "small", "owner": "bob"},
                      "the ConfigMap with owner replaced and note removed")
    await kube.delete(POOL, OPS, name)


async def test_a_removal_written_into_the_handle_just_before_the_kill_reaches_the_resource(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    """The claim's actor wrote an update that only removes a field into the handle, and lessor died before the
    handle's actor applied it: the next run's handle actor, which never applied anything, removes the field
    (the resource still has every field the handle's template says, so only what it was last given tells)."""
    name = f"removed-{suffix}"
    handle, cm = await claimed(kube, ns, name, {"data": {"size": "small", "extra": "x"}},
                               updateFilters=[{"pathMatch": "/data/extra", "allowedOps": ["add", "remove"]}])
    assert cm["data"] == {"size": "small", "extra": "x"}
    lessor.kill()
    await kube.merge_patch(CLAIM, ns, "c", {"spec": {"resources": [
        {"provider": {"name": name}, "template": {"data": {"size": "small"}}}]}})
    recorded = json.loads(handle["metadata"]["annotations"][CLAIM_TEMPLATES])
    del recorded[0]["data"]["extra"]
    await kube.json_patch(HANDLE, OPS, handle["metadata"]["name"], [  # the claim actor's patch, as it writes it
        {"op": "remove", "path": "/spec/resources/0/template/data/extra"},
        {"op": "add", "path": "/metadata/annotations/" + CLAIM_TEMPLATES.replace("/", "~1"),
         "value": templates_record(recorded)}])
    lessor.start()
    await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"], lambda x: x.get("data") == {"size": "small"},
                      "the ConfigMap with extra removed")


async def test_provider_changed_while_down_reaches_the_resources(
        kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"prov-{suffix}"
    _, cm = await claimed(kube, ns, name, {"data": {"size": "small"}}, default={"data": {"color": "red"}})
    assert cm["data"] == {"size": "small", "color": "red"}
    lessor.kill()
    await kube.merge_patch(PROVIDER, OPS, name, {"spec": {"override": {"metadata": {"labels": {"tier": "gold"}}}}})
    lessor.start()
    await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"],
                      lambda x: (x["metadata"].get("labels") or {}).get("tier") == "gold",
                      "the ConfigMap with the provider's new label")


async def test_resource_deleted_while_down_is_made_again(kube: Gateway, ns: str, suffix: str, lessor: Any) -> None:
    name = f"again-{suffix}"
    handle, cm = await claimed(kube, ns, name, {"data": {"size": "small"}})
    lessor.kill()
    await kube.delete(CONFIGMAP, OPS, cm["metadata"]["name"])
    lessor.start()
    again = await object_when(kube, CONFIGMAP, OPS, cm["metadata"]["name"], lambda x: True, "the ConfigMap again")
    assert again["data"] == {"size": "small"} and owner(again) == handle["metadata"]["name"]
    assert again["metadata"]["uid"] != cm["metadata"]["uid"]


async def test_pool_minimum_raised_while_down_is_met(kube: Gateway, suffix: str, lessor: Any) -> None:
    name = f"more-{suffix}"
    await provider(kube, name)
    await pool(kube, name, name, {"data": {"size": "small"}}, 1)
    await pool_settled(kube, name, name, 1)
    lessor.kill()
    await kube.merge_patch(POOL, OPS, name, {"spec": {"minAvailable": 3}})
    lessor.start()
    await pool_settled(kube, name, name, 3)
    await kube.delete(POOL, OPS, name)
