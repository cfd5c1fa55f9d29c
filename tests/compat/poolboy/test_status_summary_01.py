"""Poolboy's status-summary-01 (test/roles/poolboy_test_simple/tasks/test-status-summary-01.yaml): a provider's
`statusSummaryTemplate` over the resource's state gives the claim's `status.summary`, which follows a change of
values; Poolboy writes the same summary on the handle too, and on a free-standing handle that no claim binds."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import until

from .lab import OPS, PARAMETERS, Scenario, bound_to, guid, has_state


def summarized(scenario: Scenario, name: str) -> dict[str, Any]:
    return scenario.poolboy("ResourceProvider", name, {
        "healthCheck": "spec.stringvalue is defined",
        "readinessCheck": "spec.stringvalue in ('one', 'two', 'three')",
        "override": scenario.override({"name": "status-summary-01-{{ guid }}"}), "parameters": [PARAMETERS[0]],
        "statusSummaryTemplate": {"stringValue": "{{ resources[0].state.spec.stringvalue }}"},
        "template": {"enable": True, "definition": {"spec": {"stringvalue": "{{ stringvar }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]})


def summary(obj: Mapping[str, Any]) -> Any:
    return (obj.get("status") or {}).get("summary")


async def test_the_claims_summary_follows_its_resource(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("status-summary-01")
    await scenario.put(summarized(scenario, provider), scenario.provider_claim("status-summary-01-a", provider))

    claim = await until(kube, CLAIM, namespace, "status-summary-01-a", lambda c: has_state(c) and summary(c))
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == f"status-summary-01-{guid(claim)}"
    assert summary(claim) == {"stringValue": "one"}

    await kube.merge_patch(CLAIM, namespace, "status-summary-01-a",
                           {"spec": {"provider": {"parameterValues": {"stringvar": "two"}}}})
    await until(kube, CLAIM, namespace, "status-summary-01-a", lambda c: summary(c) == {"stringValue": "two"})


async def test_handles_show_the_summary_too(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("status-summary-01-h")
    await scenario.put(summarized(scenario, provider), scenario.provider_claim("status-summary-01-b", provider))
    claim = await until(kube, CLAIM, namespace, "status-summary-01-b", lambda c: has_state(c) and summary(c))
    # the claim's summary is rendered from what the handle reports: the handle's own is due by now
    assert summary(await kube.get(HANDLE, OPS, bound_to(claim) or "")) == {"stringValue": "one"}

    free = f"guid-{scenario.suffix}s"
    await scenario.put(scenario.poolboy("ResourceHandle", free, {"resources": [
        {"name": "test", "provider": scenario.provider_ref(provider), "template": {"spec": {"stringvalue": "one"}}}]}))
    await until(kube, HANDLE, OPS, free, lambda h: summary(h) == {"stringValue": "one"}, timeout=10)
