"""The ignore label on a pool, against the real API server: an ignored pool serves no claim and makes
nothing, until the label goes. (A claim and its handle: tests/compat/poolboy/test_ignore_01.py.)"""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, POOL, PROVIDER
from tests.polling import discard, get, gone, until

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
IGNORE = "lessor.dev/ignore"


async def unbound(kube: Gateway, pool: str) -> list[str]:
    handles, _ = await kube.list(HANDLE, OPS)
    return sorted(h["metadata"]["name"] for h in handles
                  if (h["spec"].get("resourcePool") or {}).get("name") == pool and not h["spec"].get("resourceClaim")
                  and not h["metadata"].get("deletionTimestamp"))


async def test_an_ignored_pool_serves_no_claim_and_makes_nothing_until_the_label_goes(
        kube: Gateway, namespace: str) -> None:
    name = f"ignored-{uuid.uuid4().hex[:6]}"
    resource = {"provider": {"name": name}, "template": {"data": {"size": "small"}}}
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": name},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": OPS}}}})
    await kube.create(POOL, OPS, {"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": name},
                                  "spec": {"minAvailable": 1, "resources": [resource]}})
    try:
        await until(kube, POOL, OPS, name, lambda p: (p.get("status") or {}).get("resourceHandleCount", {}).get(
            "available") == 1)
        [waiting] = await unbound(kube, name)
        await kube.merge_patch(POOL, OPS, name, {"metadata": {"labels": {IGNORE: ""}}})
        await kube.delete(HANDLE, OPS, waiting)
        await gone(kube, HANDLE, OPS, waiting)

        def claim(claim_name: str) -> dict[str, Any]:
            return {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": claim_name},
                    "spec": {"resources": [resource]}}

        await kube.create(CLAIM, namespace, claim("mine"))
        bound = await until(kube, CLAIM, namespace, "mine", lambda c: (c.get("status") or {}).get("resourceHandle"))
        own = await get(kube, HANDLE, OPS, bound["status"]["resourceHandle"]["name"])
        assert own is not None and "resourcePool" not in own["spec"]  # not the pool's: it serves nobody
        assert await unbound(kube, name) == []  # and it did not replace the handle deleted meanwhile

        await kube.merge_patch(POOL, OPS, name, {"metadata": {"labels": {IGNORE: None}}})
        back = await until(kube, POOL, OPS, name, lambda p: [h["name"] for h in (p.get("status") or {}).get(
            "resourceHandles") or ()] not in ([], [waiting]))  # its status, stale while ignored, is written anew
        assert [h["name"] for h in back["status"]["resourceHandles"]] == await unbound(kube, name)
    finally:
        await discard(kube, CLAIM, namespace, "mine")
        await discard(kube, POOL, OPS, name)
        await discard(kube, PROVIDER, OPS, name)
