"""`lessor migrate` against the real API server, with Poolboy's and the Jumpstarter controller's CRDs
installed (minimal stand-ins, tests/porting/data/*/crds.yaml) and their objects in the states they leave
behind; lessor's operator runs throughout, as it would right after the migration."""

from __future__ import annotations

import asyncio
import datetime as dt
import subprocess
import sys
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import (
    CLAIM,
    CONFIGMAP,
    CRD,
    EXPORTER,
    HANDLE,
    LEASE,
    NAMESPACE,
    POOL,
    PROVIDER,
    SCALING,
)
from lessor.tools.porting.migrate import make_plan
from tests.polling import discard, get, gone, until
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
DATA = Path(__file__).parent / "data"
OPS = "lessor-system"
PB = "poolboy.gpte.redhat.com"
JS = "jumpstarter.dev"


def old(group: str, version: str, kind: str, plural: str) -> Resource:
    return Resource(group, version, kind, plural)


PB_PROVIDER, PB_POOL = old(PB, "v1", "ResourceProvider", "resourceproviders"), old(PB, "v1", "ResourcePool", "resourcepools")
PB_HANDLE, PB_CLAIM = old(PB, "v1", "ResourceHandle", "resourcehandles"), old(PB, "v1", "ResourceClaim", "resourceclaims")
PB_SCALING = old(PB, "v1", "ResourcePoolScaling", "resourcepoolscalings")
JS_CLIENT, JS_EXPORTER = old(JS, "v1alpha1", "Client", "clients"), old(JS, "v1alpha1", "Exporter", "exporters")
JS_LEASE = old(JS, "v1alpha1", "Lease", "leases")


def at(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def install_crds(kube: Gateway, path: Path) -> None:
    for crd in yaml.safe_load_all(path.read_text()):
        try:
            await kube.create(CRD, None, crd)
        except ApiError as error:
            if error.status != 409:
                raise
        await until(kube, CRD, "", crd["metadata"]["name"], lambda o: any(
            c["type"] == "Established" and c["status"] == "True" for c in (o.get("status") or {}).get("conditions") or ()))
    await asyncio.sleep(scaled(0.5))  # discovery catches up with a just-established CRD


async def make(kube: Gateway, res: Resource, ns: str, obj: dict[str, Any], status: dict[str, Any] | None = None) -> dict[str, Any]:
    made = await kube.create(res, ns, {"apiVersion": res.api_version, "kind": res.kind, **obj})
    if status is not None:
        made = await kube.patch_status(res, ns, obj["metadata"]["name"], status)
    return made


def migrate(kubeconfig: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    exe = str(Path(sys.executable).parent / "lessor")
    return subprocess.run([exe, "migrate", *args, "--kubeconfig", str(kubeconfig)], cwd=cwd, capture_output=True,
                          text=True, timeout=scaled(120))


def ready(obj: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def reason(obj: dict[str, Any], type_: str = "Ready") -> str | None:
    return next((c["reason"] for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), None)


# ------------------------------------------------------------------------------------ Poolboy


@pytest.fixture
async def poolboy_namespace(kube: Gateway) -> AsyncIterator[str]:
    await install_crds(kube, DATA / "poolboy" / "crds.yaml")
    name = f"pb-{uuid.uuid4().hex[:8]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACE, None, name)


async def made_by_poolboy(kube: Gateway, namespace: str, configmap: dict[str, Any]) -> dict[str, Any]:
    """A ConfigMap as Poolboy creates one: under its own field manager, not lessor's (whose creates an apply
    takes over), so that what lessor must leave alone is not lessor's on the API server either."""
    return await kube.request("create", "ConfigMap", "POST", CONFIGMAP.path(namespace),
                              body={"apiVersion": "v1", "kind": "ConfigMap", **configmap},
                              params={"fieldManager": "poolboy"})


async def poolboy_provider_and_pool(kube: Gateway, pb: str, user: str, name: str) -> str:
    """A Poolboy provider of ConfigMaps in `user` (named `<name's prefix>-<guid>`) and its pool of 1, both `name`."""
    prefix = name.split("-")[0]
    await make(kube, PB_PROVIDER, pb, {"metadata": {"name": name}, "spec": {
        "override": {"apiVersion": "v1", "kind": "ConfigMap",
                     "metadata": {"name": prefix + "-{{ guid }}", "namespace": user}},
        "template": {"enable": True}}})
    await make(kube, PB_POOL, pb, {"metadata": {"name": name}, "spec": {
        "minAvailable": 1, "resources": [{"provider": {"name": name, "namespace": pb}, "template": {"data": {"v": "1"}}}]}})
    return name


async def poolboy_leftovers(kube: Gateway, pb: str, user: str, sfx: str) -> dict[str, dict[str, Any]]:
    """What Poolboy leaves: a provider, a pool, a bound and an unbound pool handle with their ConfigMaps
    (marked as Poolboy marks them), a claim bound to the first, an expired claim, and a handle bound to a
    claim whose listed ConfigMap Poolboy did not make."""
    provider = await poolboy_provider_and_pool(kube, pb, user, f"mig-{sfx}")
    made: dict[str, dict[str, Any]] = {}
    for key, claim, pool, marked in (("a", "bound", True, True), ("b", None, True, True), ("c", "other", False, False),
                                     ("d", "elsewhere", False, True)):
        handle_name = f"guid-{key}{sfx}"
        spec: dict[str, Any] = {"resources": [{"provider": {"name": provider, "namespace": pb},
                                               "template": {"data": {"v": "1"}}}],
                                "lifespan": {"end": at(3600)}}
        if pool:
            spec["resourcePool"] = {"apiVersion": f"{PB}/v1", "kind": "ResourcePool", "name": provider, "namespace": pb}
        claim_ns = pb if claim == "elsewhere" else user  # outside --namespace: stays with Poolboy
        if claim:
            spec["resourceClaim"] = {"apiVersion": f"{PB}/v1", "kind": "ResourceClaim", "name": claim,
                                     "namespace": claim_ns}
        cm_name = f"mig-{key}{sfx}"
        handle = await make(kube, PB_HANDLE, pb, {
            "metadata": {"name": handle_name, "generateName": "guid-", "finalizers": [PB],
                         "labels": {f"{PB}/resource-pool-name": provider} if pool else {}},
            "spec": spec}, status={"resources": [{"reference": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                "name": cm_name, "namespace": user}}], "ready": True})
        annotations = {f"{PB}/resource-handle-name": handle_name, f"{PB}/resource-handle-namespace": pb,
                       f"{PB}/resource-handle-uid": handle["metadata"]["uid"]} if marked else {"owner": "someone else"}
        made[key] = await made_by_poolboy(kube, user, {"data": {"v": "1"},
                                                        "metadata": {"name": cm_name, "annotations": annotations}})
        if claim:
            await make(kube, PB_CLAIM, claim_ns, {"metadata": {"name": claim, "finalizers": [PB]}, "spec": {
                "resources": [{"provider": {"name": provider}, "template": {"data": {"v": "1"}}}]}},
                status={"resourceHandle": {"name": handle_name, "namespace": pb}, "lifespan": {"end": at(3600)}})
    await make(kube, PB_CLAIM, user, {"metadata": {"name": "expired"}, "spec": {
        "resources": [{"provider": {"name": provider}, "template": {"data": {"v": "1"}}}]}},
        status={"resourceHandle": {"name": f"guid-x{sfx}", "namespace": pb}, "lifespan": {"end": at(-3600)}})
    return made


async def test_migrating_poolboy_adopts_what_its_handles_made_and_recreates_nothing(
        kube: Gateway, namespace: str, poolboy_namespace: str, kubeconfig: Path, tmp_path: Path) -> None:
    user, pb, sfx = namespace, poolboy_namespace, uuid.uuid4().hex[:5]
    provider = f"mig-{sfx}"
    before = await poolboy_leftovers(kube, pb, user, sfx)
    args = ("poolboy", "--poolboy-namespace", pb, "--namespace", user)
    try:
        # --dry-run prints the plan and changes nothing.
        dry = migrate(kubeconfig, tmp_path, *args, "--dry-run")
        assert dry.returncode == 0, dry.stderr
        plan = dry.stdout.splitlines()
        assert plan[0] == f"create ResourceProvider {OPS}/{provider}"
        assert f"adopt v1 ConfigMap {user}/mig-a{sfx} for ResourceHandle {OPS}/guid-a{sfx}" in plan
        assert f"create ResourceClaim {user}/bound with its status" in plan
        assert plan[-1] == f"create ResourcePool {OPS}/{provider}"
        assert not any("expired" in line or f"mig-c{sfx}" in line or f"guid-d{sfx}" in line for line in plan)
        assert f"its claim {pb}/elsewhere is not migrated, so neither is the handle nor what it made" in dry.stderr
        assert "ResourceClaim " + user + "/expired: (object): left out: its lifespan ended" in dry.stderr
        assert f"mig-c{sfx} does not carry Poolboy's marks for this handle: not adopted" in dry.stderr
        assert await get(kube, PROVIDER, OPS, provider) is None
        assert (await kube.get(CONFIGMAP, user, f"mig-a{sfx}"))["metadata"]["resourceVersion"] == \
            before["a"]["metadata"]["resourceVersion"]

        done = migrate(kubeconfig, tmp_path, *args)
        assert done.returncode == 0, done.stderr
        assert f"adopted v1 ConfigMap {user}/mig-a{sfx} for ResourceHandle {OPS}/guid-a{sfx}" in done.stdout

        # The bound claim is served by its old handle and the ConfigMap Poolboy made: nothing re-created.
        claim = await until(kube, CLAIM, user, "bound", ready)
        assert claim["status"]["resourceHandle"]["name"] == f"guid-a{sfx}"
        assert claim["status"]["resources"][0]["reference"]["name"] == f"mig-a{sfx}"
        for key in ("a", "b"):
            cm = await kube.get(CONFIGMAP, user, f"mig-{key}{sfx}")
            assert cm["metadata"]["uid"] == before[key]["metadata"]["uid"]
            assert cm["metadata"]["labels"]["lessor.dev/resource-handle-name"] == f"guid-{key}{sfx}"
            assert cm["metadata"]["annotations"][f"{PB}/resource-handle-name"] == f"guid-{key}{sfx}"  # kept
        listed, _ = await kube.list(CONFIGMAP, user)
        assert sorted(o["metadata"]["name"] for o in listed if o["metadata"]["name"].startswith("mig-")) == \
            [f"mig-a{sfx}", f"mig-b{sfx}", f"mig-c{sfx}", f"mig-d{sfx}"]

        # The pool counts its unbound handle and makes no other.
        pool = await until(kube, POOL, OPS, provider,
                           lambda o: ((o.get("status") or {}).get("resourceHandleCount") or {}).get("available") == 1)
        assert [h["name"] for h in pool["status"]["resourceHandles"]] == [f"guid-b{sfx}"]

        # A ConfigMap Poolboy did not make is left alone; its claim says so.
        other = await until(kube, CLAIM, user, "other", lambda o: reason(o) == "ResourceConflict")
        assert "was not created by lessor" in str(other["status"])
        foreign = await kube.get(CONFIGMAP, user, f"mig-c{sfx}")
        assert foreign["metadata"]["resourceVersion"] == before["c"]["metadata"]["resourceVersion"]
        # A handle whose claim stays behind is not migrated: what it made is not lessor's.
        assert await get(kube, HANDLE, OPS, f"guid-d{sfx}") is None
        left = await kube.get(CONFIGMAP, user, f"mig-d{sfx}")
        assert left["metadata"]["resourceVersion"] == before["d"]["metadata"]["resourceVersion"]

        assert await get(kube, CLAIM, user, "expired") is None  # not provisioned again
        assert (await kube.get(PB_CLAIM, user, "bound"))["status"]["resourceHandle"]["name"] == f"guid-a{sfx}"

        # Running it again changes nothing.
        again = migrate(kubeconfig, tmp_path, *args)
        assert again.returncode == 0, again.stderr
        assert "created:" not in again.stdout and "adopted" not in again.stdout
    finally:
        for res, name in ((POOL, provider), (HANDLE, f"guid-a{sfx}"), (HANDLE, f"guid-b{sfx}"),
                          (HANDLE, f"guid-c{sfx}"), (PROVIDER, provider)):
            await discard(kube, res, OPS, name)
        for res, name in ((HANDLE, f"guid-a{sfx}"), (HANDLE, f"guid-b{sfx}"), (HANDLE, f"guid-c{sfx}")):
            await gone(kube, res, OPS, name)
        for res, ns, name in ((PB_CLAIM, user, "bound"), (PB_CLAIM, user, "other"), (PB_CLAIM, pb, "elsewhere"), *(
                (PB_HANDLE, pb, f"guid-{k}{sfx}") for k in "abcd")):
            await kube.merge_patch(res, ns, name, {"metadata": {"finalizers": None}})


async def test_a_claim_in_provider_mode_migrates_with_its_values_and_keeps_its_resource(
        kube: Gateway, namespace: str, poolboy_namespace: str, kubeconfig: Path, tmp_path: Path) -> None:
    user, pb, sfx = namespace, poolboy_namespace, uuid.uuid4().hex[:5]
    provider, handle_name, cm_name = f"par-{sfx}", f"guid-p{sfx}", f"par-p{sfx}"
    await make(kube, PB_PROVIDER, pb, {"metadata": {"name": provider}, "spec": {
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "par-{{ guid }}", "namespace": user}},
        "parameters": [{"name": "size", "allowUpdate": True, "validation": {"openAPIV3Schema": {"type": "string"}}}],
        "template": {"enable": True, "definition": {"data": {"size": "{{ size }}"}}},
        "updateFilters": [{"pathMatch": "/data/.*"}]}})
    values = {"size": "small"}
    handle = await make(kube, PB_HANDLE, pb, {
        "metadata": {"name": handle_name, "generateName": "guid-", "finalizers": [PB]},
        "spec": {"provider": {"name": provider, "parameterValues": values},
                 "resourceClaim": {"apiVersion": f"{PB}/v1", "kind": "ResourceClaim", "name": "sized", "namespace": user},
                 "resources": [{"name": provider, "provider": {"name": provider, "namespace": pb},
                                "template": {"data": {"size": "small"}}}],
                 "lifespan": {"end": at(3600)}}},
        status={"resources": [{"reference": {"apiVersion": "v1", "kind": "ConfigMap", "name": cm_name,
                                             "namespace": user}}], "ready": True})
    made = await made_by_poolboy(kube, user, {"data": {"size": "small"},
                                               "metadata": {"name": cm_name, "annotations": {
                                                   f"{PB}/resource-handle-name": handle_name,
                                                   f"{PB}/resource-handle-namespace": pb,
                                                   f"{PB}/resource-handle-uid": handle["metadata"]["uid"]}}})
    await make(kube, PB_CLAIM, user, {"metadata": {"name": "sized", "finalizers": [PB]},
                                      "spec": {"provider": {"name": provider, "parameterValues": values}}},
               status={"resourceHandle": {"name": handle_name, "namespace": pb}, "lifespan": {"end": at(3600)},
                       "provider": {"name": provider, "parameterValues": values}})
    try:
        done = migrate(kubeconfig, tmp_path, "poolboy", "--poolboy-namespace", pb, "--namespace", user)
        assert done.returncode == 0, done.stderr
        claim = await until(kube, CLAIM, user, "sized", ready)
        assert claim["status"]["resourceHandle"]["name"] == handle_name
        assert claim["status"]["provider"]["parameterValues"] == values
        cm = await kube.get(CONFIGMAP, user, cm_name)
        assert cm["metadata"]["uid"] == made["metadata"]["uid"]  # adopted, not made again
        await kube.merge_patch(CLAIM, user, "sized", {"spec": {"provider": {"parameterValues": {"size": "large"}}}})
        await until(kube, CONFIGMAP, user, cm_name, lambda o: o["data"]["size"] == "large")
    finally:
        await discard(kube, CLAIM, user, "sized")
        await discard(kube, HANDLE, OPS, handle_name)
        await gone(kube, HANDLE, OPS, handle_name)
        await discard(kube, PROVIDER, OPS, provider)
        for res, ns, name in ((PB_CLAIM, user, "sized"), (PB_HANDLE, pb, handle_name)):
            await kube.merge_patch(res, ns, name, {"metadata": {"finalizers": None}})


async def test_a_finished_scaling_migrates_with_its_count_and_its_handles_stay_extra(
        kube: Gateway, namespace: str, poolboy_namespace: str, kubeconfig: Path, tmp_path: Path) -> None:
    """Poolboy made two handles for a scaling beyond the pool's minAvailable of 1: lessor neither makes
    them again (the scaling keeps its count) nor deletes them as a surplus (they keep the scaling's label)."""
    user, pb, sfx = namespace, poolboy_namespace, uuid.uuid4().hex[:5]
    provider, scaling = await poolboy_provider_and_pool(kube, pb, user, f"sc-{sfx}"), f"event-{sfx}"
    names = {key: f"guid-{key}{sfx}" for key in ("r", "s1", "s2")}
    for key, handle_name in names.items():
        labels = {f"{PB}/resource-pool-name": provider}
        if key != "r":
            labels[f"{PB}/resource-pool-scaling-name"] = scaling
        handle = await make(kube, PB_HANDLE, pb, {
            "metadata": {"name": handle_name, "labels": labels},
            "spec": {"resources": [{"provider": {"name": provider, "namespace": pb}, "template": {"data": {"v": "1"}}}],
                     "resourcePool": {"apiVersion": f"{PB}/v1", "kind": "ResourcePool", "name": provider, "namespace": pb},
                     "lifespan": {"end": at(3600)}}},
            status={"resources": [{"reference": {"apiVersion": "v1", "kind": "ConfigMap", "name": f"sc-{key}{sfx}",
                                                 "namespace": user}}], "ready": True})
        await made_by_poolboy(kube, user, {"data": {"v": "1"}, "metadata": {
            "name": f"sc-{key}{sfx}", "annotations": {f"{PB}/resource-handle-name": handle_name,
                                                      f"{PB}/resource-handle-namespace": pb,
                                                      f"{PB}/resource-handle-uid": handle["metadata"]["uid"]}}})
    await make(kube, PB_SCALING, pb, {"metadata": {"name": scaling}, "spec": {
        "resourcePool": {"name": provider, "namespace": pb}, "count": 2}}, status={"count": 2, "state": "done"})
    try:
        done = migrate(kubeconfig, tmp_path, "poolboy", "--poolboy-namespace", pb, "--namespace", user)
        assert done.returncode == 0, done.stderr
        assert f"created: ResourcePoolScaling {OPS}/{scaling} with its status" in done.stdout
        for key in ("s1", "s2"):
            handle = await kube.get(HANDLE, OPS, names[key])
            assert handle["metadata"]["labels"]["lessor.dev/resource-pool-scaling"] == scaling

        pool = await until(kube, POOL, OPS, provider,
                           lambda o: ((o.get("status") or {}).get("resourceHandleCount") or {}).get("available") == 3)
        await asyncio.sleep(3)  # time enough for a pool that saw a surplus, or a scaling short of handles, to act
        pool = await kube.get(POOL, OPS, provider)
        assert sorted(h["name"] for h in pool["status"]["resourceHandles"]) == sorted(names.values())
        migrated = await kube.get(SCALING, OPS, scaling)
        assert (migrated["status"]["count"], migrated["status"]["state"]) == (2, "done")
        listed, _ = await kube.list(CONFIGMAP, user)
        assert sorted(o["metadata"]["name"] for o in listed if o["metadata"]["name"].startswith("sc-")) == \
            sorted(f"sc-{key}{sfx}" for key in names)
    finally:
        for res, name in ((POOL, provider), (SCALING, scaling), *((HANDLE, n) for n in names.values()),
                          (PROVIDER, provider)):
            await discard(kube, res, OPS, name)
        for name in names.values():
            await gone(kube, HANDLE, OPS, name)


async def test_migrate_needs_the_old_crds_and_lessors(kube: Gateway) -> None:
    with pytest.raises(Exception, match=r"serves no ResourceProvider in nowhere.example/v1: is Poolboy installed"):
        await make_plan(kube, "poolboy", poolboy_group="nowhere.example")


# ------------------------------------------------------------------------------------ Jumpstarter


async def test_migrating_jumpstarter_keeps_active_leases_on_their_exporters(
        kube: Gateway, namespace: str, kubeconfig: Path, tmp_path: Path) -> None:
    await install_crds(kube, DATA / "jumpstarter" / "crds.yaml")
    lab = namespace
    await make(kube, JS_CLIENT, lab, {"metadata": {"name": "alice", "labels": {"team": "qa"}},
                                      "spec": {"username": "keycloak:alice"}})
    for name, lease in (("e1", "l1"), ("e2", None)):
        status: dict[str, Any] = {"lastSeen": at(), "exporterStatus": "LeaseReady" if lease else "Available",
                                  "devices": [{"uuid": f"{name}-power"}]}
        if lease:
            status["leaseRef"] = {"name": lease}
        await make(kube, JS_EXPORTER, lab, {"metadata": {"name": name, "labels": {"board": "rpi4"}},
                                            "spec": {"username": f"keycloak:{name}"}}, status=status)
    began = at(-300)
    ready_condition = {"type": "Ready", "status": "True", "reason": "Ready", "message": "",
                       "lastTransitionTime": began}
    await make(kube, JS_LEASE, lab, {"metadata": {"name": "l1"}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}, "duration": "1h",
        "tags": {"job": "nightly"}}},
        status={"exporterRef": {"name": "e1"}, "beginTime": began, "endTime": at(3300), "ended": False,
                "conditions": [ready_condition]})
    await make(kube, JS_LEASE, lab, {"metadata": {"name": "l0"}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}, "duration": "1h"}},
        status={"ended": True, "beginTime": at(-7200), "endTime": at(-3600),
                "conditions": [{**ready_condition, "status": "False", "reason": "Expired"}]})
    await make(kube, JS_LEASE, lab, {"metadata": {"name": "l2"}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}, "duration": "30m"}})

    dry = migrate(kubeconfig, tmp_path, "jumpstarter", "--namespace", lab, "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert dry.stdout.splitlines() == [
        f"create Client {lab}/alice", f"create Exporter {lab}/e1 with its status",
        f"create Exporter {lab}/e2 with its status", f"create Lease {lab}/l0 with its status",
        f"create Lease {lab}/l1 with its status", f"create Lease {lab}/l2"]
    assert await get(kube, LEASE, lab, "l1") is None

    done = migrate(kubeconfig, tmp_path, "jumpstarter", "--namespace", lab)
    assert done.returncode == 0, done.stderr

    # The active lease keeps its exporter and its times; the pending one gets the free exporter.
    l2 = await until(kube, LEASE, lab, "l2", ready)
    assert l2["status"]["exporterRef"]["name"] == "e2"
    l1 = await kube.get(LEASE, lab, "l1")
    assert ready(l1) and l1["status"]["exporterRef"]["name"] == "e1" and l1["status"]["beginTime"] == began
    assert (await kube.get(EXPORTER, lab, "e1"))["status"]["leaseRef"]["name"] == "l1"
    assert (await kube.get(EXPORTER, lab, "e1"))["status"]["devices"] == [{"uuid": "e1-power"}]
    l0 = await kube.get(LEASE, lab, "l0")
    assert l0["status"]["ended"] is True and l0["metadata"]["labels"]["lessor.dev/lease-ended"] == "true"
    l1 = await until(kube, LEASE, lab, "l1", lambda o: "metadata.lessor.dev/job" in (o["metadata"].get("labels") or {}))
    assert l1["status"]["exporterRef"]["name"] == "e1"


async def test_migrating_keeps_poolboys_unchecked_linked_values_and_says_so(
        kube: Gateway, poolboy_namespace: str) -> None:
    """As `lessor convert` does: a provider whose parameters could refuse what another's link gives it is created
    with `trustLinkedParameterValues: true`, and the plan's notes say so."""
    pb, sfx = poolboy_namespace, uuid.uuid4().hex[:5]
    base, upper = f"lbase-{sfx}", f"lupper-{sfx}"
    await make(kube, PB_PROVIDER, pb, {"metadata": {"name": base}, "spec": {
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}},
        "parameters": [{"name": "word", "validation": {"openAPIV3Schema": {"type": "string", "enum": ["one"]}}}],
        "template": {"enable": True, "definition": {"data": {"word": "{{ word }}"}}}}})
    await make(kube, PB_PROVIDER, pb, {"metadata": {"name": upper}, "spec": {
        "parameters": [{"name": "word"}],
        "linkedResourceProviders": [{"name": base, "parameterValues": {"word": "{{ word | upper }}"}}]}})
    try:
        plan = await make_plan(kube, "poolboy", poolboy_namespace=pb, namespaces=[pb])
        [note] = [n for n in plan.notes if n.field == "spec.trustLinkedParameterValues"]
        assert (note.subject, note.verb) == (f"ResourceProvider {pb}/{base}", "changed")
        for step in plan.steps:
            if step.text.startswith("create ResourceProvider"):
                await step.run()
        assert (await kube.get(PROVIDER, OPS, base))["spec"]["trustLinkedParameterValues"] is True
        assert "trustLinkedParameterValues" not in (await kube.get(PROVIDER, OPS, upper))["spec"]
    finally:
        for name in (base, upper):
            await discard(kube, PROVIDER, OPS, name)
