"""Poolboy's ready-01 (test/roles/poolboy_test_simple/tasks/test-ready-01.yaml): a claim whose resource is not
ready by the provider's `readinessCheck` is not Ready and has no `firstReady`, its default lifespan (1d) counted
from its start; once a change of values makes the resource ready, the claim is Ready, `firstReady` is set and the
default lifespan counts from it.

Poolboy's `status.ready` boolean of the claim is lessor's `Ready` condition (its handle keeps the boolean)."""

from __future__ import annotations

from datetime import timedelta

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from lessor.templates import parse_timestamp
from tests.polling import until

from .lab import OPS, Scenario, bound_to, has, has_state


def lasting(lifespan: dict[str, str], since: str) -> timedelta:
    length: timedelta = parse_timestamp(lifespan["end"]) - parse_timestamp(lifespan[since])
    return length


async def test_the_default_lifespan_counts_from_the_first_ready(kube: Gateway, namespace: str,
                                                                scenario: Scenario) -> None:
    provider = scenario.name("ready-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "healthCheck": "spec.numbervalue >= 0", "readinessCheck": "spec.numbervalue > 0",
            "lifespan": {"default": "1d", "maximum": "7d", "relativeMaximum": "3d"},
            "override": scenario.override({"name": "ready-01-{{ guid }}"}),
            "parameters": [{"name": "numbervar", "allowUpdate": True, "validation": {"openAPIV3Schema": {
                "type": "integer", "default": 0, "minimum": 0}}}],
            "template": {"enable": True, "definition": {"spec": {"numbervalue": "{{ numbervar | int }}"}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]}),
        scenario.provider_claim("ready-01", provider, {"numbervar": 0}))

    claim = await until(kube, CLAIM, namespace, "ready-01", lambda c: has_state(c)
                        and has("Ready", "ResourcesNotReady", "False")(c) and "end" in c["status"].get("lifespan", {}))
    lifespan = claim["status"]["lifespan"]
    assert "firstReady" not in lifespan
    assert lasting(lifespan, "start") == timedelta(days=1)
    handle = await kube.get(HANDLE, OPS, bound_to(claim) or "")
    assert handle["status"]["ready"] is False and handle["status"]["healthy"] is True

    await kube.merge_patch(CLAIM, namespace, "ready-01", {"spec": {"provider": {"parameterValues": {"numbervar": 1}}}})
    claim = await until(kube, CLAIM, namespace, "ready-01", lambda c: has("Ready", "Ready")(c)
                        and "firstReady" in c["status"]["lifespan"])
    assert lasting(claim["status"]["lifespan"], "firstReady") == timedelta(days=1)
