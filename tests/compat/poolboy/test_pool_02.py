"""Poolboy's pool-02 (test/roles/poolboy_test_simple/tasks/test-pool-02.yaml): a pool whose lifespan settings are
templates over the claim; the claim bound to its handle shows what they gave, an end beyond relativeMaximum is
clamped to it, the pool makes a new handle, and deleting the pool leaves the bound handle.

First, as there, the unbound handle's `spec.lifespan.end`: its creation + `unclaimed`."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, POOL
from lessor.templates import parse_timestamp
from tests.polling import gone, until

from .lab import LIFESPAN, OPS, VALUE_SCHEMA, Scenario, has_state, ready


async def test_pool_lifespan_templates_follow_the_claim(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider, pool = scenario.name("pool-02"), scenario.name("pool-02")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {"template": {"enable": True}, "validation": VALUE_SCHEMA,
                                                        "override": scenario.override({"name": "pool-02-{{ guid }}"})}),
        scenario.poolboy("ResourcePool", pool, {"lifespan": {**LIFESPAN, "unclaimed": "6h"}, "minAvailable": 1,
                                                "resources": [{"provider": {"name": provider, "namespace": "poolboy"},
                                                               "template": {"spec": {"value": "foo"}}}]}))
    assert not [n for n in scenario.notes if n.field.startswith("spec.lifespan")]
    await until(kube, POOL, OPS, pool, lambda p: ((p.get("status") or {}).get("resourceHandleCount") or {})
                .get("ready") == 1)
    [waiting] = await scenario.unbound_of_pool(pool)
    created = parse_timestamp(waiting["metadata"]["creationTimestamp"])
    wait_end = parse_timestamp(waiting["spec"]["lifespan"]["end"]) - created
    assert timedelta(hours=6) - timedelta(seconds=2) <= wait_end <= timedelta(hours=6) + timedelta(seconds=2)

    await scenario.put(scenario.poolboy("ResourceClaim", "pool-02", {"resources": [
        {"provider": {"name": provider}, "template": {"spec": {"value": "foo"}}}]}))
    claim = await until(kube, CLAIM, namespace, "pool-02",
                        lambda c: has_state(c) and ready(c) and "end" in c["status"].get("lifespan", {}))
    handle = claim["status"]["resourceHandle"]["name"]
    assert (await kube.get(HANDLE, OPS, handle))["spec"]["resourcePool"]["name"] == pool
    guid = handle[len("guid-"):]
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == f"pool-02-{guid}"
    lifespan = claim["status"]["lifespan"]
    assert (lifespan["maximum"], lifespan["relativeMaximum"]) == ("2h", "1h")
    length = parse_timestamp(lifespan["end"]) - parse_timestamp(lifespan["start"])
    assert timedelta(minutes=30) <= length <= timedelta(minutes=30, seconds=1) + \
        (parse_timestamp(lifespan["firstReady"]) - parse_timestamp(lifespan["start"]))

    await kube.merge_patch(CLAIM, namespace, "pool-02", {"spec": {"lifespan": {"end": "2999-12-31T00:00:00Z"}}})
    claim = await until(kube, CLAIM, namespace, "pool-02",
                        lambda c: c["status"]["lifespan"]["end"] != lifespan["end"])
    left = parse_timestamp(claim["status"]["lifespan"]["end"]) - datetime.now(timezone.utc)
    assert timedelta(seconds=3500) <= left <= timedelta(seconds=3700)  # clamped to relativeMaximum, 1h from now

    async def replenished() -> list[dict[str, Any]]:
        return await scenario.unbound_of_pool(pool)

    await until(kube, POOL, OPS, pool, lambda p: ((p.get("status") or {}).get("resourceHandleCount") or {})
                .get("available") == 1)
    assert len(await replenished()) == 1

    await kube.delete(POOL, OPS, pool)
    await gone(kube, POOL, OPS, pool)
    for extra in await replenished():
        await gone(kube, HANDLE, OPS, extra["metadata"]["name"])
    assert (await kube.get(HANDLE, OPS, handle))["spec"]["resourceClaim"]["name"] == "pool-02"

    await kube.delete(CLAIM, namespace, "pool-02")
    await gone(kube, CLAIM, namespace, "pool-02")
    await gone(kube, HANDLE, OPS, handle)
