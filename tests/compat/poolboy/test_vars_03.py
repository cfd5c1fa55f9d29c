"""Poolboy's vars-03 (test/roles/poolboy_test_simple/tasks/test-vars-03.yaml): checks written with Poolboy's
functions (`to_datetime`, `now(true)`, `parse_time_interval`) over a var; raising the var on the claim's handle
makes valid the update the provider's value refused, and it reaches the resource."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import until

from .lab import OPS, TEST_KIND, Scenario, has_state, merged, named_like

TIME = "%Y-%m-%dT%H:%M:%SZ"


def window(provider: str, start: datetime, end: datetime) -> dict[str, Any]:
    return {"resources": [{"provider": {"name": provider}, "template": {
        "metadata": {"name": "vars-03-a"}, "spec": {"start": start.strftime(TIME), "end": end.strftime(TIME)}}}]}


async def test_checks_with_poolboys_time_functions_see_the_handles_vars(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("vars-03")
    parse = "| to_datetime('%Y-%m-%dT%H:%M:%S%z')"
    times = {"type": "object", "additionalProperties": False, "required": ["start", "end"],
             "properties": {"start": {"type": "string"}, "end": {"type": "string"}}}
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "template": {"enable": True}, "vars": {"maximum_interval": "1h"},
        "override": scenario.override(),
        "updateFilters": [{"pathMatch": "/spec/(start|end)", "allowedOps": ["replace"]}],
        "validation": {**merged(named_like("vars-03"), spec=times), "checks": [
            {"name": "end relative to start",
             "check": f"spec.end {parse} - spec.start {parse} < maximum_interval | parse_time_interval"},
            {"name": "end relative to now",
             "check": f"spec.end {parse} - now(true) < maximum_interval | parse_time_interval"}]}}))
    start = datetime.now(timezone.utc).replace(microsecond=0)
    await scenario.put(scenario.poolboy("ResourceClaim", "vars-03-a",
                                        window(provider, start, start + timedelta(minutes=1))))
    claim = await until(kube, CLAIM, namespace, "vars-03-a", has_state)
    assert "validationError" not in claim["status"]["resources"][0]
    made = await kube.get(TEST_KIND, namespace, "vars-03-a")
    assert made["spec"]["end"] == (start + timedelta(minutes=1)).strftime(TIME)

    later = start + timedelta(minutes=80)
    await kube.merge_patch(CLAIM, namespace, "vars-03-a", {"spec": window(provider, start, later)})
    refused = await until(kube, CLAIM, namespace, "vars-03-a",
                          lambda c: "validationError" in c["status"]["resources"][0])
    assert refused["status"]["resources"][0]["validationError"] == \
        "spec.resources[0].template: check 'end relative to start' failed; " \
        "spec.resources[0].template: check 'end relative to now' failed"

    await kube.merge_patch(HANDLE, OPS, claim["status"]["resourceHandle"]["name"],
                           {"spec": {"vars": {"maximum_interval": "2h"}}})
    await until(kube, CLAIM, namespace, "vars-03-a", lambda c: "validationError" not in c["status"]["resources"][0])
    await until(kube, TEST_KIND, namespace, "vars-03-a", lambda obj: obj["spec"]["end"] == later.strftime(TIME))
