"""What the Poolboy scenarios of binding, ignoring, lifespans and pools share: Poolboy-style objects put
through `lessor convert` (the library function) and created on the real API server, under names unique to
the test (providers, pools and handles live in the shared operator namespace), removed afterwards.

The scenarios' own resource kind, `ResourceClaimTest` of Poolboy's group, is installed as a CRD here, so a
converted provider's `override` works as written.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, CRD, HANDLE, POOL, PROVIDER, SCALING
from lessor.tools.porting.convert import convert
from tests.polling import discard, until
from tests.slowness import scaled

POOLBOY = "poolboy.gpte.redhat.com/v1"
OPS = "lessor-system"
TEST_KIND = Resource("poolboy.gpte.redhat.com", "v1", "ResourceClaimTest", "resourceclaimtests")
_LESSOR = {"ResourceProvider": PROVIDER, "ResourcePool": POOL, "ResourceHandle": HANDLE, "ResourceClaim": CLAIM,
           "ResourcePoolScaling": SCALING}
_TEST_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "resourceclaimtests.poolboy.gpte.redhat.com"},
    "spec": {
        "group": "poolboy.gpte.redhat.com", "scope": "Namespaced",
        "names": {"kind": "ResourceClaimTest", "plural": "resourceclaimtests", "singular": "resourceclaimtest",
                  "listKind": "ResourceClaimTestList"},
        "versions": [{"name": "v1", "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                          "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}],
    },
}


async def install_test_kind(kube: Gateway) -> None:
    """The scenarios' ResourceClaimTest CRD, once it is served."""
    name = _TEST_CRD["metadata"]["name"]
    await kube.apply(CRD, None, name, _TEST_CRD)
    await until(kube, CRD, "", name, lambda crd: any(
        c.get("type") == "Established" and c.get("status") == "True"
        for c in (crd.get("status") or {}).get("conditions") or ()))


class Scenario:
    """One scenario's objects: `name(base)` makes a name unique to the test; `put` converts Poolboy objects
    and creates lessor's; `clean` deletes what was put in the operator's namespace (claims first)."""

    def __init__(self, kube: Gateway, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace  # Poolboy's poolboy_test_namespace: claims and created resources
        self.suffix = uuid.uuid4().hex[:6]
        self.made: list[tuple[Resource, str, str]] = []

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    def poolboy(self, kind: str, name: str, spec: Mapping[str, Any], *, namespace: str = "poolboy",
                **metadata: Any) -> dict[str, Any]:
        """A Poolboy object as its scenarios write it (providers, pools and handles in Poolboy's namespace)."""
        return {"apiVersion": POOLBOY, "kind": kind, "metadata": {"name": name, "namespace": namespace, **metadata},
                "spec": dict(spec)}

    def provider_ref(self, name: str) -> dict[str, str]:
        """How Poolboy's scenarios name a provider: with its apiVersion, kind and namespace."""
        return {"apiVersion": POOLBOY, "kind": "ResourceProvider", "name": name, "namespace": "poolboy"}

    async def put(self, *docs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`lessor convert` the objects, then create each converted one; returns them as created. A note that
        leaves something out fails the test: these scenarios port whole."""
        conversion = convert(docs, operator_namespace=OPS)
        dropped = [str(note) for note in conversion.notes if note.dropped]
        assert not dropped, dropped
        created = []
        for obj in conversion.objects:
            resource = _LESSOR[obj["kind"]]
            namespace = obj["metadata"].get("namespace") or self.namespace
            written = await self.kube.create(resource, namespace, obj)
            self.made.append((resource, namespace, written["metadata"]["name"]))
            created.append(written)
        return created

    async def handles_of_pool(self, pool: str) -> list[dict[str, Any]]:
        handles, _ = await self.kube.list(HANDLE, OPS)
        return [h for h in handles if ((h.get("spec") or {}).get("resourcePool") or {}).get("name") == pool]

    async def unbound_of_pool(self, pool: str) -> list[dict[str, Any]]:
        return [h for h in await self.handles_of_pool(pool) if not (h.get("spec") or {}).get("resourceClaim")
                and not (h.get("metadata") or {}).get("deletionTimestamp")]

    async def unbound(self, pool: str, count: int, *, reported: bool = True,
                      timeout: float = 30) -> list[dict[str, Any]]:
        """The pool's unbound handles once there are `count` of them (each reporting its resource's
        reference, with `reported`); fails with what there is after `timeout` (scaled)."""
        deadline = time.monotonic() + scaled(timeout)
        found: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            found = await self.unbound_of_pool(pool)
            if len(found) == count and (not reported or all(_reference(h) for h in found)):
                return found
            await asyncio.sleep(0.2)
        raise AssertionError(f"pool {pool}: {len(found)} unbound handles, not {count}: "
                             f"{[(h['metadata']['name'], h.get('status')) for h in found]}")

    async def clean(self) -> None:
        for resource, namespace, name in sorted(self.made, key=lambda made: _ORDER.index(made[0])):
            await discard(self.kube, resource, namespace, name)


_ORDER = [CLAIM, SCALING, POOL, HANDLE, PROVIDER]


def _reference(handle: Mapping[str, Any]) -> Any:
    resources = (handle.get("status") or {}).get("resources") or [{}]
    return resources[0].get("reference")


def value_provider(scenario: Scenario, name: str, **spec: Any) -> dict[str, Any]:
    """Poolboy's provider of ResourceClaimTests whose spec is exactly {value: <string>}."""
    return scenario.poolboy("ResourceProvider", name, {
        **spec,
        "override": {"apiVersion": "poolboy.gpte.redhat.com/v1", "kind": "ResourceClaimTest",
                     "metadata": {"name": f"{name}-{{{{ guid }}}}", "namespace": scenario.namespace}},
        "template": {"enable": True},
        "validation": {"openAPIV3Schema": {
            "type": "object", "additionalProperties": False, "required": ["spec"],
            "properties": {"spec": {"type": "object", "additionalProperties": False, "required": ["value"],
                                    "properties": {"value": {"type": "string"}}}}}},
    })


def condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found.get("type") == type_:
            return found.get("status"), found.get("reason")
    return None


def has(type_: str, reason: str, status: str = "True") -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: condition(obj, type_) == (status, reason)


def state(claim: Mapping[str, Any], index: int = 0) -> Mapping[str, Any] | None:
    """`status.resources[index].state` of a claim: the created resource as the claim shows it."""
    resources = (claim.get("status") or {}).get("resources") or []
    return resources[index].get("state") if index < len(resources) else None


def bound_to(claim: Mapping[str, Any]) -> str | None:
    return ((claim.get("status") or {}).get("resourceHandle") or {}).get("name")
