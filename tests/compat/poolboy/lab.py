"""A Poolboy lab for the compatibility suite: the objects as Poolboy's scenarios write them, put through
`lessor convert` (its library function, as the CLI calls it), created on the real API server, and removed
afterwards. The fixtures that hand a test its `Scenario` and the scenarios' resource kind are in conftest.py.

Providers, pools, handles and scalings live in the operator's namespace, which the whole session shares, so a
scenario names them with `Scenario.name`; claims and the resources made for them live in the test's namespace.
The resources are `ResourceClaimTest`s of Poolboy's group, as in Poolboy's own tests (`TEST_KIND`).
"""

from __future__ import annotations

import asyncio
import copy
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, CRD, HANDLE, POOL, PROVIDER, SCALING
from lessor.tools.porting.convert import Note, convert
from tests.polling import discard, get, gone, until
from tests.slowness import scaled

POOLBOY = "poolboy.gpte.redhat.com/v1"
OPS = "lessor-system"  # the operator's namespace (tests/conftest.py)
TEST_KIND = Resource("poolboy.gpte.redhat.com", "v1", "ResourceClaimTest", "resourceclaimtests")
TEST_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": f"{TEST_KIND.plural}.{TEST_KIND.group}"},
    "spec": {
        "group": TEST_KIND.group, "scope": "Namespaced",
        "names": {"kind": TEST_KIND.kind, "plural": TEST_KIND.plural, "singular": "resourceclaimtest",
                  "listKind": "ResourceClaimTestList"},
        "versions": [{"name": TEST_KIND.version, "served": True, "storage": True,
                      "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                          "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}}}}}],
    },
}
_LESSOR = {r.kind: r for r in (PROVIDER, POOL, HANDLE, CLAIM, SCALING)}
_CLEANUP_ORDER = [CLAIM, SCALING, POOL, HANDLE, PROVIDER]  # a claim before its handle, a pool before its provider


async def install_crd(kube: Gateway, crd: Mapping[str, Any]) -> None:
    """A CRD, once the API server serves it."""
    name = crd["metadata"]["name"]
    await kube.apply(CRD, None, name, dict(crd))
    await until(kube, CRD, "", name, lambda found: condition(found, "Established").get("status") == "True")


class Scenario:
    """One scenario's objects: `poolboy(...)` writes one as Poolboy's scenarios do; `put` converts them and
    creates lessor's, keeping the conversion's notes in `notes`; `clean` deletes what was put, claims first,
    and waits until it is gone. `name(base)` makes a name unique to the test."""

    def __init__(self, kube: Gateway, namespace: str) -> None:
        self.kube = kube
        self.namespace = namespace  # Poolboy's poolboy_test_namespace: claims and the resources made for them
        self.suffix = uuid.uuid4().hex[:6]
        self.made: list[tuple[Resource, str, str]] = []
        self.notes: list[Note] = []

    def name(self, base: str) -> str:
        return f"{base}-{self.suffix}"

    def poolboy(self, kind: str, name: str, spec: Mapping[str, Any], *, namespace: str | None = None,
                **metadata: Any) -> dict[str, Any]:
        """A Poolboy object as its scenarios write it: a claim in the test's namespace, anything else in
        Poolboy's (`convert` moves it to the operator's)."""
        namespace = namespace or (self.namespace if kind == "ResourceClaim" else "poolboy")
        return {"apiVersion": POOLBOY, "kind": kind, "metadata": {"name": name, "namespace": namespace, **metadata},
                "spec": dict(spec)}

    def provider_claim(self, name: str, provider: str, values: Mapping[str, Any] | None = None,
                       **spec: Any) -> dict[str, Any]:
        """A claim in Poolboy's provider mode: a provider's name and values for its parameters."""
        return self.poolboy("ResourceClaim", name, {"provider": {"name": provider, "parameterValues": dict(values or {})},
                                                    **spec})

    def provider_ref(self, name: str) -> dict[str, str]:
        """How Poolboy's scenarios name a provider: with its apiVersion, kind and namespace."""
        return {"apiVersion": POOLBOY, "kind": "ResourceProvider", "name": name, "namespace": "poolboy"}

    def override(self, metadata: Mapping[str, Any] | None = None, **more: Any) -> dict[str, Any]:
        """A provider's `override` that makes a ResourceClaimTest in the test's namespace."""
        return {"apiVersion": TEST_KIND.api_version, "kind": TEST_KIND.kind,
                "metadata": {"namespace": self.namespace, **(metadata or {})}, **more}

    async def put(self, *docs: Mapping[str, Any]) -> list[dict[str, Any]]:
        """`lessor convert` the objects, then create each converted one; returns them as created. A note that
        leaves something out fails the test: these scenarios port whole (the others are in `notes`)."""
        conversion = convert([copy.deepcopy(dict(doc)) for doc in docs], operator_namespace=OPS)
        self.notes += conversion.notes
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
        """The pool's unbound handles, but those on their way out."""
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
        made = sorted(self.made, key=lambda entry: _CLEANUP_ORDER.index(entry[0]))
        for resource, namespace, name in made:
            await discard(self.kube, resource, namespace, name)
        for resource, namespace, name in made:
            await gone(self.kube, resource, namespace, name, timeout=60)


def _reference(handle: Mapping[str, Any]) -> Any:
    resources = (handle.get("status") or {}).get("resources") or [{}]
    return resources[0].get("reference")


# ------------------------------------------------------------------------------------ providers' specs

VALUE_SCHEMA = {"openAPIV3Schema": {
    "type": "object", "additionalProperties": False, "required": ["spec"],
    "properties": {"spec": {"type": "object", "additionalProperties": False, "required": ["value"],
                            "properties": {"value": {"type": "string"}}}}}}
#: A `stringvar` of three lower-case values and a `numbervar`, both changeable (Poolboy's linked and pool scenarios).
PARAMETERS: list[dict[str, Any]] = [
    {"name": "stringvar", "allowUpdate": True, "required": True, "validation": {"openAPIV3Schema": {
        "type": "string", "default": "one", "enum": ["one", "two", "three"]}}},
    {"name": "numbervar", "allowUpdate": True, "validation": {"openAPIV3Schema": {
        "type": "integer", "default": 0, "minimum": 0}}},
]


#: `PARAMETERS` where `numbervar` is at most 1, 2 or 3 for a `stringvar` of one, two or three (Poolboy's
#: parameters scenarios).
CHECKED_PARAMETERS = [PARAMETERS[0], {**PARAMETERS[1], "validation": {**PARAMETERS[1]["validation"], "checks": [
    {"name": f"max for {word}", "check": f"numbervar <= {limit} or stringvar != '{word}'"}
    for limit, word in ((1, "one"), (2, "two"), (3, "three"))]}}]


def value_provider(scenario: Scenario, name: str, **spec: Any) -> dict[str, Any]:
    """Poolboy's provider of ResourceClaimTests whose spec is exactly {value: <string>}."""
    return scenario.poolboy("ResourceProvider", name, {
        **spec, "override": scenario.override({"name": f"{name}-{{{{ guid }}}}"}),
        "template": {"enable": True}, "validation": VALUE_SCHEMA})


def summarized_provider(scenario: Scenario, name: str) -> dict[str, Any]:
    """A provider whose resource's spec.stringvalue is the claim's `stringvar`, summarized as `stringValue`
    (Poolboy's auto-delete and auto-detach scenarios)."""
    return scenario.poolboy("ResourceProvider", name, {
        "override": scenario.override({"name": f"{name}-{{{{ guid }}}}"}),
        "parameters": [{"name": "stringvar", "allowUpdate": True, "required": True}],
        "statusSummaryTemplate": {"stringValue": "{{ resources[0].state.spec.stringvalue }}"},
        "template": {"enable": True, "definition": {"spec": {"stringvalue": "{{ stringvar }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]})


def parameters_spec(override: dict[str, Any], numbervalue: str, stringvalue: str, **more: Any) -> dict[str, Any]:
    """A provider's spec with `PARAMETERS`, rendered into the resource's spec.numbervalue and spec.stringvalue."""
    return {"override": override, "parameters": PARAMETERS, "template": {"enable": True, "definition": {
        "spec": {"numbervalue": numbervalue, "stringvalue": stringvalue}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}], **more}


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


def extended_or(longer: str, shorter: str) -> str:
    """A template: `longer` for a claim annotated `extended-lifespan`, `shorter` for any other."""
    return (f"{{%- if 'extended-lifespan' in resource_claim.annotations -%}}{longer}"
            f"{{%- else -%}}{shorter}{{%- endif -%}}")


#: Lifespan settings written as templates over the claim (Poolboy's test-02 and pool-02).
LIFESPAN = {"default": extended_or("12h", "30m"), "maximum": extended_or("2d", "2h"),
            "relativeMaximum": extended_or("1d", "1h")}


# ------------------------------------------------------------------------------------ what a test reads

def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    """The object's condition of that type, or {}."""
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c.get("type") == type_), {})


def has(type_: str, reason: str, status: str = "True") -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: (condition(obj, type_).get("status"), condition(obj, type_).get("reason")) == (status, reason)


def ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready").get("status") == "True"


def state(claim: Mapping[str, Any], index: int = 0) -> Mapping[str, Any] | None:
    """`status.resources[index].state` of a claim: the created resource as the claim shows it."""
    resources = (claim.get("status") or {}).get("resources") or []
    return resources[index].get("state") if index < len(resources) else None


def values(obj: Mapping[str, Any]) -> tuple[Any, Any]:
    """(spec.numbervalue, spec.stringvalue) of a resource or state made by a provider of `PARAMETERS`."""
    return obj["spec"].get("numbervalue"), obj["spec"].get("stringvalue")


def has_state(claim: Mapping[str, Any]) -> bool:
    """Poolboy's scenarios wait for `status.resources[].state`: every created resource, seen by the claim."""
    resources = (claim.get("status") or {}).get("resources") or []
    return bool(resources) and all(r.get("state") is not None for r in resources)


def bound_to(claim: Mapping[str, Any]) -> str | None:
    return ((claim.get("status") or {}).get("resourceHandle") or {}).get("name")


def guid(claim: Mapping[str, Any]) -> str:
    """The guid of the claim's handle (`guid-<guid>`), which Poolboy's providers put into their resources' names."""
    return (bound_to(claim) or "").removeprefix("guid-")


def entries(claim: Mapping[str, Any]) -> list[tuple[str, str]]:
    """(name, provider) of each of the claim's status.resources."""
    return [(r["name"], r["provider"]["name"]) for r in claim["status"].get("resources") or ()]


# ------------------------------------------------------------------------------------ scenarios alike

async def claim_binds_a_free_standing_handle_made_later(scenario: Scenario, base: str, *,
                                                        provider: Mapping[str, Any] | None = None,
                                                        claim: Mapping[str, Any] | None = None) -> None:
    """Poolboy's disable-creation scenarios, which differ in where `disableCreation` is set (in `provider` or
    `claim`, more of that spec): the claim waits unbound, saying why (`Bound=False`, `WaitingForPool`), until
    an admin makes a free-standing handle that matches; the claim then binds that handle itself and gets its
    resource, and the handle and the resource go with the claim."""
    kube = scenario.kube
    provider_name, claim_name, handle_name = scenario.name(base), base, f"guid-{scenario.suffix}"
    await scenario.put(value_provider(scenario, provider_name, **(provider or {})))
    await scenario.put(scenario.poolboy("ResourceClaim", claim_name, {**(claim or {}), "resources": [
        {"provider": scenario.provider_ref(provider_name), "template": {"spec": {"value": "foo"}}}]}))

    waiting = await until(kube, CLAIM, scenario.namespace, claim_name, has("Bound", "WaitingForPool", "False"))
    assert waiting["status"]["resources"][0]["provider"]["name"] == provider_name
    assert bound_to(waiting) is None

    await scenario.put(scenario.poolboy("ResourceHandle", handle_name, {"resources": [
        {"provider": scenario.provider_ref(provider_name), "template": {"spec": {"value": "foo"}}}]}))

    bound = await until(kube, CLAIM, scenario.namespace, claim_name, lambda c: bound_to(c) == handle_name
                        and state(c) is not None)
    assert has("Bound", "Bound")(bound)
    made = state(bound)
    assert made is not None and made["spec"] == {"value": "foo"}
    assert made["metadata"]["name"] == f"{provider_name}-{scenario.suffix}"  # the handle's guid names it
    handle = await get(kube, HANDLE, OPS, handle_name)
    assert handle is not None and handle["spec"]["resourceClaim"] == {"name": claim_name,
                                                                     "namespace": scenario.namespace}

    await kube.delete(CLAIM, scenario.namespace, claim_name)
    await gone(kube, HANDLE, OPS, handle_name)  # a bound handle goes with its claim, as in Poolboy
    await gone(kube, TEST_KIND, scenario.namespace, made["metadata"]["name"])
