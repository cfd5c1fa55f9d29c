"""Chaos: claim, pool and handle actors killed every 50 ms, and the whole operator SIGKILLed, during a claim storm.

Free-standing handles (no pool, no claim) wait too, and claims bind them
themselves, racing each other under the handles' resourceVersions.

During the storm no handle is held by two claims (sampled every half
second). Afterwards the invariants hold: no handle bound to two claims, no claim
with two handles, no resource without its handle and no handle without its
claim or pool, every pool back at minAvailable, and every claim in the
state the rules give it (valid ones bound and ready, invalid ones unbound,
ended or deleted ones gone with their handles and resources). Each run draws
a fresh seed (printed; `LESSOR_CHAOS_SEED` replays one).
"""

from __future__ import annotations

import asyncio
import datetime as dt
import random
import time
import uuid
from collections.abc import Mapping
from pathlib import Path
from typing import Any


from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CONFIGMAP, HANDLE, NAMESPACE, POOL, PROVIDER
from lessor.app.install import install
from lessor.mailbox import ChaosMonkey
from tests.polling import discard, get

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
CLAIMS = 40
MIN_AVAILABLE = 5
FREE_STANDING = 4


class Storm:
    """One provider, one pool, free-standing handles of the "large" template, and claims of four sorts: the pool's
    template, their own ("large", which the free-standing handles match), invalid, short-lived; each either
    listing its resource or in provider mode (parameter values rendered into the same template)."""

    def __init__(self, kube: Gateway, ns: str, rng: random.Random) -> None:
        self.kube, self.ns, self.rng = kube, ns, rng
        suffix = uuid.uuid4().hex[:6]
        self.provider, self.pool = f"chaos-{suffix}", f"chaos-{suffix}"
        self.deleted: set[str] = set()
        self.short: set[str] = set()
        self.free_standing: set[str] = set()

    async def lab(self) -> None:
        await self.kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider",
                                               "metadata": {"name": self.provider}, "spec": {
            "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}},
            "matchIgnore": ["/data/owner"],
            "validation": {"openAPIV3Schema": {"type": "object", "properties": {"data": {
                "type": "object", "properties": {"size": {"type": "string", "enum": ["small", "large"]}}}}}},
            "parameters": [{"name": "size", "required": True, "allowUpdate": True, "validation": {
                "openAPIV3Schema": {"type": "string", "enum": ["small", "large"]}}}, {"name": "owner"}],
            "template": {"definition": {"data": {"size": "{{ size }}", "owner": "{{ owner }}"}}}}})
        await self.kube.create(POOL, OPS, {"apiVersion": API, "kind": "ResourcePool", "metadata": {"name": self.pool},
                                           "spec": {"minAvailable": MIN_AVAILABLE, "resources": [{
                                               "provider": {"name": self.provider},
                                               "template": {"data": {"size": "small"}}}]}})
        for _ in range(FREE_STANDING):  # an admin's: claims race for them with no pool to arbitrate
            handle = await self.kube.create(HANDLE, OPS, {
                "apiVersion": API, "kind": "ResourceHandle", "metadata": {"generateName": "guid-"},
                "spec": {"resources": [{"provider": {"name": self.provider}, "template": {"data": {"size": "large"}}}]}})
            self.free_standing.add(handle["metadata"]["name"])

    async def clean(self) -> None:
        for name in self.free_standing:
            await discard(self.kube, HANDLE, OPS, name)
        await self.kube.delete(POOL, OPS, self.pool)
        await self.kube.delete(PROVIDER, OPS, self.provider)

    async def run(self, seconds: float) -> None:
        """Claims arrive over half the time; meanwhile and after, some are deleted."""
        names = [f"c{i:02d}" for i in range(CLAIMS)]
        deadline = time.monotonic() + seconds
        for name in names:
            await self._claim(name)
            await asyncio.sleep(seconds / (2 * CLAIMS))
        while time.monotonic() < deadline:
            victim = self.rng.choice(sorted(set(names) - self.deleted - self.short))
            await self.kube.delete(CLAIM, self.ns, victim)
            self.deleted.add(victim)
            await asyncio.sleep(0.7)

    async def _claim(self, name: str) -> None:
        roll = self.rng.random()
        size = "small" if roll < 0.5 else "large" if roll < 0.8 else "huge"  # the pool's, their own, invalid
        spec: dict[str, Any] = {"resources": [{"provider": {"name": self.provider},
                                               "template": {"data": {"size": size, "owner": name}}}]}
        if self.rng.random() < 0.3:
            spec = {"provider": {"name": self.provider, "parameterValues": {"size": size, "owner": name}}}
        if size != "huge" and self.rng.random() < 0.2:
            spec["lifespan"] = {"end": _stamp(dt.datetime.now(dt.UTC) + dt.timedelta(seconds=self.rng.randint(2, 5)))}
            self.short.add(name)
        await self.kube.create(CLAIM, self.ns, {"apiVersion": API, "kind": "ResourceClaim",
                                                "metadata": {"name": name}, "spec": spec})


def size_of(claim: Mapping[str, Any]) -> str:
    if "provider" in claim["spec"]:
        return str(claim["spec"]["provider"]["parameterValues"]["size"])
    return str(claim["spec"]["resources"][0]["template"]["data"]["size"])


def _stamp(t: dt.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


async def shared_handles(kube: Gateway, storm: Storm) -> list[str]:
    """What must hold at every moment of the storm: no handle held by two claims (a handle's claim,
    its commit point, is written once and never changes, so no grace is needed)."""
    held: dict[str, list[str]] = {}
    for claim in (await kube.list(CLAIM, storm.ns))[0]:
        if handle := ((claim.get("status") or {}).get("resourceHandle") or {}).get("name"):
            held.setdefault(handle, []).append(claim["metadata"]["name"])
    return [f"handle {handle} is held by claims {holders}" for handle, holders in held.items() if len(holders) > 1]


async def violations(kube: Gateway, storm: Storm) -> list[str]:
    claims = {c["metadata"]["name"]: c for c in (await kube.list(CLAIM, storm.ns))[0]}
    handles = {h["metadata"]["name"]: h for h in (await kube.list(HANDLE, OPS))[0]
               if any((r.get("provider") or {}).get("name") == storm.provider for r in h["spec"]["resources"])}
    selector = f"lessor.dev/resource-provider-name={storm.provider}"
    configmaps = (await kube.list(CONFIGMAP, OPS, label_selector=selector))[0]
    found = []
    named: dict[str, list[str]] = {}
    for name, handle in handles.items():
        ref = handle["spec"].get("resourceClaim")
        if ref:
            named.setdefault(ref["name"], []).append(name)
            if ref["name"] not in claims:
                found.append(f"handle {name} is bound to claim {ref['name']}, which is gone")
        elif (handle["spec"].get("resourcePool") or {}).get("name") != storm.pool and name not in storm.free_standing:
            found.append(f"handle {name} has neither claim nor pool")
    for claim, holders in named.items():
        if len(holders) > 1:
            found.append(f"claim {claim} has handles {holders}")
    held: dict[str, list[str]] = {}
    for name, claim in claims.items():
        size = size_of(claim)
        status = claim.get("status") or {}
        handle = (status.get("resourceHandle") or {}).get("name")
        if handle:
            held.setdefault(handle, []).append(name)
        if name in storm.deleted:
            found.append(f"claim {name} was deleted but exists")
        elif size == "huge":
            if _condition(claim, "Valid") != ("False", "SchemaViolation") or handle:
                found.append(f"invalid claim {name}: Valid {_condition(claim, 'Valid')}, handle {handle}")
        elif name in storm.short:
            end = (status.get("lifespan") or {}).get("end")
            found.append(f"claim {name} should have ended at {end}")
        elif _condition(claim, "Ready") != ("True", "Ready") or named.get(name) != [handle]:
            found.append(f"claim {name}: Ready {_condition(claim, 'Ready')}, handle {handle}, "
                         f"handles naming it {named.get(name)}")
    for handle, holders in held.items():
        if len(holders) > 1:
            found.append(f"handle {handle} is held by claims {holders}")
    for cm in configmaps:
        owner = cm["metadata"]["labels"]["lessor.dev/resource-handle-name"]
        if owner not in handles:
            found.append(f"ConfigMap {cm['metadata']['name']} outlived its handle {owner}")
    free = [n for n, h in handles.items() if not h["spec"].get("resourceClaim") and n not in storm.free_standing]
    if len(free) != MIN_AVAILABLE:
        found.append(f"pool has {len(free)} unbound handles, not {MIN_AVAILABLE}: {free}")
    pool = await kube.get(POOL, OPS, storm.pool)
    if ((pool.get("status") or {}).get("resourceHandleCount") or {}).get("available") != MIN_AVAILABLE:
        found.append(f"pool status says {(pool.get('status') or {}).get('resourceHandleCount')}")
    return found


async def free_standing_taken(kube: Gateway, storm: Storm) -> list[str]:
    """The free-standing handles claims bound: bound now, or gone (lessor deletes one only with its claim)."""
    taken = []
    for name in sorted(storm.free_standing):
        handle = await get(kube, HANDLE, OPS, name)
        if handle is None or handle["spec"].get("resourceClaim"):
            taken.append(name)
    return taken


async def test_actor_chaos_during_a_claim_storm(kube: Gateway, namespace: str, operator: Any, settles: Any,
                                                chaos_seed: int, sampled: Any) -> None:
    storm = Storm(kube, namespace, random.Random(chaos_seed))
    await storm.lab()
    try:
        async with sampled(lambda: shared_handles(kube, storm), grace=0), \
                ChaosMonkey(operator.system, rate=20.0, kinds={"claim", "pool", "handle"}, seed=chaos_seed) as monkey:
            await storm.run(10)
        assert len(monkey.kills) > 50, "the monkey should have killed plenty of actors"
        await settles(lambda: violations(kube, storm), 60)
        assert await free_standing_taken(kube, storm), "claims should have bound free-standing handles"
    finally:
        await storm.clean()


async def test_operator_sigkilled_mid_storm(tmp_path: Path, settles: Any, killed_operator: Any, chaos_seed: int,
                                           sampled: Any) -> None:
    """A separate control plane, so that only the operator under test acts on it."""
    rng = random.Random(chaos_seed)
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp:
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=lambda _: None)
            ns = f"chaos-{uuid.uuid4().hex[:6]}"
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
            storm = Storm(kube, ns, rng)
            await storm.lab()

            async with sampled(lambda: shared_handles(kube, storm), grace=0):
                kills = await killed_operator(cp, storm.run(10), rng=rng,
                                              then=lambda: settles(lambda: violations(kube, storm), 60))
            assert kills == 3
