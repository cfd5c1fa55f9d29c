"""ResourcePoolScaling against the real API server: a one-off scale-up beyond minAvailable, at a given time,
created exactly once, whatever came first (the pool or the scaling: Poolboy's #155) and whatever is killed."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, POOL, SCALING
from lessor.mailbox import ChaosMonkey
from tests.app.test_kubectl_columns import table
from tests.provisioning.test_operator import OPS, Lab, claim, configmap_provider, counted, lab, ready, resource
from tests.polling import discard, until

pytestmark = pytest.mark.usefixtures("operator")
__all__ = ["lab"]  # the fixture
API = "lessor.dev/v1alpha1"
LABEL = "lessor.dev/resource-pool-scaling"


async def scaling(kube: Gateway, name: str, pool: str, count: int, at: dt.datetime | None = None) -> None:
    spec: dict[str, Any] = {"resourcePool": {"name": pool}, "count": count}
    if at is not None:
        spec["at"] = at.strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.create(SCALING, OPS, {"apiVersion": API, "kind": "ResourcePoolScaling", "metadata": {"name": name},
                                     "spec": spec})


def state(count: int, value: str) -> Any:
    return lambda s: (s.get("status") or {}).get("state") == value and s["status"].get("count") == count


async def created_for(kube: Gateway, name: str) -> list[dict[str, Any]]:
    handles, _ = await kube.list(HANDLE, OPS, label_selector=f"{LABEL}={name}")
    return handles


async def test_a_scaling_adds_its_count_beyond_min_available_once(kube: Gateway, namespace: str, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=1)
    await until(kube, POOL, OPS, pool, counted("available", 1))
    name = lab.name("day")
    await scaling(kube, name, pool, 3)
    try:
        done = await until(kube, SCALING, OPS, name, state(3, "done"))
        assert done["status"]["message"] == "3 of 3 handles created"
        rows, _ = await table(kube, SCALING, OPS)  # what `kubectl get rpscale` shows
        assert {k: rows[name][k] for k in ("Pool", "Count", "Created", "State")} == {
            "Pool": pool, "Count": 3, "Created": 3, "State": "done"}
        await until(kube, POOL, OPS, pool, counted("available", 4))
        assert len(await created_for(kube, name)) == 3
        # Claims take handles; the pool keeps minAvailable and makes no more for the scaling.
        for i in range(3):
            await claim(kube, namespace, f"c{i}", resource(env, {"data": {"size": "small"}}))
        for i in range(3):
            await until(kube, CLAIM, namespace, f"c{i}", ready)
        await until(kube, POOL, OPS, pool, counted("available", 1))
        assert len(await created_for(kube, name)) == 3
        assert (await kube.get(SCALING, OPS, name))["status"]["count"] == 3
    finally:
        await discard(kube, SCALING, OPS, name)


async def test_a_scaling_waits_for_its_time_and_says_so(kube: Gateway, lab: Lab) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=0)
    name = lab.name("later")
    at = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=5)
    await scaling(kube, name, pool, 2, at=at)
    try:
        waiting = await until(kube, SCALING, OPS, name, state(0, "waiting"))
        assert waiting["status"]["message"] == f"the pool creates 2 handles at {at.strftime('%Y-%m-%dT%H:%M:%SZ')}"
        assert await created_for(kube, name) == []
        await until(kube, SCALING, OPS, name, state(2, "done"), timeout=30)
        assert dt.datetime.now(dt.UTC) >= at
        await until(kube, POOL, OPS, pool, counted("available", 2))
    finally:
        await discard(kube, SCALING, OPS, name)


async def test_a_scaling_made_before_its_pool_scales_the_pool_once_it_exists(kube: Gateway, lab: Lab) -> None:
    """Poolboy #155: a scaling whose pool its operator had not cached stayed `waiting` for good."""
    env = await lab.provider("env", **configmap_provider())
    pool_name = lab.name("later-pool")
    name = lab.name("early")
    await scaling(kube, name, pool_name, 2)
    try:
        pool = await lab.pool("later-pool", env, {"data": {"size": "small"}}, min_available=1)
        assert pool == pool_name
        await until(kube, SCALING, OPS, name, state(2, "done"))
        await until(kube, POOL, OPS, pool, counted("available", 3))
    finally:
        await discard(kube, SCALING, OPS, name)


async def test_actor_chaos_during_a_scale_up_creates_each_handle_once(
        kube: Gateway, lab: Lab, operator: Any, chaos_seed: int, sampled: Any, settles: Any) -> None:
    env = await lab.provider("env", **configmap_provider())
    pool = await lab.pool("envs", env, {"data": {"size": "small"}}, min_available=2, maxUnready=2)
    name, count = lab.name("chaos"), 20

    async def too_many() -> list[str]:
        made = len(await created_for(kube, name))
        return [f"{made} handles created for a scaling of {count}"] if made > count else []

    async def not_done() -> list[str]:
        found = await too_many()
        made = len(await created_for(kube, name))
        status = (await kube.get(SCALING, OPS, name)).get("status") or {}
        if made != count or status.get("state") != "done" or status.get("count") != count:
            found.append(f"{made} created, status {status}")
        pool_status = (await kube.get(POOL, OPS, pool)).get("status") or {}
        if (pool_status.get("resourceHandleCount") or {}).get("available") != count + 2:
            found.append(f"pool {pool_status.get('resourceHandleCount')}")
        return found

    try:
        async with sampled(too_many, grace=0), \
                ChaosMonkey(operator.system, rate=15.0, kinds={"pool", "handle"}, seed=chaos_seed) as monkey:
            await scaling(kube, name, pool, count)
            await asyncio.gather(asyncio.sleep(3), until(  # sampled for a few seconds at least
                kube, SCALING, OPS, name, lambda s: (s.get("status") or {}).get("count", 0) >= count // 2, timeout=60))
        assert monkey.kills, "the monkey should have killed actors mid scale-up"
        await settles(not_done, 90)
    finally:
        await discard(kube, SCALING, OPS, name)

