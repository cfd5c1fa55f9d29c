"""Porting by changing apiVersion: Poolboy's and the Jumpstarter controller's sample manifests
(tests/porting/data/) work on lessor against the real API server, created with strict field validation as
`kubectl apply` does, so a field lessor's CRDs do not accept fails the test."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import (
    CLAIM, CLIENT, CONFIGMAP, EXPORTER, HANDLE, LEASE, NAMESPACE, POLICY, POOL, PROVIDER,
)
from tests.polling import discard, get, gone, until

pytestmark = pytest.mark.usefixtures("operator")
DATA = Path(__file__).parent / "data"
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
KINDS = {r.kind: r for r in (CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER)}


def samples(name: str) -> list[dict[str, Any]]:
    return [doc for doc in yaml.safe_load_all((DATA / name).read_text()) if doc]


def ported(doc: Mapping[str, Any], namespaces: Mapping[str, str]) -> dict[str, Any]:
    """The manifest with lessor's apiVersion; `namespaces` maps the sample's namespaces to this test's
    (and Poolboy's `poolboy` to lessor's operator namespace), wherever a namespace is named."""
    text = yaml.safe_dump(dict(doc))
    for old, new in namespaces.items():
        text = text.replace(f"namespace: {old}\n", f"namespace: {new}\n")
    obj = yaml.safe_load(text)
    obj["apiVersion"] = API
    return obj


async def create_strict(kube: Gateway, res: Resource, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create as `kubectl apply` does: an unknown field is an error, not silently dropped."""
    body = {key: value for key, value in body.items() if key != "status"}
    return await kube.request("create", res.kind, "POST", res.path(namespace), body=body,
                              params={"fieldValidation": "Strict"})


def condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


def ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready") == ("True", "Ready")


@pytest.fixture
async def poolboy_objects(kube: Gateway) -> AsyncIterator[list[tuple[Resource, str]]]:
    """Providers and pools the test made in the operator's namespace, deleted afterwards."""
    made: list[tuple[Resource, str]] = []
    yield made
    for res, name in reversed(made):
        try:
            await kube.delete(res, OPS, name)
        except Exception:  # noqa: BLE001 - already gone
            pass
    for res, name in made:
        await gone(kube, res, OPS, name)


async def test_poolboy_samples_work_once_their_apiversion_is_lessors(
        kube: Gateway, namespace: str, poolboy_objects: list[tuple[Resource, str]]) -> None:
    docs = [ported(doc, {"poolboy": OPS, "poolboy-test": namespace}) for doc in samples("poolboy/samples.yaml")]
    for doc in docs:
        res = KINDS[doc["kind"]]
        ns = doc["metadata"]["namespace"]
        if doc["metadata"]["name"] == "test-pool" and res is CLAIM:
            # Its pool's handles first, as Poolboy's test-pool-01 waits for them: a claim that asks a pool
            # before the pool has made a handle gets a handle of its own (on main too, about 1 run in 10).
            await until(kube, POOL, OPS, "test-pool", lambda p: ((p.get("status") or {}).get(
                "resourceHandleCount") or {}).get("available") == 2)
        await create_strict(kube, res, ns, doc)
        if ns == OPS:
            poolboy_objects.append((res, doc["metadata"]["name"]))

    for name in ("test-pool", "test-vars", "test-parameters"):
        provider = await until(kube, PROVIDER, OPS, name, lambda o: condition(o, "Valid") is not None)
        assert condition(provider, "Valid") == ("True", "Valid"), provider["status"]

    # The pool's claim binds a pool handle; its ConfigMap is named by the handle's guid (Poolboy's test-pool-01).
    claim = await until(kube, CLAIM, namespace, "test-pool", ready)
    handle_name = claim["status"]["resourceHandle"]["name"]
    handle = await kube.get(HANDLE, OPS, handle_name)
    assert handle["spec"]["resourcePool"]["name"] == "test-pool"
    guid = handle_name[len(handle["metadata"]["generateName"]):]
    made = await kube.get(CONFIGMAP, namespace, f"test-pool-{guid}")
    assert made["data"] == {"value": "foo"}
    assert claim["status"]["resources"][0]["reference"]["name"] == f"test-pool-{guid}"

    # The kind comes from the schema alone; vars, resource_name, resource_claim and `| bool` render.
    claim = await until(kube, CLAIM, namespace, "test-vars", ready)
    handle_name = claim["status"]["resourceHandle"]["name"]
    handle = await kube.get(HANDLE, OPS, handle_name)
    guid = handle_name[len(handle["metadata"]["generateName"]):]
    made = await kube.get(CONFIGMAP, namespace, f"web-{guid}")
    assert made["metadata"]["labels"]["app"] == "demo"
    assert made["data"] == {"size": "small", "greeting": "hello from demo", "claim": "test-vars",
                            "index": "resource 0", "debug": "off"}

    # Provider mode: the definition rendered with the values (a default filled in); the claim labelled.
    claim = await until(kube, CLAIM, namespace, "test-parameters", ready)
    assert claim["metadata"]["labels"]["test-label"] == "test-label-value"
    assert claim["status"]["provider"]["parameterValues"] == {"numbervar": 1, "stringvar": "one"}
    handle_name = claim["status"]["resourceHandle"]["name"]
    handle = await kube.get(HANDLE, OPS, handle_name)
    assert handle["spec"]["provider"]["parameterValues"] == {"numbervar": 1, "stringvar": "one"}
    guid = handle_name[len(handle["metadata"]["generateName"]):]
    made = await kube.get(CONFIGMAP, namespace, f"test-parameters-{guid}")
    assert made["data"] == {"numbervalue": "1", "stringvalue": "one"}


async def test_jumpstarter_samples_work_once_their_apiversion_is_lessors(kube: Gateway, namespace: str) -> None:
    docs = [ported(doc, {"jumpstarter-lab": namespace}) for doc in samples("jumpstarter/samples.yaml")]
    for doc in docs:
        res = KINDS[doc["kind"]]
        await create_strict(kube, res, namespace, doc)
        if doc.get("status"):  # what the exporter's agent reports, with a fresh heartbeat
            now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
            await kube.request("patch", res.kind, "PATCH", res.path(namespace, doc["metadata"]["name"], "status"),
                               body={"status": {**copy.deepcopy(doc["status"]), "lastSeen": now}},
                               content_type="merge", params={"fieldValidation": "Strict"})

    lease = await until(kube, LEASE, namespace, "nightly-1234", ready)
    assert lease["status"]["exporterRef"]["name"] == "rpi4-01"
    assert lease["status"]["priority"] == 10
    exporter = await kube.get(EXPORTER, namespace, "rpi4-01")
    assert exporter["status"]["leaseRef"]["name"] == "nightly-1234"
    assert [d["uuid"][:8] for d in exporter["status"]["devices"]] == ["7b0e1f9c", "1f0e2d3c"]
    assert exporter["spec"]["username"] == "keycloak:exporter-rpi4-01"
    exporter = await until(kube, EXPORTER, namespace, "rpi4-01", lambda o: condition(o, "Registered") is not None)
    assert condition(exporter, "Registered") == ("True", "Register")  # from status.devices, as the controller does

    # Tags become labels, so leases can be listed by tag; tags and context stay as written.
    lease = await until(kube, LEASE, namespace, "nightly-1234",
                        lambda o: "metadata.lessor.dev/pipeline" in (o["metadata"].get("labels") or {}))
    assert lease["metadata"]["labels"]["metadata.lessor.dev/pipeline"] == "nightly"
    listed, _ = await kube.list(LEASE, namespace, label_selector="metadata.lessor.dev/pipeline=nightly")
    assert [o["metadata"]["name"] for o in listed] == ["nightly-1234"]
    assert lease["spec"]["context"] == {"build_id": "1234", "vcs_ref": "3f2c1ab"}


async def test_lease_tags_and_context_are_immutable(kube: Gateway, namespace: str) -> None:
    [lease] = [ported(doc, {"jumpstarter-lab": namespace}) for doc in samples("jumpstarter/samples.yaml")
               if doc["kind"] == "Lease"]
    await create_strict(kube, LEASE, namespace, lease)
    for field, value in (("tags", {"pipeline": "weekly"}), ("context", {"build_id": "9999"})):
        with pytest.raises(Exception) as refused:
            await kube.merge_patch(LEASE, namespace, "nightly-1234", {"spec": {field: value}})
        assert f"{field} are immutable" in str(refused.value) or f"{field} is immutable" in str(refused.value)
    bad = copy.deepcopy(lease)
    bad["metadata"]["name"] = "bad-tags"
    bad["spec"]["tags"] = {"team/x": "qa"}
    with pytest.raises(Exception) as refused:
        await create_strict(kube, LEASE, namespace, bad)
    assert "tag keys must be label names" in str(refused.value)


async def test_the_migration_guide_examples_work_verbatim(
        kube: Gateway, poolboy_objects: list[tuple[Resource, str]]) -> None:
    text = (Path(__file__).resolve().parents[2] / "docs" / "migrating.md").read_text()
    blocks = [part.split("```", 1)[0] for part in text.split("```yaml\n")[1:]]
    docs = [doc for block in blocks for doc in yaml.safe_load_all(block) if doc]
    assert [d["kind"] for d in docs] == ["ResourceProvider", "ResourcePool", "ResourceClaim", "Client", "Exporter",
                                         "Lease"]
    for ns in {d["metadata"]["namespace"] for d in docs} - {OPS}:
        if await get(kube, NAMESPACE, "", ns) is None:
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    try:
        for doc in docs:
            res, ns = KINDS[doc["kind"]], doc["metadata"]["namespace"]
            await create_strict(kube, res, ns, doc)
            if ns == OPS:
                poolboy_objects.append((res, doc["metadata"]["name"]))
        now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        await kube.patch_status(EXPORTER, "lab", "rpi4-01", {"lastSeen": now, "exporterStatus": "Available"})
        claim = await until(kube, CLAIM, "poolboy-test", "test-pool", ready)
        guid = claim["status"]["resourceHandle"]["name"].removeprefix("guid-")
        assert (await kube.get(CONFIGMAP, "poolboy-test", f"test-pool-{guid}"))["data"] == {"value": "foo"}
        lease = await until(kube, LEASE, "lab", "nightly-1234", lambda o: ready(o) and "metadata.lessor.dev/pipeline"
                            in (o["metadata"].get("labels") or {}))
        assert lease["status"]["exporterRef"]["name"] == "rpi4-01"
    finally:
        for ns in ("poolboy-test", "lab"):
            await discard(kube, NAMESPACE, None, ns)
