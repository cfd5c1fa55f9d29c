"""Pools and claims against the real API server, with the operator's claim, pool and handle actors deciding.

Providers, pools and handles live in the shared operator namespace, so every
test names its own with a unique suffix and removes them afterwards;
created resources are real kinds: ConfigMaps, and Widgets of a small test
CRD whose status a test sets to make a resource ready or not.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import uuid
from pathlib import Path
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway, Informer, Resource, WatchEvent
from lessor.gateway.resources import CLAIM, CONFIGMAP, CRD, HANDLE, NAMESPACE, POOL, PROVIDER
from tests.polling import discard, get, gone, until
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
WIDGET = Resource("test.lessor.dev", "v1", "Widget", "widgets")
WIDGET_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "widgets.test.lessor.dev"},
    "spec": {
        "group": "test.lessor.dev", "scope": "Namespaced",
        "names": {"kind": "Widget", "plural": "widgets", "singular": "widget", "listKind": "WidgetList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "subresources": {"status": {}},
                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                          "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                          "status": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}],
    },
}


# --- helpers ---------------------------------------------------------------------------------------


class Lab:
    """Providers and pools of one test, in the operator's namespace, under unique names; removed afterwards."""

    def __init__(self, kube: Gateway) -> None:
        self.kube = kube
        self.suffix = uuid.uuid4().hex[:6]
        self.made: list[tuple[Resource, str]] = []

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    async def provider(self, base: str, **spec: Any) -> str:
        name = self.name(base)
        await self.kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider",
                                               "metadata": {"name": name}, "spec": spec})
        self.made.append((PROVIDER, name))
        return name

    async def pool(self, base: str, provider: str, template: Mapping[str, Any], *, min_available: int,
                   **spec: Any) -> str:
        name = self.name(base)
        await self.kube.create(POOL, OPS, {"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": name},
                                           "spec": {"minAvailable": min_available, **spec, "resources": [
                                               {"provider": {"name": provider}, "template": dict(template)}]}})
        self.made.append((POOL, name))
        return name

    async def clean(self) -> None:
        for resource, name in sorted(self.made, key=lambda made: made[0] is PROVIDER):  # pools first
            await discard(self.kube, resource, OPS, name)


@pytest.fixture
async def lab(kube: Gateway) -> AsyncIterator[Lab]:
    made = Lab(kube)
    yield made
    await made.clean()


@pytest.fixture(scope="session")
async def widgets(kube: Gateway) -> Resource:
    name = WIDGET_CRD["metadata"]["name"]
    await kube.apply(CRD, None, name, WIDGET_CRD)
    await until(kube, CRD, "", name, has("Established", "InitialNamesAccepted"))
    return WIDGET


def configmap_provider(**spec: Any) -> dict[str, Any]:
    """A provider of ConfigMaps in the operator's namespace, named after the handle."""
    return {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}}, **spec}


async def claim(kube: Gateway, ns: str, name: str, *resources: Mapping[str, Any], **spec: Any) -> None:
    await kube.create(CLAIM, ns, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                  "spec": {"resources": list(resources), **spec}})


def resource(provider: str | None, template: Mapping[str, Any], name: str | None = None) -> dict[str, Any]:
    entry: dict[str, Any] = {"template": dict(template)}
    if provider:
        entry["provider"] = {"name": provider}
    if name:
        entry["name"] = name
    return entry


def condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


def message(obj: Mapping[str, Any], type_: str) -> str:
    return next((c["message"] for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), "")


def has(type_: str, reason: str, status: str = "True") -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: condition(obj, type_) == (status, reason)


def ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready") == ("True", "Ready")


def counted(key: str, count: int) -> Callable[[Mapping[str, Any]], bool]:
    """A pool whose `status.resourceHandleCount.<key>` is `count`."""
    return lambda pool: ((pool.get("status") or {}).get("resourceHandleCount") or {}).get(key) == count


def handle_of(claim_obj: Mapping[str, Any]) -> str:
    return claim_obj["status"]["resourceHandle"]["name"]


def reference(claim_obj: Mapping[str, Any], index: int = 0) -> dict[str, str]:
    return claim_obj["status"]["resources"][index]["reference"]


async def pool_handles(kube: Gateway, pool: str) -> list[dict[str, Any]]:
    handles, _ = await kube.list(HANDLE, OPS)
    return [h for h in handles if (h["spec"].get("resourcePool") or {}).get("name") == pool]


def unbound(handles: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [h for h in handles if not h["spec"].get("resourceClaim") and not h["metadata"].get("deletionTimestamp")]


def stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(value: str) -> dt.datetime:
    return dt.datetime.fromisoformat(value.replace("Z", "+00:00"))


# --- rules 1, 3, 5, 8: a claim, a new handle, its resources, their state -------------------------------


async def test_a_claim_gets_its_own_handle_and_a_configmap_whose_state_it_shows(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(default={"data": {"size": "small"}}))
    await claim(kube, namespace, "c1", resource(env, {"data": {"owner": "alice"}}, name="environment"))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    assert condition(got, "Valid") == ("True", "Valid") and condition(got, "Bound") == ("True", "Bound")
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["metadata"]["generateName"] == "guid-"
    assert handle["spec"]["resourceClaim"] == {"name": "c1", "namespace": namespace}
    guid = handle["metadata"]["name"].removeprefix("guid-")
    ref = reference(got)
    assert ref == {"apiVersion": "v1", "kind": "ConfigMap", "name": f"guid0-{guid}", "namespace": OPS}
    cm = await kube.get(CONFIGMAP, OPS, ref["name"])
    assert cm["data"] == {"size": "small", "owner": "alice"}  # the provider's default under the claim's template
    labels = cm["metadata"]["labels"]
    assert labels["lessor.dev/resource-handle-name"] == handle["metadata"]["name"]
    assert labels["lessor.dev/resource-claim-name"] == "c1"
    assert labels["lessor.dev/resource-claim-namespace"] == namespace
    assert labels["lessor.dev/resource-provider-name"] == env
    state = got["status"]["resources"][0]["state"]
    assert state["data"] == cm["data"] and "managedFields" not in state["metadata"]
    assert got["status"]["resources"][0]["name"] == "environment"


async def test_a_provider_is_chosen_by_its_match_and_none_or_several_is_a_clear_error(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    flavour = f"f{lab.suffix}"
    match = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"flavour": flavour}}
    first = await lab.provider("first", **configmap_provider(match=match))
    await claim(kube, namespace, "one", resource(None, {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "data": {"flavour": flavour}}))
    got = await until(kube, CLAIM, namespace, "one", ready)
    assert got["status"]["resources"][0]["provider"]["name"] == first

    await claim(kube, namespace, "nobody", resource(None, {"data": {"flavour": f"other{lab.suffix}"}}))
    got = await until(kube, CLAIM, namespace, "nobody", has("Valid", "ProviderNotFound", "False"))
    assert "spec.resources[0].provider: no ResourceProvider's match fits" in got["status"]["resources"][0][
        "validationError"]
    assert condition(got, "Bound") == ("False", "NotValid")

    second = await lab.provider("second", **configmap_provider(match=match))
    await claim(kube, namespace, "two", resource(None, {"apiVersion": "v1", "kind": "ConfigMap",
                                                         "data": {"flavour": flavour}}))
    got = await until(kube, CLAIM, namespace, "two", has("Valid", "ProviderAmbiguous", "False"))
    assert f"ResourceProviders {first}, {second}; name one in provider.name" in message(got, "Valid")
    assert "resourceHandle" not in got["status"]


async def test_a_claim_waiting_for_its_provider_binds_once_the_provider_exists(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    await claim(kube, namespace, "early", resource(lab.name("late"), {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "early", has("Valid", "ProviderNotFound", "False"))
    assert f"there is no ResourceProvider {lab.name('late')}" in got["status"]["resources"][0]["validationError"]
    await lab.provider("late", **configmap_provider())
    await until(kube, CLAIM, namespace, "early", ready)


async def test_a_bound_claim_judged_without_its_provider_heals_when_the_provider_exists_again(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    """Level-based: a bound claim judged while its provider was missing (deleted, or not yet in lessor's view,
    as after a migration) is judged again when the provider comes; it does not show the error for good."""
    filters = {"updateFilters": [{"pathMatch": "/data/.*"}]}
    env = await lab.provider("back", **configmap_provider(**filters))
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small"}}))
    cm_name = reference(await until(kube, CLAIM, namespace, "c1", ready))["name"]
    await discard(kube, PROVIDER, OPS, env)
    await gone(kube, PROVIDER, OPS, env)
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "large"}}}]}})
    await until(kube, CLAIM, namespace, "c1", has("Valid", "ProviderNotFound", "False"))
    await lab.provider("back", **configmap_provider(**filters))
    await until(kube, CLAIM, namespace, "c1", has("Valid", "Valid"))
    await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"]["size"] == "large")


async def test_every_validation_error_is_reported_at_its_field(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(
        default={"data": {"size": "small"}},
        validation={
            "openAPIV3Schema": {"type": "object", "properties": {"data": {"type": "object", "properties": {
                "size": {"type": "string", "enum": ["small", "large"]}}}}},
            "checks": [{"name": "a large one needs a reason",
                        "check": "data.size != 'large' or (data.reason | default('') | length) > 0"}],
        }))
    await claim(kube, namespace, "huge", resource(env, {"data": {"size": "huge"}}),
                resource(env, {"data": {"size": "large"}}))
    got = await until(kube, CLAIM, namespace, "huge", has("Valid", "SchemaViolation", "False"))
    errors = [r.get("validationError", "") for r in got["status"]["resources"]]
    assert errors[0].startswith("spec.resources[0].template/data/size: 'huge' is not one of ['small', 'large']")
    assert errors[1] == "spec.resources[1].template: check 'a large one needs a reason' failed"
    assert all(e in message(got, "Valid") for e in errors)
    handles, _ = await kube.list(HANDLE, OPS)
    assert not [h for h in handles if h["spec"].get("resourceClaim", {}).get("namespace") == namespace]


# --- security: where, what and which fields ------------------------------------------------------------


async def test_a_claim_cannot_place_name_relabel_or_rekind_its_resource(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    await claim(kube, namespace, "sneaky", resource(env, {
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {"namespace": namespace, "name": "kube-root-ca.crt",
                     "labels": {"lessor.dev/resource-handle-name": "someone-else"}},
        "data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "sneaky", has("Valid", "Forbidden", "False"))
    error = got["status"]["resources"][0]["validationError"]
    for field in ("template/metadata/namespace", "template/metadata/name", "template/kind",
                  "template/metadata/labels/lessor.dev~1resource-handle-name"):
        assert f"spec.resources[0].{field}: " in error
    assert "resourceHandle" not in got["status"]
    # nothing was created in the claim's namespace, nor was the namespace's own ConfigMap touched
    configmaps, _ = await kube.list(CONFIGMAP, namespace)
    assert all("lessor.dev/resource-handle-name" not in (c["metadata"].get("labels") or {}) for c in configmaps)


async def test_resources_go_where_the_provider_puts_them_never_where_the_claim_says(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    elsewhere = await lab.provider("elsewhere", override={
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": namespace, "name": "env-{{ resource_handle.metadata.name }}"}},
        template={"enable": True})
    await claim(kube, namespace, "c1", resource(elsewhere, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    assert reference(got) == {"apiVersion": "v1", "kind": "ConfigMap", "namespace": namespace,
                              "name": f"env-{handle_of(got)}"}
    plain = await lab.provider("plain", **configmap_provider(override={"apiVersion": "v1", "kind": "ConfigMap"}))
    await claim(kube, namespace, "c2", resource(plain, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c2", ready)
    assert reference(got)["namespace"] == OPS  # no namespace in the override: the operator's


async def test_a_long_claim_name_is_an_annotation_only(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    name = "c" * 70
    await claim(kube, namespace, name, resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, name, ready)
    cm = await kube.get(CONFIGMAP, OPS, reference(got)["name"])
    assert cm["metadata"]["annotations"]["lessor.dev/resource-claim-name"] == name
    assert "lessor.dev/resource-claim-name" not in cm["metadata"]["labels"]
    assert cm["metadata"]["labels"]["lessor.dev/resource-claim-namespace"] == namespace


# --- rule 5: templates that fail ------------------------------------------------------------------------


async def test_an_override_that_fails_to_render_is_a_condition_with_the_error(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    broken = await lab.provider("broken", template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap",
        "data": {"when": "{{ resource_claim.spec.nothing.deeper }}", "fine": "{{ 1 + 1 }}"}})
    await claim(kube, namespace, "c1", resource(broken, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", has("Ready", "TemplateError", "False"))
    assert condition(got, "Valid") == ("True", "Valid") and condition(got, "Bound") == ("True", "Bound")
    assert "spec.resources[0]: ResourceProvider" in message(got, "Ready")
    assert "/spec/override/data/when" in message(got, "Ready")
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert condition(handle, "Rendered") == ("False", "TemplateError")


# --- rule 8: state and readiness of a real custom resource ----------------------------------------------


async def handle_row(kube: Gateway, name: str) -> dict[str, Any]:
    """A handle's row in `kubectl get rh -o wide`, as the API server's Table view renders it."""
    got = await kube.request("list", HANDLE.kind, "GET", HANDLE.path(OPS),
                             accept="application/json;as=Table;v=v1;g=meta.k8s.io")
    columns = [c["name"] for c in got["columnDefinitions"]]
    return next(dict(zip(columns, row["cells"], strict=True)) for row in got["rows"] if row["cells"][0] == name)


async def test_ready_follows_the_state_of_the_created_resource(
        kube: Gateway, namespace: str, lab: Lab, widgets: Resource) -> None:
    gadget = await lab.provider("gadget", override={"apiVersion": "test.lessor.dev/v1", "kind": "Widget"},
                                readinessCheck="status is defined and status.phase == 'Running'")
    await claim(kube, namespace, "w", resource(gadget, {"spec": {"colour": "red"}}))
    # Not ready before the Widget exists too (its CRD's storage may still be starting): wait until the
    # claim reports the created Widget itself, not "not created yet".
    got = await until(kube, CLAIM, namespace, "w", lambda c: has("Ready", "ResourcesNotReady", "False")(c)
                      and "reference" in ((c.get("status") or {}).get("resources") or [{}])[0]
                      and "not created yet" not in message(c, "Ready"))
    ref = reference(got)
    assert (ref["apiVersion"], ref["kind"], ref["namespace"]) == ("test.lessor.dev/v1", "Widget", OPS)
    assert "spec.resources[0] (" in message(got, "Ready") and "readinessCheck is false" in message(got, "Ready")
    waiting_for = (await handle_row(kube, handle_of(got)))["Waiting For"]  # what `kubectl get rh` says
    assert waiting_for and waiting_for == (await kube.get(HANDLE, OPS, handle_of(got)))["status"]["resources"][0]["name"]
    await kube.patch_status(widgets, OPS, ref["name"], {"phase": "Running", "detail": "up"})
    got = await until(kube, CLAIM, namespace, "w", ready)
    handle = await until(kube, HANDLE, OPS, handle_of(got), lambda h: (h.get("status") or {}).get("ready") is True)
    assert not (await handle_row(kube, handle["metadata"]["name"]))["Waiting For"]
    assert got["status"]["resources"][0]["state"]["status"] == {"phase": "Running", "detail": "up"}
    assert got["status"]["lifespan"]["firstReady"]
    await kube.patch_status(widgets, OPS, ref["name"], {"phase": "Degraded"})
    got = await until(kube, CLAIM, namespace, "w", has("Ready", "ResourcesNotReady", "False"))
    assert got["status"]["resources"][0]["state"]["status"]["phase"] == "Degraded"


async def test_without_a_readiness_check_a_ready_condition_decides(
        kube: Gateway, namespace: str, lab: Lab, widgets: Resource) -> None:
    gadget = await lab.provider("gadget", override={"apiVersion": "test.lessor.dev/v1", "kind": "Widget"})
    await claim(kube, namespace, "w", resource(gadget, {"spec": {"colour": "blue"}}))
    got = await until(kube, CLAIM, namespace, "w", ready)  # no conditions at all: ready once it exists
    name = reference(got)["name"]
    await kube.patch_status(widgets, OPS, name, {"conditions": [
        {"type": "Ready", "status": "False", "reason": "Warming", "message": "fans spinning up"}]})
    got = await until(kube, CLAIM, namespace, "w", has("Ready", "ResourcesNotReady", "False"))
    assert "Ready is False (Warming): fans spinning up" in message(got, "Ready")


async def test_a_created_resource_deleted_behind_the_operators_back_is_made_again(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    name = reference(got)["name"]
    first = await kube.get(CONFIGMAP, OPS, name)
    await kube.delete(CONFIGMAP, OPS, name)
    again = await until(kube, CONFIGMAP, OPS, name, lambda o: o["metadata"]["uid"] != first["metadata"]["uid"])
    assert again["data"] == {"a": "b"}


# --- rules 2 and 6: pools and binding -------------------------------------------------------------------


async def test_a_matching_claim_takes_a_pool_handle_and_the_pool_replenishes(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(
        default={"data": {"size": "small"}}, matchIgnore=["/data/owner"]))
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=2)
    await until(kube, POOL, OPS, pool, counted("ready", 2))
    before = {h["metadata"]["name"] for h in await pool_handles(kube, pool)}
    # equal but at an ignored path: a pool handle, which takes the claim's value there
    await claim(kube, namespace, "fits", resource(env, {"data": {"owner": "alice"}}))
    got = await until(kube, CLAIM, namespace, "fits", ready)
    assert handle_of(got) in before
    assert "from ResourcePool " + pool in message(got, "Bound")
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["spec"]["resourcePool"]["name"] == pool
    assert handle["spec"]["resources"][0]["template"]["data"] == {"size": "small", "owner": "alice"}
    cm = await until(kube, CONFIGMAP, OPS, reference(got)["name"],
                     lambda c: c["metadata"]["labels"].get("lessor.dev/resource-claim-name") == "fits")
    assert cm["data"] == {"size": "small", "owner": "alice"}
    assert cm["metadata"]["labels"]["lessor.dev/resource-pool-name"] == pool
    # different where it matters: a handle of its own
    await claim(kube, namespace, "bigger", resource(env, {"data": {"size": "large"}}))
    got = await until(kube, CLAIM, namespace, "bigger", ready)
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert "resourcePool" not in handle["spec"]
    status = (await until(kube, POOL, OPS, pool, lambda p: p["status"]["resourceHandleCount"] == {
        "available": 2, "ready": 2}))["status"]
    names = {h["name"] for h in status["resourceHandles"]}
    assert len(names) == 2 and handle_of(await kube.get(CLAIM, namespace, "fits")) not in names


class Writes:
    """The writes to one provider's handles and ConfigMaps and to one namespace's claims, told from their watch
    events (a watch shows every write that changed something): (kind, name, what) with `what` "create",
    "status" (the status alone changed) or "spec" (anything else). Only those made while `counting`."""

    def __init__(self, kubeconfig: Path, provider: str, namespace: str) -> None:
        self.kubeconfig = kubeconfig
        self.provider = provider
        self.seen: dict[tuple[str, str], Mapping[str, Any]] = {}
        self.made: list[tuple[str, str, str]] = []
        self.counting = False
        self.namespace = namespace

    def _on(self, event: WatchEvent) -> None:
        obj = event.object
        kind, name = obj.get("kind") or "", obj["metadata"]["name"]
        if kind == "ResourceHandle" and not any((r.get("provider") or {}).get("name") == self.provider
                                                for r in obj["spec"].get("resources") or ()):
            return
        before = self.seen.get((kind, name))
        self.seen[(kind, name)] = obj
        if not self.counting or event.type == "DELETED":
            return
        if before is None:
            what = "create"
        else:
            rest = [key for key in obj.keys() | before.keys() if key not in ("status", "metadata")]
            same = all(obj.get(key) == before.get(key) for key in rest) and \
                {k: v for k, v in obj["metadata"].items() if k not in ("resourceVersion", "generation",
                                                                      "managedFields")} == \
                {k: v for k, v in before["metadata"].items() if k not in ("resourceVersion", "generation",
                                                                         "managedFields")}
            what = "status" if same else "spec"
        self.made.append((kind, name, what))

    async def __aenter__(self) -> Writes:
        # its own connection, closed at the end: the watches never hold the tests' shared one
        self.gateway = await Gateway.connect(str(self.kubeconfig))
        informers = [
            Informer(self.gateway, HANDLE, self._on, namespace=OPS),
            Informer(self.gateway, CONFIGMAP, self._on, namespace=OPS,
                     label_selector=f"lessor.dev/resource-provider-name={self.provider}"),
            Informer(self.gateway, CLAIM, self._on, namespace=self.namespace),
        ]
        self.task = asyncio.gather(*(informer.run() for informer in informers))
        for informer in informers:
            await informer.synced.wait()
        self.counting = True
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.task.cancel()
        await asyncio.gather(self.task, return_exceptions=True)
        await self.gateway.close()

    def by_kind(self) -> dict[str, list[str]]:
        found: dict[str, list[str]] = {}
        for kind, _, what in self.made:
            found.setdefault(kind, []).append(what)
        return {kind: sorted(whats) for kind, whats in found.items()}


async def test_a_pooled_claim_costs_seven_writes_and_a_claim_with_its_own_handle_four(
        kube: Gateway, kubeconfig: Path, namespace: str, lab: Lab) -> None:
    """Issue 25's write budget, seen from the API server's watch. A pooled claim: the binding, the resource's
    update with the claim's values and labels, the handle's status on it, the claim's one status; and the
    pool's replacement: its handle, its resource, the handle's first status (the pool's readiness and the
    resource's reference are read there). A claim the pool cannot serve: its handle, created with the
    resource's reference, the resource, the handle's status, the claim's status; no spec write of the handle."""
    env = await lab.provider("env", **configmap_provider(
        default={"data": {"size": "small"}}, matchIgnore=["/data/owner"]))
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=1)
    await until(kube, POOL, OPS, pool, counted("ready", 1))
    async with Writes(kubeconfig, env, namespace) as writes:
        await claim(kube, namespace, "pooled", resource(env, {"data": {"owner": "alice"}}))
        got = await until(kube, CLAIM, namespace, "pooled", ready)
        await until(kube, POOL, OPS, pool, lambda p: counted("ready", 1)(p) and handle_of(got) not in {
            h["name"] for h in p["status"]["resourceHandles"]})
        await asyncio.sleep(scaled(1.0))  # a write that trails would show by now
    assert writes.by_kind() == {"ResourceClaim": ["create", "status"],  # the test's create, the operator's status
                                "ResourceHandle": ["create", "spec", "status", "status"],
                                "ConfigMap": ["create", "spec"]}, writes.made

    async with Writes(kubeconfig, env, namespace) as writes:
        await claim(kube, namespace, "own", resource(env, {"data": {"size": "large"}}))
        got = await until(kube, CLAIM, namespace, "own", ready)
        await asyncio.sleep(scaled(1.0))
    assert writes.by_kind() == {"ResourceClaim": ["create", "status"],
                                "ResourceHandle": ["create", "status"],
                                "ConfigMap": ["create"]}, writes.made
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["spec"]["resources"][0]["reference"] == reference(got)  # in the spec, as the contract has it
    assert handle["metadata"]["generateName"] == "guid-"
    assert reference(got)["name"] == "guid0-" + handle["metadata"]["name"].removeprefix("guid-")


async def test_many_claims_at_once_never_share_a_handle_nor_hold_two(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"kind": "env"}}, min_available=10)
    await until(kube, POOL, OPS, pool, counted("ready", 10))
    names = [f"c{i:02d}" for i in range(40)]
    await asyncio.gather(*(claim(kube, namespace, n, resource(env, {"data": {"kind": "env"}})) for n in names))
    claims = [await until(kube, CLAIM, namespace, n, ready, timeout=60) for n in names]
    handles = [handle_of(c) for c in claims]
    assert len(set(handles)) == len(names), "two claims on one handle"
    mine = [h for h in (await kube.list(HANDLE, OPS))[0]
            if (h["spec"].get("resourceClaim") or {}).get("namespace") == namespace]
    assert sorted(h["metadata"]["name"] for h in mine) == sorted(handles), "a claim with two handles"
    from_pool = [h for h in mine if h["spec"].get("resourcePool")]
    assert len(from_pool) >= 10
    deadline = time.monotonic() + scaled(30)
    while len(unbound(await pool_handles(kube, pool))) != 10:  # replenished: ten unbound handles again
        assert time.monotonic() < deadline, "the pool did not get back to minAvailable"
        await asyncio.sleep(0.2)
    await until(kube, POOL, OPS, pool, lambda p: p["status"]["resourceHandleCount"]["available"] == 10
                and not set(handles) & {h["name"] for h in p["status"]["resourceHandles"]})


async def test_a_pool_handle_of_a_resource_requiring_a_claim_creates_nothing_until_bound(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", resourceRequiresClaim=True, template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS},
        "data": {"for": "{{ resource_claim.metadata.namespace }}/{{ resource_claim.metadata.name }}"}})
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=1)
    await until(kube, POOL, OPS, pool, counted("available", 1))
    [waiting] = await pool_handles(kube, pool)
    await until(kube, HANDLE, OPS, waiting["metadata"]["name"], lambda h: condition(h, "Rendered") is not None)
    selector = f"lessor.dev/resource-handle-name={waiting['metadata']['name']}"
    configmaps, _ = await kube.list(CONFIGMAP, OPS, label_selector=selector)
    assert configmaps == []
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    assert handle_of(got) == waiting["metadata"]["name"]
    cm = await kube.get(CONFIGMAP, OPS, reference(got)["name"])
    assert cm["data"] == {"size": "small", "for": f"{namespace}/c1"}


# --- rule 7: lifespan -------------------------------------------------------------------------------------


async def test_at_the_end_the_resources_go_then_the_handle_then_the_claim(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(lifespan={"default": "3s"}))
    await claim(kube, namespace, "short", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "short", ready)
    lifespan = got["status"]["lifespan"]
    end, first_ready = parse(lifespan["end"]), parse(lifespan["firstReady"])
    # the default runs from the first Ready, so provisioning time is not taken from it
    assert parse(lifespan["start"]) <= first_ready and end - first_ready == dt.timedelta(seconds=3)
    handle, cm = handle_of(got), reference(got)["name"]
    deadline = time.monotonic() + scaled(20)
    while time.monotonic() < deadline:  # read in the reverse order of deletion: a later read sees earlier deletions
        claim_left = await get(kube, CLAIM, namespace, "short")
        handle_left = await get(kube, HANDLE, OPS, handle)
        cm_left = await get(kube, CONFIGMAP, OPS, cm)
        assert claim_left is not None or handle_left is None, "the claim went before its handle"
        assert handle_left is not None or cm_left is None, "the handle went before its ConfigMap"
        if claim_left is None:
            break
        assert dt.datetime.now(dt.UTC) < end + dt.timedelta(seconds=scaled(10))
        await asyncio.sleep(0.05)
    assert claim_left is None and dt.datetime.now(dt.UTC) >= end


async def test_a_requested_end_beyond_the_limits_is_clamped_and_the_claim_says_so(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(lifespan={"maximum": "2h", "relativeMaximum": "1h"}))
    asked = stamp(dt.datetime.now(dt.UTC) + dt.timedelta(days=1))
    await claim(kube, namespace, "long", resource(env, {"data": {"a": "b"}}), lifespan={"end": asked})
    got = await until(kube, CLAIM, namespace, "long", ready)
    lifespan = got["status"]["lifespan"]
    end = parse(lifespan["end"])
    assert abs(end - (dt.datetime.now(dt.UTC) + dt.timedelta(hours=1))) < dt.timedelta(seconds=30)  # the earlier limit
    assert (lifespan["maximum"], lifespan["relativeMaximum"]) == ("2h", "1h")
    clamped = f"spec.lifespan.end {asked} is later than allowed by the relativeMaximum 1h from now"
    assert clamped in message(got, "Bound")
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["spec"]["lifespan"]["end"] == lifespan["end"]
    # asking for less is honoured as asked
    sooner = stamp(dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30))
    await kube.merge_patch(CLAIM, namespace, "long", {"spec": {"lifespan": {"end": sooner}}})
    got = await until(kube, CLAIM, namespace, "long", lambda c: c["status"]["lifespan"].get("end") == sooner)
    assert "later than allowed" not in message(got, "Bound")


async def test_a_handle_for_several_providers_takes_the_least_of_each_setting(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    lax = await lab.provider("lax", **configmap_provider(lifespan={"default": "2h", "maximum": "8h"}))
    strict = await lab.provider("strict", **configmap_provider(lifespan={"default": "3h", "maximum": "1h"}))
    await claim(kube, namespace, "both", resource(lax, {"data": {"a": "b"}}, name="one"),
                resource(strict, {"data": {"c": "d"}}, name="two"))
    got = await until(kube, CLAIM, namespace, "both", ready)
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert {k: v for k, v in handle["spec"]["lifespan"].items() if k != "end"} == {"default": "2h", "maximum": "1h"}
    lifespan = got["status"]["lifespan"]
    assert parse(lifespan["end"]) - parse(lifespan["start"]) <= dt.timedelta(hours=1)
    assert [r["name"] for r in got["status"]["resources"]] == ["one", "two"]
    assert reference(got, 0)["name"] != reference(got, 1)["name"]


async def test_unclaimed_pool_handles_are_replaced(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"a": "b"}}, min_available=2, lifespan={"unclaimed": "3s"})
    first = await until(kube, POOL, OPS, pool, lambda p: len((p.get("status") or {}).get("resourceHandles") or ()) == 2)
    old = {h["name"] for h in first["status"]["resourceHandles"]}
    later = await until(kube, POOL, OPS, pool, lambda p: len(p["status"]["resourceHandles"]) == 2 and not old & {
        h["name"] for h in p["status"]["resourceHandles"]}, timeout=30)
    assert later["status"]["resourceHandleCount"]["available"] == 2
    for name in old:
        await gone(kube, HANDLE, OPS, name)
        assert (await kube.list(CONFIGMAP, OPS, label_selector=f"lessor.dev/resource-handle-name={name}"))[0] == []


async def test_deleting_a_claim_deletes_its_handle_and_resources(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    await kube.delete(CLAIM, namespace, "c1")
    await gone(kube, HANDLE, OPS, handle_of(got))
    await gone(kube, CONFIGMAP, OPS, reference(got)["name"])


async def test_a_handle_deleted_before_the_end_takes_its_resources_and_is_replaced(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    old_handle, old_cm = handle_of(got), reference(got)["name"]
    await kube.delete(HANDLE, OPS, old_handle)
    got = await until(kube, CLAIM, namespace, "c1", lambda c: ready(c) and handle_of(c) != old_handle)
    await gone(kube, CONFIGMAP, OPS, old_cm)
    assert (await kube.get(CONFIGMAP, OPS, reference(got)["name"]))["data"] == {"a": "b"}


async def test_deleting_a_pool_deletes_only_its_unbound_handles(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"a": "b"}}, min_available=2)
    await until(kube, POOL, OPS, pool, counted("ready", 2))
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    bound = handle_of(got)
    handles = await until(kube, POOL, OPS, pool, lambda p: p["status"]["resourceHandleCount"]["available"] == 2
                          and bound not in {h["name"] for h in p["status"]["resourceHandles"]})
    free = [h["name"] for h in handles["status"]["resourceHandles"]]
    await kube.delete(POOL, OPS, pool)
    for name in free:
        await gone(kube, HANDLE, OPS, name)
    assert (await kube.get(HANDLE, OPS, bound))["spec"]["resourceClaim"]["name"] == "c1"
    assert ready(await kube.get(CLAIM, namespace, "c1"))
    assert await get(kube, CONFIGMAP, OPS, reference(got)["name"]) is not None


# --- rule 4: updates ------------------------------------------------------------------------------------


async def test_allowed_updates_reach_the_resource_and_refused_ones_are_reported(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(
        updateFilters=[{"pathMatch": "/data/size", "allowedOps": ["replace"]}],
        validation={"openAPIV3Schema": {"type": "object", "properties": {"data": {"type": "object", "properties": {
            "size": {"type": "string", "enum": ["small", "large"]}}}}}}))
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small", "owner": "alice"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    cm_name = reference(got)["name"]
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "large", "owner": "mallory", "extra": "x"}}}]}})
    got = await until(kube, CLAIM, namespace, "c1", has("Valid", "UpdateRefused", "False"))
    refused = got["status"]["resources"][0]["validationError"]
    assert "spec.resources[0].template/data/owner: replace is not allowed by ResourceProvider" in refused
    assert "spec.resources[0].template/data/extra: add is not allowed by ResourceProvider" in refused
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"]["size"] == "large")
    assert cm["data"] == {"size": "large", "owner": "alice"}
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert handle["spec"]["resources"][0]["template"]["data"] == {"size": "large", "owner": "alice"}
    await until(kube, CLAIM, namespace, "c1", lambda c: c["status"]["resources"][0]["state"]["data"]["size"] == "large")
    # an allowed path with a value the schema refuses: refused as a whole, the resource keeps its value
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "huge", "owner": "alice"}}}]}})
    got = await until(kube, CLAIM, namespace, "c1", lambda c: "huge" in message(c, "Valid"))
    assert condition(got, "Valid") == ("False", "SchemaViolation")
    # taking the refused changes back makes the claim valid again
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "large", "owner": "alice"}}}]}})
    await until(kube, CLAIM, namespace, "c1", has("Valid", "Valid"))
    assert (await kube.get(CONFIGMAP, OPS, cm_name))["data"] == {"size": "large", "owner": "alice"}


async def test_a_field_an_allowed_update_removes_leaves_the_created_resource(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    """The fields a create set are lessor's to remove later, although they were set by a create, not an apply."""
    env = await lab.provider("env", **configmap_provider(
        updateFilters=[{"pathMatch": "/data/extra", "allowedOps": ["add", "remove"]}]))
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small", "extra": "x"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    cm_name = reference(got)["name"]
    assert (await kube.get(CONFIGMAP, OPS, cm_name))["data"] == {"size": "small", "extra": "x"}
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "small"}}}]}})
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: "extra" not in c["data"])
    assert cm["data"] == {"size": "small"}
    # and added back, then removed again: every apply owns what it set
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "small", "extra": "y"}}}]}})
    await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"].get("extra") == "y")
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "small"}}}]}})
    await until(kube, CONFIGMAP, OPS, cm_name, lambda c: "extra" not in c["data"])
    managers = {(m["manager"], m["operation"]) for m in (await kube.get(CONFIGMAP, OPS, cm_name))["metadata"]["managedFields"]}
    assert ("lessor", "Update") not in managers, managers


async def test_a_field_removed_from_the_handle_while_its_actor_was_down_goes_from_the_resource(
        kube: Gateway, namespace: str, lab: Lab, operator: Any) -> None:
    """The handle's actor restarted (a crash, lessor's restart) after its claim's update reached the handle and
    before the update's apply: the new incarnation, which never applied the field, still removes it."""
    env = await lab.provider("env", **configmap_provider(
        updateFilters=[{"pathMatch": "/data/extra", "allowedOps": ["add", "remove"]}]))
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small", "extra": "x"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    cm_name, handle, address = reference(got)["name"], handle_of(got), f"handle/{OPS}/{handle_of(got)}"
    operator.system.stop(address)  # its next message, the handle's change, starts a new incarnation
    await until(kube, CLAIM, namespace, "c1", lambda _: address not in operator.system.live("handle"))
    # As the claim's actor writes the update into the handle (the claim itself has nothing for its actor to do).
    await kube.json_patch(HANDLE, OPS, handle, [{"op": "remove", "path": "/spec/resources/0/template/data/extra"}])
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: "extra" not in c["data"])
    assert cm["data"] == {"size": "small"}


async def test_a_created_field_kept_by_the_first_update_is_still_removed_by_a_later_one(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    """An update that keeps every field the create set hands nothing over (a write saved); the one that later
    leaves a created field out still removes it."""
    env = await lab.provider("env", **configmap_provider(
        updateFilters=[{"pathMatch": "/data/(extra|more)", "allowedOps": ["add", "remove", "replace"]}]))
    await claim(kube, namespace, "c1", resource(env, {"data": {"size": "small", "extra": "x"}}))
    cm_name = reference(await until(kube, CLAIM, namespace, "c1", ready))["name"]
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "small", "extra": "x", "more": "y"}}}]}})
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"].get("more") == "y")
    assert ("lessor", "Update") in {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]}
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"size": "small"}}}]}})
    cm = await until(kube, CONFIGMAP, OPS, cm_name, lambda c: c["data"] == {"size": "small"})
    assert ("lessor", "Update") not in {(m["manager"], m["operation"]) for m in cm["metadata"]["managedFields"]}


async def test_a_bound_claim_cannot_change_the_kind_or_add_resources(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider(updateFilters=[{"pathMatch": ".*"}]))
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"kind": "Secret", "data": {"a": "b"}}}]}})
    got = await until(kube, CLAIM, namespace, "c1", has("Valid", "Forbidden", "False"))
    assert "spec.resources[0].template/kind: ResourceProvider" in message(got, "Valid")
    await kube.merge_patch(CLAIM, namespace, "c1", {"spec": {"resources": [
        {"provider": {"name": env}, "template": {"data": {"a": "b"}}},
        {"provider": {"name": env}, "template": {"data": {"c": "d"}}}]}})
    got = await until(kube, CLAIM, namespace, "c1", has("Valid", "UpdateRefused", "False"))
    assert "resources cannot be added or removed once the claim is bound" in message(got, "Valid")
    assert (await kube.get(CONFIGMAP, OPS, reference(got)["name"]))["kind"] == "ConfigMap"


# --- rule 3: an existing resource never changes kind ----------------------------------------------------


async def test_a_provider_change_that_would_change_the_kind_is_refused(
        kube: Gateway, namespace: str, lab: Lab, widgets: Resource) -> None:
    env = await lab.provider("env", **configmap_provider())
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", ready)
    ref = reference(got)
    await kube.merge_patch(PROVIDER, OPS, env, {"spec": {"override": {"apiVersion": "test.lessor.dev/v1",
                                                                      "kind": "Widget"}}})
    got = await until(kube, CLAIM, namespace, "c1", has("Ready", "KindChangeRefused", "False"))
    assert "an existing resource's apiVersion and kind cannot change" in message(got, "Ready")
    handle = await kube.get(HANDLE, OPS, handle_of(got))
    assert condition(handle, "Rendered") == ("False", "KindChangeRefused")
    assert (await kube.get(CONFIGMAP, OPS, ref["name"]))["data"] == {"a": "b"}
    assert await get(kube, widgets, OPS, ref["name"]) is None


# --- bad input becomes a condition, never a crash -----------------------------------------------------


async def test_a_broken_provider_is_named_with_its_field(kube: Gateway, namespace: str, lab: Lab) -> None:
    broken = await lab.provider("broken", **configmap_provider(matchIgnore=["("]))
    await claim(kube, namespace, "c1", resource(broken, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", has("Valid", "ProviderInvalid", "False"))
    assert f"ResourceProvider {broken} is invalid: spec.matchIgnore[0]: invalid regular expression" in message(
        got, "Valid")


async def test_a_resource_the_api_server_refuses_is_reported_and_retried(
        kube: Gateway, namespace: str, lab: Lab) -> None:
    target = f"later-{lab.suffix}"
    env = await lab.provider("env", override={"apiVersion": "v1", "kind": "ConfigMap",
                                              "metadata": {"namespace": target}})
    await claim(kube, namespace, "c1", resource(env, {"data": {"a": "b"}}))
    got = await until(kube, CLAIM, namespace, "c1", has("Ready", "ApplyFailed", "False"))
    assert f"ConfigMap {target}/guid0-" in message(got, "Ready")
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": target}})
    try:
        got = await until(kube, CLAIM, namespace, "c1", ready)
        assert reference(got)["namespace"] == target
    finally:
        await kube.delete(NAMESPACE, None, target)


async def test_a_claim_with_a_start_in_the_future_waits_for_it(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    start = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=3)
    await claim(kube, namespace, "later", resource(env, {"data": {"a": "b"}}), lifespan={"start": stamp(start)})
    got = await until(kube, CLAIM, namespace, "later", has("Bound", "Scheduled", "False"))
    assert "resourceHandle" not in got["status"]
    got = await until(kube, CLAIM, namespace, "later", ready)
    assert parse(got["status"]["lifespan"]["start"]) >= start


async def test_a_pool_keeps_at_most_max_unready_handles_not_ready(
        kube: Gateway, namespace: str, lab: Lab, widgets: Resource) -> None:
    gadget = await lab.provider("gadget", override={"apiVersion": "test.lessor.dev/v1", "kind": "Widget"},
                                readinessCheck="status is defined and status.phase == 'Running'")
    pool = await lab.pool("gadgets", gadget, {"spec": {"colour": "red"}}, min_available=3, maxUnready=1)
    for expected in (1, 2, 3):
        status = (await until(kube, POOL, OPS, pool, counted("available", expected)))["status"]
        await asyncio.sleep(scaled(0.5))  # and no more than that while one is not ready
        assert len(await pool_handles(kube, pool)) == expected
        waiting = [h["name"] for h in status["resourceHandles"] if not h["ready"]]
        assert len(waiting) == 1
        handle = await until(kube, HANDLE, OPS, waiting[0], lambda h: bool((h.get("status") or {}).get("resources")))
        widget = handle["status"]["resources"][0]["reference"]["name"]
        await kube.patch_status(widgets, OPS, widget, {"phase": "Running"})
    await until(kube, POOL, OPS, pool, lambda p: p["status"]["resourceHandleCount"] == {"available": 3, "ready": 3})
