"""The pool part of the legacy lifespan tests in Poolboy's test/roles/poolboy_test_simple/tasks/test.yaml
("Create test-lifespan resource pool" onwards), in lessor's terms.

A pool's unbound handle shows how long it waits for a claim: `spec.lifespan.end`, its creation plus the
pool's `unclaimed`, beside the pool's `default`, `maximum` and `relativeMaximum`. A claim that binds it gets
the pool's `default` from its binding (the wait's end is replaced). The pool replaces a handle at that
field's end, whatever wrote it: the field, not a timer of the operator's own, is the truth.
"""

from __future__ import annotations

import datetime as dt

from lessor.gateway.resources import CLAIM, HANDLE
from lessor.templates import parse_timestamp
from tests.polling import gone, until

from .lab import OPS, Scenario, bound_to


def seconds_between(start: str, end: str) -> float:
    return (parse_timestamp(end) - parse_timestamp(start)).total_seconds()


async def test_an_unbound_pool_handle_shows_the_end_of_its_wait_and_a_claim_gets_the_pools_default(
        scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider, pool = scenario.name("test-lifespan"), scenario.name("test-lifespan")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "override": scenario.override({"generateName": "test-lifespan-"}),
        "lifespan": {"default": "40s", "maximum": "30m"},
        "template": {"enable": True},
    }))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "minAvailable": 1,
        "lifespan": {"default": "23s", "maximum": "2h", "relativeMaximum": "1h", "unclaimed": "1h"},
        "resources": [{"provider": scenario.provider_ref(provider), "template": {"spec": {"vars": {}}}}]}))

    [handle] = await scenario.unbound(pool, 1, reported=False)
    lifespan = handle["spec"]["lifespan"]
    assert (lifespan["default"], lifespan["maximum"], lifespan["relativeMaximum"]) == ("23s", "2h", "1h")
    assert abs(seconds_between(handle["metadata"]["creationTimestamp"], lifespan["end"]) - 3600) <= 2
    assert lifespan["end"].endswith("Z") and "." not in lifespan["end"]  # whole seconds, as Poolboy parses them

    await scenario.put(scenario.poolboy("ResourceClaim", "test-lifespan-3", {"resources": [
        {"provider": scenario.provider_ref(provider), "template": {"spec": {"vars": {}}}}]}))
    claim = await until(kube, CLAIM, ns, "test-lifespan-3", lambda c: bound_to(c) is not None and all(
        key in ((c.get("status") or {}).get("lifespan") or {}) for key in ("start", "end", "firstReady"))
        and seconds_between(c["status"]["lifespan"]["firstReady"], c["status"]["lifespan"]["end"]) == 23)
    assert bound_to(claim) == handle["metadata"]["name"]
    # The default counts from the claim's first Ready (docs/api.md), which is its binding's second on a quiet
    # machine and may be a second later on a busy one.
    lifespan = claim["status"]["lifespan"]
    assert seconds_between(lifespan["firstReady"], lifespan["end"]) == 23
    assert 0 <= seconds_between(lifespan["start"], lifespan["firstReady"])


async def test_the_pool_replaces_an_unbound_handle_at_the_end_its_spec_shows(scenario: Scenario) -> None:
    kube = scenario.kube
    provider, pool = scenario.name("test-lifespan-end"), scenario.name("test-lifespan-end")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "override": scenario.override({"generateName": "test-lifespan-"}),
        "template": {"enable": True},
    }))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "minAvailable": 1, "lifespan": {"unclaimed": "1h"},
        "resources": [{"provider": scenario.provider_ref(provider), "template": {"spec": {}}}]}))
    [handle] = await scenario.unbound(pool, 1)
    name = handle["metadata"]["name"]

    soon = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=2)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.merge_patch(HANDLE, OPS, name, {"spec": {"lifespan": {"end": soon}}})  # an hour early
    await gone(kube, HANDLE, OPS, name)
    [fresh] = await scenario.unbound(pool, 1)
    assert fresh["metadata"]["name"] != name
