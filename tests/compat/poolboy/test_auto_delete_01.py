"""Poolboy's auto-delete-01 (test/roles/poolboy_test_simple/tasks/test-auto-delete-01.yaml): a claim whose
`autoDelete.when` reads its `status.summary` (the provider's `statusSummaryTemplate` over the resource) is deleted,
with its handle and resource, once a parameter change makes the summary say so."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, guid, has_state, summarized_provider


async def test_a_claim_deletes_itself_when_its_summary_says_so(kube: Gateway, namespace: str,
                                                                scenario: Scenario) -> None:
    provider = scenario.name("auto-delete-01")
    await scenario.put(summarized_provider(scenario, provider), scenario.provider_claim(
        "auto-delete-01-a", provider, {"stringvar": "foo"},
        autoDelete={"when": "status.summary.stringValue|default('') == 'delete'"}))

    claim = await until(kube, CLAIM, namespace, "auto-delete-01-a",
                        lambda c: has_state(c) and c["status"].get("summary") is not None)
    handle, resource = bound_to(claim) or "", f"{provider}-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert claim["status"]["summary"] == {"stringValue": "foo"}
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"]["stringvalue"] == "foo"

    await kube.merge_patch(CLAIM, namespace, "auto-delete-01-a",
                           {"spec": {"provider": {"parameterValues": {"stringvar": "delete"}}}})
    await gone(kube, CLAIM, namespace, "auto-delete-01-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
