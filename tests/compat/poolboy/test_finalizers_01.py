"""Poolboy's finalizers-01 (test/roles/poolboy_test_simple/tasks/test-finalizers-01.yaml): a claim's handle,
and the claim's deletion completing through it.

A deliberate difference: Poolboy puts its finalizer on the handle (the scenario checks for it) so that the
handle's resources go before it does. lessor puts none (`lessor convert` drops Poolboy's): the resources a handle
made carry its `lessor.dev/resource-handle-name` label, and the handle's actor deletes them when the handle is
deleted by anyone, or at the next start if lessor was down meanwhile (docs/architecture.md, "Changed while lessor
was down"); a finalizer would only block deletion while lessor is not running. So the test checks what the
finalizer is there for: deleting the handle itself, as an admin might, still takes its resource, and the claim
gets another handle; deleting the claim takes handle and resource."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, PARAMETERS, TEST_KIND, Scenario, bound_to, guid, has_state


async def test_a_handle_takes_its_resource_with_it_without_a_finalizer(kube: Gateway, namespace: str,
                                                                        scenario: Scenario) -> None:
    provider = scenario.name("finalizers-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": "finalizers-01-{{ guid }}"}), "parameters": [PARAMETERS[0]],
            "template": {"enable": True, "definition": {"spec": {"stringvalue": "{{ stringvar }}"}}},
            "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}]}),
        scenario.provider_claim("finalizers-01-a", provider, {"stringvar": "one"}))

    claim = await until(kube, CLAIM, namespace, "finalizers-01-a", has_state)
    handle, resource = bound_to(claim) or "", f"finalizers-01-{guid(claim)}"
    state = claim["status"]["resources"][0]["state"]
    assert (state["metadata"]["name"], state["spec"]["stringvalue"]) == (resource, "one")
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"stringvalue": "one"}
    # Poolboy's step "Verify finalizers on ResourceHandle": lessor's handle has none.
    assert not (await kube.get(HANDLE, OPS, handle))["metadata"].get("finalizers")

    # What Poolboy's finalizer guarantees, without one: the deleted handle's resource goes too.
    await kube.delete(HANDLE, OPS, handle)
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
    claim = await until(kube, CLAIM, namespace, "finalizers-01-a",
                        lambda c: bound_to(c) not in (None, handle) and has_state(c))
    handle, resource = bound_to(claim) or "", f"finalizers-01-{guid(claim)}"
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"stringvalue": "one"}

    await kube.delete(CLAIM, namespace, "finalizers-01-a")
    await gone(kube, CLAIM, namespace, "finalizers-01-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
