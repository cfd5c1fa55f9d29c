"""Poolboy's auto-detach-01 (test/roles/poolboy_test_simple/tasks/test-auto-detach-01.yaml): a claim whose
`autoDetach.when` reads its `status.summary` loses its handle and resource once a parameter change makes the
summary say so, and stays, marked `status.resourceHandle.detached`, until it is deleted."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import get, gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, guid, has, has_state, summarized_provider


async def test_a_claim_detaches_when_its_summary_says_so_and_stays(kube: Gateway, namespace: str,
                                                                    scenario: Scenario) -> None:
    provider = scenario.name("auto-detach-01")
    await scenario.put(summarized_provider(scenario, provider), scenario.provider_claim(
        "auto-detach-01-a", provider, {"stringvar": "foo"},
        autoDetach={"when": "status.summary.stringValue|default('') == 'detach'"}))

    claim = await until(kube, CLAIM, namespace, "auto-detach-01-a",
                        lambda c: has_state(c) and c["status"].get("summary") is not None)
    handle, resource = bound_to(claim) or "", f"{provider}-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"]["stringvalue"] == "foo"

    await kube.merge_patch(CLAIM, namespace, "auto-detach-01-a",
                           {"spec": {"provider": {"parameterValues": {"stringvar": "detach"}}}})
    detached = await until(kube, CLAIM, namespace, "auto-detach-01-a",
                           lambda c: (c["status"].get("resourceHandle") or {}).get("detached") is True)
    assert has("Bound", "Detached", "False")(detached) and has("Ready", "Detached", "False")(detached)
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
    assert await get(kube, CLAIM, namespace, "auto-detach-01-a") is not None  # the claim stays

    await kube.delete(CLAIM, namespace, "auto-detach-01-a")
    await gone(kube, CLAIM, namespace, "auto-detach-01-a")
