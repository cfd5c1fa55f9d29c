"""Poolboy features lessor adds for its users, against the real API server: pools' preferenceScore,
resourceLabels, resourceAnnotations and vars."""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, CONFIGMAP, HANDLE, POOL, PROVIDER
from tests.polling import discard, gone, until, wait_events
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"


class Made:
    """Providers and pools of one test, in the operator's namespace under unique names; removed afterwards."""

    def __init__(self, kube: Gateway) -> None:
        self.kube = kube
        self.sfx = uuid.uuid4().hex[:6]
        self.objects: list[tuple[Resource, str]] = []

    async def create(self, res: Resource, base: str, spec: Mapping[str, Any]) -> str:
        name = f"{base}-{self.sfx}"
        await self.kube.create(res, OPS, {"apiVersion": API, "kind": res.kind, "metadata": {"name": name},
                                          "spec": dict(spec)})
        self.objects.append((res, name))
        return name


@pytest.fixture
async def made(kube: Gateway) -> AsyncIterator[Made]:
    m = Made(kube)
    yield m
    for res, name in reversed(m.objects):
        await discard(kube, res, OPS, name)
    for res, name in m.objects:
        await gone(kube, res, OPS, name)


def ready(obj: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def available(count: int) -> Any:
    return lambda o: ((o.get("status") or {}).get("resourceHandleCount") or {}).get("ready") == count


async def scored_pools(kube: Gateway, made: Made, provider: str, scores: Mapping[str, int | None]) -> dict[str, str]:
    """One pool of one ready handle per name, with that preferenceScore (None: unset); name -> pool."""
    pools = {}
    for base, score in scores.items():
        spec: dict[str, Any] = {"minAvailable": 1, "resources": [{"provider": {"name": provider}, "template": {}}]}
        if score is not None:
            spec["preferenceScore"] = score
        pools[base] = await made.create(POOL, base, spec)
    for name in pools.values():
        await until(kube, POOL, OPS, name, available(1))
    return pools


async def test_a_claim_binds_from_the_pool_with_the_highest_preference_score(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "pref", {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                 "metadata": {"namespace": namespace}}})
    pools = await scored_pools(kube, made, provider, {"pref-a": 10, "pref-b": 20, "pref-c": None})  # by name, a first
    for claim_name in ("first", "second"):
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": claim_name},
                                             "spec": {"resources": [{"provider": {"name": provider}, "template": {}}]}})
        claim = await until(kube, CLAIM, namespace, claim_name, ready)
        handle = await kube.get(HANDLE, OPS, claim["status"]["resourceHandle"]["name"])
        pool = handle["spec"]["resourcePool"]["name"]
        assert pool == pools["pref-b"], f"{claim_name} bound from {pool}"
        await until(kube, POOL, OPS, pools["pref-b"], available(1))  # replenished before the next claim


async def test_pools_give_their_handles_resource_labels_annotations_and_vars(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "labelled", {
        "template": {"enable": True},
        "override": {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"namespace": namespace, "labels": {"team": "from-template", "app": "x"}},
                     "data": {"color": "{{ color }}"}}})
    pool = await made.create(POOL, "labelled", {
        "minAvailable": 1, "resources": [{"provider": {"name": provider}, "template": {}}],
        "resourceLabels": {"team": "qa", "lessor.dev/resource-pool-name": "not-mine"},
        "resourceAnnotations": {"cost-center": "42"},
        "vars": {"color": "blue"}})
    await until(kube, POOL, OPS, pool, available(1))  # a claim takes a pool's handle only once there is one
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c"},
                                         "spec": {"resources": [{"provider": {"name": provider}, "template": {}}]}})
    claim = await until(kube, CLAIM, namespace, "c", ready)
    handle = await kube.get(HANDLE, OPS, claim["status"]["resourceHandle"]["name"])
    assert handle["spec"]["resourcePool"]["name"] == pool
    assert handle["spec"]["resourceLabels"]["team"] == "qa" and handle["spec"]["vars"] == {"color": "blue"}
    reference = claim["status"]["resources"][0]["reference"]
    made_cm = await kube.get(CONFIGMAP, namespace, reference["name"])
    labels = made_cm["metadata"]["labels"]
    assert labels["team"] == "qa" and labels["app"] == "x"
    assert labels["lessor.dev/resource-pool-name"] == pool  # lessor's own marks win
    assert made_cm["metadata"]["annotations"]["cost-center"] == "42"
    assert made_cm["data"] == {"color": "blue"}


async def test_a_field_whose_template_defaults_to_omit_is_left_out_of_the_resource(
        kube: Gateway, namespace: str, made: Made) -> None:
    """Poolboy's `{{ x | default(omit) }}`: set where the variable is defined, absent where it is not."""
    provider = await made.create(PROVIDER, "omitting", {
        "template": {"enable": True},
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace},
                     "data": {"color": "{{ color | default(omit) }}", "size": "{{ size | default(omit) }}"}}})
    pool = await made.create(POOL, "omitting", {"minAvailable": 1, "vars": {"color": "blue"},
                                                "resources": [{"provider": {"name": provider}, "template": {}}]})
    await until(kube, POOL, OPS, pool, available(1))  # else the claim makes a handle of its own, without the vars
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c"},
                                         "spec": {"resources": [{"provider": {"name": provider}, "template": {}}]}})
    claim = await until(kube, CLAIM, namespace, "c", ready)
    reference = claim["status"]["resources"][0]["reference"]
    assert (await kube.get(CONFIGMAP, namespace, reference["name"]))["data"] == {"color": "blue"}


@pytest.mark.parametrize("where", ["claim", "provider"])
async def test_disable_creation_makes_a_claim_wait_for_a_pool(
        kube: Gateway, namespace: str, made: Made, where: str) -> None:
    provider_spec: dict[str, Any] = {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                  "metadata": {"namespace": namespace}}}
    claim_spec: dict[str, Any] = {}
    (provider_spec if where == "provider" else claim_spec)["disableCreation"] = True
    provider = await made.create(PROVIDER, "nocreate", provider_spec)
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "waits"},
                                         "spec": {**claim_spec,
                                                  "resources": [{"provider": {"name": provider}, "template": {}}]}})

    claim = await until(kube, CLAIM, namespace, "waits", lambda o: bound_reason(o) == "WaitingForPool")
    assert "resourceHandle" not in claim["status"] or claim["status"]["resourceHandle"] is None
    handles, _ = await kube.list(HANDLE, OPS)
    assert not [h for h in handles if (h["spec"].get("resourceClaim") or {}).get("namespace") == namespace]

    pool = await made.create(POOL, "nocreate", {"minAvailable": 1,
                                                "resources": [{"provider": {"name": provider}, "template": {}}]})
    claim = await until(kube, CLAIM, namespace, "waits", ready)
    handle = await kube.get(HANDLE, OPS, claim["status"]["resourceHandle"]["name"])
    assert handle["spec"]["resourcePool"]["name"] == pool


async def test_a_claim_pinned_to_a_pool_by_annotation_binds_only_from_it(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "pinned", {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                   "metadata": {"namespace": namespace}}})
    pools = await scored_pools(kube, made, provider, {"pinned-a": None, "pinned-b": 50})  # unpinned, b would win
    await kube.create(CLAIM, namespace, {
        "apiVersion": API, "kind": "ResourceClaim",
        "metadata": {"name": "pinned", "annotations": {"lessor.dev/resource-pool-name": pools["pinned-a"]}},
        "spec": {"resources": [{"provider": {"name": provider}, "template": {}}]}})
    claim = await until(kube, CLAIM, namespace, "pinned", ready)
    handle = await kube.get(HANDLE, OPS, claim["status"]["resourceHandle"]["name"])
    assert handle["spec"]["resourcePool"]["name"] == pools["pinned-a"]


async def test_auto_delete_deletes_a_claim_once_its_condition_holds_and_a_hostile_one_deletes_nothing(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "autodel", {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                    "metadata": {"namespace": namespace}}})
    for name, when in (("done", "status.resources[0].state.data.phase == 'done'"),
                       ("hostile", "''.__class__.__mro__[1].__subclasses__() | length > 0"),
                       ("running", "status.resources[0].state.data.phase == 'done'")):
        phase = "running" if name == "running" else "done"
        await kube.create(CLAIM, namespace, {
            "apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"autoDelete": {"when": when},
                     "resources": [{"provider": {"name": provider}, "template": {"data": {"phase": phase}}}]}})
    await gone(kube, CLAIM, namespace, "done")
    for name in ("hostile", "running"):
        claim = await until(kube, CLAIM, namespace, name, ready)
        assert claim["metadata"].get("deletionTimestamp") is None
    events = await wait_events(kube, namespace, "hostile", lambda found: any(
        e["reason"] == "AutoDeleteFailed" for e in found))
    assert "unsafe" in next(e for e in events if e["reason"] == "AutoDeleteFailed")["note"]


def bound_reason(o: Mapping[str, Any]) -> str | None:
    return next((c["reason"] for c in (o.get("status") or {}).get("conditions") or () if c["type"] == "Bound"), None)


async def test_approval_holds_a_claim_until_approved_and_a_rejected_one_gets_nothing(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "approval", {
        "approval": {"required": True, "pendingMessage": "Waiting for the lab lead."},
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}})
    for name in ("approve-me", "reject-me"):
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                             "spec": {"resources": [{"provider": {"name": provider},
                                                                     "template": {"data": {"who": name}}}]}})
    for name in ("approve-me", "reject-me"):
        claim = await until(kube, CLAIM, namespace, name, lambda o: bound_reason(o) == "ApprovalPending")
        assert claim["status"]["approval"] == {"state": "pending", "message": "Waiting for the lab lead."}
        bound = next(c for c in claim["status"]["conditions"] if c["type"] == "Bound")
        assert f"kubectl patch rclaim {name} --subresource=status" in bound["message"], bound
    handles, _ = await kube.list(HANDLE, OPS)
    assert not [h for h in handles if (h["spec"].get("resourceClaim") or {}).get("namespace") == namespace]

    await kube.patch_status(CLAIM, namespace, "approve-me", {"approval": {"state": "approved"}})
    await kube.patch_status(CLAIM, namespace, "reject-me", {"approval": {"state": "rejected",
                                                                          "message": "not this week"}})
    claim = await until(kube, CLAIM, namespace, "approve-me", ready)
    assert claim["status"]["approval"]["state"] == "approved"  # the operator never overwrites the approver
    made_map = await kube.get(CONFIGMAP, namespace, claim["status"]["resources"][0]["reference"]["name"])
    assert made_map["data"] == {"who": "approve-me"}
    rejected = await until(kube, CLAIM, namespace, "reject-me", lambda o: bound_reason(o) == "ApprovalRejected")
    bound = next(c for c in rejected["status"]["conditions"] if c["type"] == "Bound")
    assert "not this week" in bound["message"], bound
    assert not (rejected["status"].get("resourceHandle") or {}).get("name")
    handles, _ = await kube.list(HANDLE, OPS)
    assert [h["spec"]["resourceClaim"]["name"] for h in handles
            if (h["spec"].get("resourceClaim") or {}).get("namespace") == namespace] == ["approve-me"]


async def test_auto_detach_deletes_the_handle_and_its_resource_and_the_claim_stays_until_its_end(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "detach", {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                   "metadata": {"namespace": namespace}}})
    end = (datetime.now(timezone.utc) + timedelta(seconds=12)).strftime("%Y-%m-%dT%H:%M:%SZ")
    when = "status.resources[0].state.data.phase == 'failed'"
    for name, phase in (("failed", "failed"), ("running", "running")):
        await kube.create(CLAIM, namespace, {
            "apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"autoDetach": {"when": when}, "lifespan": {"end": end},
                     "resources": [{"provider": {"name": provider}, "template": {"data": {"phase": phase}}}]}})
    detached = await until(kube, CLAIM, namespace, "failed", lambda o: bound_reason(o) == "Detached")
    assert detached["status"]["resourceHandle"]["detached"] is True
    handle, resource = detached["status"]["resourceHandle"]["name"], detached["status"]["resources"][0]["reference"]
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, CONFIGMAP, namespace, resource["name"])
    running = await until(kube, CLAIM, namespace, "running", ready)  # its condition does not hold: untouched
    handles, _ = await kube.list(HANDLE, OPS)
    assert [h["spec"]["resourceClaim"]["name"] for h in handles
            if (h["spec"].get("resourceClaim") or {}).get("namespace") == namespace] == ["running"]
    claim = await kube.get(CLAIM, namespace, "failed")  # still there, with no other handle, until its end
    assert claim["status"]["resourceHandle"] == detached["status"]["resourceHandle"]
    await gone(kube, CLAIM, namespace, "failed", timeout=40)
    assert running["status"]["resourceHandle"]["name"]


async def test_the_status_summary_template_fills_a_bound_claims_summary_and_a_broken_one_fills_nothing(
        kube: Gateway, namespace: str, made: Made) -> None:
    summary = {"phase": "{{ resources[0].state.data.phase }}", "handle": "{{ resource_handle.metadata.name }}",
               "guid": "{{ guid }}", "fixed": "text"}
    good = await made.create(PROVIDER, "summary", {
        "statusSummaryTemplate": summary,
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}})
    broken = await made.create(PROVIDER, "nosummary", {
        "statusSummaryTemplate": {"x": "{{ resources[5].state }}"},  # valid Jinja2, fails when rendered
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}})
    for name, provider in (("summed", good), ("unsummed", broken)):
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                             "spec": {"resources": [{"provider": {"name": provider},
                                                                     "template": {"data": {"phase": "up"}}}]}})
    claim = await until(kube, CLAIM, namespace, "summed", lambda o: ready(o) and (o["status"].get("summary")))
    handle = claim["status"]["resourceHandle"]["name"]
    assert claim["status"]["summary"] == {"phase": "up", "handle": handle, "guid": handle.split("-")[-1],
                                          "fixed": "text"}
    claim = await until(kube, CLAIM, namespace, "unsummed", ready)  # Ready all the same
    assert claim["status"].get("summary") is None
    events = await wait_events(kube, namespace, "unsummed", lambda found: any(
        e["reason"] == "SummaryFailed" for e in found))
    assert "statusSummaryTemplate" in next(e for e in events if e["reason"] == "SummaryFailed")["note"]


async def test_the_default_lifespan_counts_from_the_first_ready_not_from_binding(
        kube: Gateway, namespace: str, made: Made) -> None:
    """Provisioning time is not taken from the default lifespan (the pool/claim tool's firstReady reset)."""
    provider = await made.create(PROVIDER, "firstready", {
        "lifespan": {"default": "1h", "maximum": "1d"},
        "readinessCheck": "data is defined and data.ready is defined and data.ready == 'yes'",
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}})
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "slow"},
                                         "spec": {"resources": [{"provider": {"name": provider},
                                                                 "template": {"data": {"a": "b"}}}]}})
    bound = await until(kube, CLAIM, namespace, "slow",
                        lambda o: bound_reason(o) == "Bound" and (o["status"].get("resources") or [{}])[0].get("state"))
    assert not ready(bound) and "firstReady" not in bound["status"]["lifespan"]
    await asyncio.sleep(4)  # provisioning takes a while
    await kube.merge_patch(CONFIGMAP, namespace, bound["status"]["resources"][0]["reference"]["name"],
                           {"data": {"ready": "yes"}})
    claim = await until(kube, CLAIM, namespace, "slow", ready)
    lifespan = claim["status"]["lifespan"]
    start, first_ready, end = (datetime.fromisoformat(lifespan[k].replace("Z", "+00:00"))
                               for k in ("start", "firstReady", "end"))
    assert first_ready - start >= timedelta(seconds=3), lifespan
    assert end == first_ready + timedelta(hours=1), lifespan
    handle = await kube.get(HANDLE, OPS, claim["status"]["resourceHandle"]["name"])
    assert handle["spec"]["lifespan"]["end"] == lifespan["end"]


async def test_an_unhealthy_pool_handle_is_never_bound_and_deleted_when_the_pool_says_so(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "health", {
        "healthCheck": "data is not defined or data.health is not defined or data.health != 'bad'",
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}})
    entries = [{"provider": {"name": provider}, "template": {"data": {"a": "b"}}}]
    keeps = await made.create(POOL, "keeps", {"minAvailable": 1, "resources": entries})
    await until(kube, POOL, OPS, keeps, available(1))
    [kept] = [h for h in (await kube.list(HANDLE, OPS))[0] if (h["spec"].get("resourcePool") or {}).get("name") == keeps]
    await kube.merge_patch(CONFIGMAP, namespace, kept["status"]["resources"][0]["reference"]["name"],
                           {"data": {"health": "bad"}})
    await until(kube, HANDLE, OPS, kept["metadata"]["name"], lambda h: h["status"].get("healthy") is False)
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                         "spec": {"resources": entries}})
    claim = await until(kube, CLAIM, namespace, "c1", ready)  # a handle of its own, not the unhealthy one
    assert claim["status"]["resourceHandle"]["name"] != kept["metadata"]["name"]
    assert (await kube.get(HANDLE, OPS, kept["metadata"]["name"]))["spec"].get("resourceClaim") is None

    deletes = await made.create(POOL, "deletes", {"minAvailable": 1, "deleteUnhealthyResourceHandles": True,
                                                  "resources": entries})
    await until(kube, POOL, OPS, deletes, available(1))
    [sick] = [h for h in (await kube.list(HANDLE, OPS))[0] if (h["spec"].get("resourcePool") or {}).get("name") == deletes]
    await kube.merge_patch(CONFIGMAP, namespace, sick["status"]["resources"][0]["reference"]["name"],
                           {"data": {"health": "bad"}})
    await gone(kube, HANDLE, OPS, sick["metadata"]["name"])  # deleted, with its resource
    await gone(kube, CONFIGMAP, namespace, sick["status"]["resources"][0]["reference"]["name"])
    await until(kube, POOL, OPS, deletes, available(1))  # and replaced


async def test_among_a_pools_ready_handles_the_highest_preference_score_is_bound_first(
        kube: Gateway, namespace: str, made: Made) -> None:
    provider = await made.create(PROVIDER, "hscore", {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                   "metadata": {"namespace": namespace}}})
    entries = [{"provider": {"name": provider}, "template": {"data": {"a": "b"}}}]
    pool = await made.create(POOL, "hscore", {"minAvailable": 2, "preferenceScore": 3, "resources": entries})
    await until(kube, POOL, OPS, pool, available(2))
    handles = sorted((h for h in (await kube.list(HANDLE, OPS))[0]
                      if (h["spec"].get("resourcePool") or {}).get("name") == pool),
                     key=lambda h: (h["metadata"]["creationTimestamp"], h["metadata"]["name"]))
    assert [h["spec"]["preferenceScore"] for h in handles] == [3, 3]  # copied from the pool
    newest = handles[-1]["metadata"]["name"]
    await kube.merge_patch(HANDLE, OPS, newest, {"spec": {"preferenceScore": 10}})
    await until(kube, HANDLE, OPS, newest, lambda h: h["spec"].get("preferenceScore") == 10)
    await asyncio.sleep(scaled(1))  # the pool sees the change
    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                         "spec": {"resources": entries}})
    claim = await until(kube, CLAIM, namespace, "c1", ready)
    assert claim["status"]["resourceHandle"]["name"] == newest  # not the oldest: the highest score
