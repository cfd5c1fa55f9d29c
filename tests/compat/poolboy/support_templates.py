"""Shared by the Poolboy scenarios of templates, names, lifespans and links: Poolboy's objects, put through
`lessor convert`, created on the real API server; a kind of their own for the resources (Poolboy's tests use a
`ResourceClaimTest` CRD of their own too); providers under names unique to the test, removed afterwards."""

from __future__ import annotations

import copy
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, CRD, HANDLE, POOL, PROVIDER
from lessor.tools.porting.convert import Note, convert
from tests.polling import discard, gone, until

POOLBOY = "poolboy.gpte.redhat.com/v1"
OPS = "lessor-system"
GROUP = "templates.compat.lessor.dev"
TEST_KIND = Resource(GROUP, "v1", "ResourceClaimTest", "resourceclaimtests")
TEST_API = f"{GROUP}/v1"
_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"resourceclaimtests.{GROUP}"},
    "spec": {
        "group": GROUP, "scope": "Namespaced",
        "names": {"kind": "ResourceClaimTest", "plural": "resourceclaimtests", "singular": "resourceclaimtest",
                  "listKind": "ResourceClaimTestList"},
        "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
            "type": "object", "properties": {"spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}],
    },
}
_KINDS = {"ResourceProvider": PROVIDER, "ResourcePool": POOL, "ResourceClaim": CLAIM}


def established(crd: Mapping[str, Any]) -> bool:
    conditions = (crd.get("status") or {}).get("conditions") or ()
    return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)


@pytest.fixture(name="claim_test_kind")
async def claim_test_kind_fixture(kube: Gateway) -> Resource:
    """The kind the scenarios' providers create (the peer's own test CRD, under lessor's test group)."""
    await kube.apply(CRD, None, _CRD["metadata"]["name"], _CRD)
    await until(kube, CRD, "", _CRD["metadata"]["name"], established)
    return TEST_KIND


class Scenario:
    """One scenario's Poolboy objects: converted, created, and removed afterwards.

    `name(base)` makes a provider or pool name unique to the test (the operator's namespace is shared by the
    session); claims live in the test's namespace under their own names."""

    def __init__(self, kube: Gateway, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.suffix = uuid.uuid4().hex[:5]
        self.made: list[tuple[Resource, str, str]] = []
        self.notes: list[Note] = []

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    def convert(self, *docs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`lessor convert` of Poolboy's objects; its notes are kept for the test to look at."""
        result = convert([copy.deepcopy(dict(doc)) for doc in docs], operator_namespace=OPS)
        self.notes += result.notes
        return result.objects

    async def create(self, *docs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """Convert Poolboy's objects and create lessor's (providers and pools in the operator's namespace)."""
        created = []
        for obj in self.convert(*docs):
            res = _KINDS[obj["kind"]]
            namespace = obj["metadata"].get("namespace") or self.namespace
            created.append(await self.kube.create(res, namespace, obj))
            self.made.append((res, namespace, obj["metadata"]["name"]))
        return created

    async def cleanup(self) -> None:
        for res, namespace, name in reversed(self.made):
            await discard(self.kube, res, namespace, name)
        for res, namespace, name in self.made:
            await gone(self.kube, res, namespace, name, timeout=60)


@pytest.fixture(name="scenario")
async def scenario_fixture(kube: Gateway, namespace: str, claim_test_kind: Resource, operator: object) -> AsyncIterator[Scenario]:
    """The objects of one scenario, with the operator running (in this process)."""
    made = Scenario(kube, namespace)
    yield made
    await made.cleanup()


def poolboy_provider(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    """A ResourceProvider as Poolboy's users write it (in Poolboy's namespace; `convert` moves it)."""
    return {"apiVersion": POOLBOY, "kind": "ResourceProvider", "metadata": {"name": name, "namespace": "poolboy"},
            "spec": dict(spec)}


def poolboy_pool(name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
    return {"apiVersion": POOLBOY, "kind": "ResourcePool", "metadata": {"name": name, "namespace": "poolboy"},
            "spec": dict(spec)}


def poolboy_claim(name: str, namespace: str, spec: Mapping[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": POOLBOY, "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, **metadata}, "spec": dict(spec)}


def override_for(namespace: str, metadata: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Any]:
    """An override that makes a ResourceClaimTest in the test's namespace."""
    return {"apiVersion": TEST_API, "kind": "ResourceClaimTest", "metadata": {"namespace": namespace, **(metadata or {})},
            **more}


def named_like(prefix: str) -> dict[str, Any]:
    """Poolboy's way to let claims name their resources, and lessor's rule for it: a validation schema that
    declares metadata.name (here with a pattern the name must match)."""
    return {"openAPIV3Schema": {"type": "object", "additionalProperties": False, "properties": {"metadata": {
        "type": "object", "additionalProperties": False, "required": ["name"],
        "properties": {"name": {"type": "string", "pattern": f"^{prefix}-[a-z0-9]+$"}}}}}}


def merged(schema: Mapping[str, Any], **properties: Any) -> dict[str, Any]:
    """`schema` (one of `named_like`'s) with more top-level properties."""
    out = copy.deepcopy(dict(schema))
    out["openAPIV3Schema"]["properties"].update(properties)
    return out


def condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), {})


def has_state(obj: Mapping[str, Any]) -> bool:
    """Poolboy's scenarios wait for `status.resources[0].state`: the created resource, seen by the claim."""
    resources = (obj.get("status") or {}).get("resources") or []
    return bool(resources) and all(r.get("state") is not None for r in resources)


def ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready").get("status") == "True"


__all__ = ["CLAIM", "HANDLE", "OPS", "POOL", "PROVIDER", "Scenario", "condition", "has_state", "poolboy_claim",
           "poolboy_pool", "poolboy_provider", "ready", "scenario_fixture", "claim_test_kind_fixture", "merged", "named_like",
           "override_for"]
