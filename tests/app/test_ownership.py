"""lessor never takes what it did not create: against the real API server, with the in-process operator.

A provider that names its resource after the claim lets a claim name a
resource that already exists. lessor creates only free names and applies
to, or deletes, only resources that carry its handle labels naming that
handle; anything else is `Ready=False`, reason `ResourceConflict`, on the
claim, and the resource is left exactly as it was.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CONFIGMAP, HANDLE, NAMESPACE, PROVIDER
from tests.polling import discard, gone

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
HANDLE_NAME = "lessor.dev/resource-handle-name"
Until = Callable[..., Awaitable[Mapping[str, Any]]]  # the `until` fixture


def ready_condition(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Ready"), {})


def reason(obj: Mapping[str, Any]) -> tuple[str, str] | None:
    found = ready_condition(obj)
    return (found["status"], found["reason"]) if found else None


def conflicting(obj: Mapping[str, Any]) -> bool:
    return reason(obj) == ("False", "ResourceConflict")


def ready(obj: Mapping[str, Any]) -> bool:
    return reason(obj) == ("True", "Ready")


@pytest.fixture
async def other_namespace(kube: Gateway) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACE, None, name)


@pytest.fixture
async def named_after_claim(kube: Gateway, namespace: str) -> AsyncIterator[str]:
    """A provider whose ConfigMaps, in the test's namespace, are named after their claim (the hostile repro)."""
    name = f"by-claim-name-{uuid.uuid4().hex[:6]}"
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": name},
                                      "spec": {"template": {"enable": True}, "resourceRequiresClaim": True,
                                               "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                                                   "namespace": namespace,
                                                   "name": "{{ resource_claim.metadata.name }}"}}}})
    yield name
    await kube.delete(PROVIDER, OPS, name)


async def claim(kube: Gateway, ns: str, name: str, provider: str, data: Mapping[str, str]) -> None:
    await kube.create(CLAIM, ns, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                  "spec": {"resources": [{"provider": {"name": provider},
                                                          "template": {"data": dict(data)}}]}})


async def delete_claim(kube: Gateway, ns: str, name: str) -> None:
    """Delete the claim and wait until its handle (which deletes what it made first) is gone too."""
    handle = ((await kube.get(CLAIM, ns, name)).get("status") or {}).get("resourceHandle") or {}
    await kube.delete(CLAIM, ns, name)
    await gone(kube, CLAIM, ns, name)
    if handle.get("name"):
        await gone(kube, HANDLE, OPS, handle["name"])


async def test_a_claim_named_after_an_existing_configmap_neither_merges_into_it_nor_deletes_it(
        kube: Gateway, namespace: str, named_after_claim: str, until: Until) -> None:
    before = await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                                      "metadata": {"name": "victim"}, "data": {"owner": "someone"}})
    await claim(kube, namespace, "victim", named_after_claim, {"x": "pwned"})
    got = await until(CLAIM, namespace, "victim", conflicting)
    text = ready_condition(got)["message"]
    assert f"ConfigMap {namespace}/victim already exists and was not created by lessor" in text, text

    after = await kube.get(CONFIGMAP, namespace, "victim")
    assert after["data"] == {"owner": "someone"}  # nothing merged
    assert after["metadata"]["resourceVersion"] == before["metadata"]["resourceVersion"]  # nothing written at all
    assert "state" not in got["status"]["resources"][0]  # its content is not shown on the claim either
    assert "reference" not in got["status"]["resources"][0]  # nor is it named as the claim's

    await delete_claim(kube, namespace, "victim")
    still = await kube.get(CONFIGMAP, namespace, "victim")
    assert still["metadata"]["uid"] == before["metadata"]["uid"] and still["data"] == {"owner": "someone"}


async def test_two_claims_never_share_a_resource(
        kube: Gateway, namespace: str, other_namespace: str, named_after_claim: str, until: Until) -> None:
    # Both at once: one create wins the name; the other finds it labelled for another handle.
    await asyncio.gather(claim(kube, namespace, "shared", named_after_claim, {"from": "a"}),
                         claim(kube, other_namespace, "shared", named_after_claim, {"from": "b"}))
    settled = lambda obj: ready(obj) or conflicting(obj)  # noqa: E731
    claims = {ns: await until(CLAIM, ns, "shared", settled) for ns in (namespace, other_namespace)}
    winners = [ns for ns, obj in claims.items() if ready(obj)]
    assert len(winners) == 1, {ns: reason(obj) for ns, obj in claims.items()}
    winner, loser = winners[0], next(ns for ns in claims if ns != winners[0])
    winner_handle = claims[winner]["status"]["resourceHandle"]["name"]

    loser_text = ready_condition(claims[loser])["message"]
    assert (f"ConfigMap {namespace}/shared already exists and belongs to ResourceHandle {OPS}/{winner_handle} "
            f"(ResourceClaim {winner}/shared)") in loser_text, loser_text
    cm = await kube.get(CONFIGMAP, namespace, "shared")
    assert cm["metadata"]["labels"][HANDLE_NAME] == winner_handle
    assert cm["data"] == {"from": "a" if winner == namespace else "b"}

    # The loser goes and takes nothing with it; the winner stays Ready on its own ConfigMap.
    await delete_claim(kube, loser, "shared")
    cm_after = await kube.get(CONFIGMAP, namespace, "shared")
    assert cm_after["metadata"]["uid"] == cm["metadata"]["uid"] and cm_after["data"] == cm["data"]
    assert ready(await kube.get(CLAIM, winner, "shared"))

    # The winner's deletion deletes what lessor made for it.
    await delete_claim(kube, winner, "shared")
    await gone(kube, CONFIGMAP, namespace, "shared")


async def test_a_name_freed_by_its_owner_is_then_created_for_the_waiting_claim(
        kube: Gateway, namespace: str, named_after_claim: str, until: Until) -> None:
    await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                             "metadata": {"name": "later"}, "data": {"owner": "someone"}})
    await claim(kube, namespace, "later", named_after_claim, {"mine": "yes"})
    await until(CLAIM, namespace, "later", conflicting)
    await kube.delete(CONFIGMAP, namespace, "later")
    await until(CLAIM, namespace, "later", ready)
    cm = await kube.get(CONFIGMAP, namespace, "later")
    assert cm["data"] == {"mine": "yes"} and HANDLE_NAME in cm["metadata"]["labels"]


def rendered(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Rendered"), {})


async def test_only_a_handle_imported_under_the_ignore_label_adopts_the_resource_its_status_names(
        kube: Gateway, namespace: str, until: Until) -> None:
    """An administrator's import (Poolboy's test-ignore-01): a handle created under the ignore label, whose status
    the administrator wrote, adopts the ConfigMap it names once the label goes. The same status written on a handle
    created without the label, which lessor has judged already, takes nothing."""
    provider, suffix = f"import-{uuid.uuid4().hex[:6]}", uuid.uuid4().hex[:6]
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
                                      "spec": {"template": {"enable": True}, "override": {
                                          "apiVersion": "v1", "kind": "ConfigMap",
                                          "metadata": {"namespace": namespace, "name": f"{provider}-{{{{ guid }}}}"}}}})
    made = {}
    for which in ("imported", "plain"):
        made[which] = await kube.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
            "name": f"{provider}-{which}{suffix}"}, "data": {"owner": "admin"}})

    def handle(which: str, labels: Mapping[str, str]) -> dict[str, Any]:
        return {"apiVersion": API, "kind": "ResourceHandle",
                "metadata": {"name": f"guid-{which}{suffix}", "labels": dict(labels)},
                "spec": {"resources": [{"provider": {"name": provider}, "template": {"data": {"owner": "lessor"}}}]}}

    def status(which: str) -> dict[str, Any]:
        return {"resources": [{"provider": {"name": provider}, "reference": {
            "apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace, "name": f"{provider}-{which}{suffix}"}}]}

    try:
        # Created without the label: lessor judges it at once, and a status written afterwards changes nothing.
        await kube.create(HANDLE, OPS, handle("plain", {}))
        await until(HANDLE, OPS, f"guid-plain{suffix}", lambda h: rendered(h).get("reason") == "ResourceConflict")
        await kube.patch_status(HANDLE, OPS, f"guid-plain{suffix}", status("plain"))
        judged = await until(HANDLE, OPS, f"guid-plain{suffix}", lambda h: "reference" not in h["status"]["resources"][0])
        assert rendered(judged)["reason"] == "ResourceConflict"  # judged again, and refused again

        # Created under the label, its status written meanwhile: adopted once the label goes.
        await kube.create(HANDLE, OPS, handle("imported", {"lessor.dev/ignore": ""}))
        await kube.patch_status(HANDLE, OPS, f"guid-imported{suffix}", status("imported"))
        await kube.merge_patch(HANDLE, OPS, f"guid-imported{suffix}", {"metadata": {"labels": {
            "lessor.dev/ignore": None}}})
        taken = await until(HANDLE, OPS, f"guid-imported{suffix}", lambda h: rendered(h).get("status") == "True")
        assert taken["status"]["resources"][0]["state"]["data"] == {"owner": "lessor"}
        adopted = await kube.get(CONFIGMAP, namespace, f"{provider}-imported{suffix}")
        assert adopted["metadata"]["uid"] == made["imported"]["metadata"]["uid"]
        assert adopted["metadata"]["labels"][HANDLE_NAME] == f"guid-imported{suffix}"

        plain = await kube.get(CONFIGMAP, namespace, f"{provider}-plain{suffix}")
        assert plain["metadata"]["resourceVersion"] == made["plain"]["metadata"]["resourceVersion"]  # untouched

        # The adopted ConfigMap is lessor's now: it goes with its handle; the other one stays.
        for which in ("imported", "plain"):
            await kube.delete(HANDLE, OPS, f"guid-{which}{suffix}")
            await gone(kube, HANDLE, OPS, f"guid-{which}{suffix}")
        await gone(kube, CONFIGMAP, namespace, f"{provider}-imported{suffix}")
        left = await kube.get(CONFIGMAP, namespace, f"{provider}-plain{suffix}")
        assert left["metadata"]["uid"] == made["plain"]["metadata"]["uid"] and left["data"] == {"owner": "admin"}
    finally:
        for which in ("imported", "plain"):
            await discard(kube, HANDLE, OPS, f"guid-{which}{suffix}")
        await discard(kube, PROVIDER, OPS, provider)
