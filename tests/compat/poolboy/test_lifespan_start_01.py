"""Poolboy's lifespan-start-01 (test/roles/poolboy_test_simple/tasks/test-lifespan-start-01.yaml): a claim that
asks to start a few seconds from now is not handled before then (no `status.lifespan.start`, no handle; lessor
says so with Bound=False, `Scheduled`), then is bound and gets its resource; all of it goes with the claim."""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from lessor.templates import parse_timestamp
from tests.polling import gone, until
from tests.slowness import scaled

from .lab import OPS, TEST_KIND, Scenario, bound_to, has


async def test_a_claim_is_not_handled_before_its_start(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("lifespan-start-01")
    # Poolboy asks for 3 s from now; here as long as this machine needs to write the claim's first status.
    start = (datetime.now(timezone.utc) + timedelta(seconds=math.ceil(scaled(2)) + 1)).replace(microsecond=0)
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "lifespan-start-01-{{ guid }}"}),
            "parameters": [{"name": "stringvar", "allowUpdate": True, "required": True,
                            "validation": {"openAPIV3Schema": {"type": "string"}}}],
            "template": {"enable": True, "definition": {"spec": {"stringvalue": "{{ stringvar }}"}}}}),
        scenario.provider_claim("lifespan-start-01", provider, {"stringvar": "test"},
                                lifespan={"start": start.strftime("%Y-%m-%dT%H:%M:%SZ")}))

    waiting = await until(kube, CLAIM, namespace, "lifespan-start-01", has("Bound", "Scheduled", "False"))
    assert "start" not in (waiting["status"].get("lifespan") or {}) and bound_to(waiting) is None

    claim = await until(kube, CLAIM, namespace, "lifespan-start-01", lambda c: bound_to(c) is not None
                        and bool((c["status"].get("lifespan") or {}).get("start"))
                        and all(r.get("reference") for r in c["status"].get("resources") or [{}]))
    handle = await kube.get(HANDLE, OPS, bound_to(claim) or "")
    assert parse_timestamp(handle["metadata"]["creationTimestamp"]) >= start  # nothing made before the start
    assert parse_timestamp(claim["status"]["lifespan"]["start"]) >= start
    reference = claim["status"]["resources"][0]["reference"]

    await kube.delete(CLAIM, namespace, "lifespan-start-01")
    await gone(kube, CLAIM, namespace, "lifespan-start-01")
    await gone(kube, HANDLE, OPS, handle["metadata"]["name"])
    await gone(kube, TEST_KIND, reference["namespace"], reference["name"])
