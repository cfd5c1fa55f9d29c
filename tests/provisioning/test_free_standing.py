"""Free-standing handles (no pool, no claim) against the real API server: claims bind them themselves.

No actor arbitrates such a handle, so claims race for it; the binding's resourceVersion precondition
decides, and a claim that loses looks for another handle or waits.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, PROVIDER
from tests.polling import discard, get, until
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"


def _bound(claim: dict[str, Any]) -> str | None:
    return ((claim.get("status") or {}).get("resourceHandle") or {}).get("name")


def _condition(obj: dict[str, Any], type_: str) -> tuple[str, str] | None:
    for found in (obj.get("status") or {}).get("conditions") or ():
        if found["type"] == type_:
            return found["status"], found["reason"]
    return None


async def test_claims_racing_for_free_standing_handles_bind_each_handle_once(kube: Gateway, namespace: str) -> None:
    provider = f"free-{uuid.uuid4().hex[:6]}"
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": OPS}}}})
    handles: list[str] = []
    try:
        for size in ("small", "small", "small", "large"):  # the large one matches no claim
            made = await kube.create(HANDLE, OPS, {
                "apiVersion": API, "kind": "ResourceHandle", "metadata": {"generateName": "guid-"},
                "spec": {"resources": [{"provider": {"name": provider}, "template": {"data": {"size": size}}}]}})
            handles.append(made["metadata"]["name"])
        claims = [f"c{i}" for i in range(6)]
        await asyncio.gather(*(kube.create(CLAIM, namespace, {
            "apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"disableCreation": True,
                     "resources": [{"provider": {"name": provider}, "template": {"data": {"size": "small"}}}]}})
            for name in claims))

        deadline = time.monotonic() + scaled(30)
        bound: dict[str, str | None] = {}
        while len(bound) < 3 and time.monotonic() < deadline:
            listed = {c["metadata"]["name"]: c for c in (await kube.list(CLAIM, namespace))[0]}
            bound = {name: _bound(claim) for name, claim in listed.items() if _bound(claim)}
            await asyncio.sleep(0.2)
        assert sorted(bound.values()) == sorted(handles[:3])  # each small handle once, the large one never
        for name in set(claims) - set(bound):
            await until(kube, CLAIM, namespace, name, lambda c: _condition(c, "Bound") == ("False", "WaitingForPool"))
        for name, handle in bound.items():
            found = await get(kube, HANDLE, OPS, handle or "")
            assert found is not None and found["spec"]["resourceClaim"] == {"name": name, "namespace": namespace}
        large = await get(kube, HANDLE, OPS, handles[3])
        assert large is not None and "resourceClaim" not in large["spec"]
    finally:
        for name in handles:
            await discard(kube, HANDLE, OPS, name)
        await discard(kube, PROVIDER, OPS, provider)
