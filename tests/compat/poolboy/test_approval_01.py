"""Poolboy's approval-01 (test/roles/poolboy_test_simple/tasks/test-approval-01.yaml): a provider that requires
approval keeps a provider-mode claim waiting, with the provider's pending message, and nothing made for it; once
an approver sets `status.approval.state: approved`, the claim binds and gets its resource, which goes with it."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, guid, has, has_state

NUMBERVAR = {"name": "numbervar", "allowUpdate": True,
             "validation": {"openAPIV3Schema": {"type": "integer", "default": 0, "minimum": 0}}}


async def test_a_claim_waits_for_approval_then_binds(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("approval-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "approval": {"pendingMessage": "Test Pending", "required": True},
            "override": scenario.override({"name": "approval-01-{{ guid }}"}), "parameters": [NUMBERVAR],
            "template": {"enable": True, "definition": {"spec": {"numbervalue": "{{ numbervar | int }}"}}}}),
        scenario.provider_claim("approval-01", provider, {"numbervar": 1}))

    # Poolboy: status.approval pending with the provider's message, and no lifespan, handle, resources or summary.
    # lessor says the same with Bound=False, ApprovalPending; its status.resources lists the claim's entries
    # (name, provider) from the start, but none has a resource.
    pending = await until(kube, CLAIM, namespace, "approval-01", has("Bound", "ApprovalPending", "False"))
    status = pending["status"]
    assert status["approval"] == {"state": "pending", "message": "Test Pending"}
    assert bound_to(pending) is None and not status.get("lifespan") and status.get("summary") is None
    assert not [r for r in status.get("resources") or () if r.get("state") or r.get("reference")]
    handles, _ = await kube.list(HANDLE, OPS)
    assert not [h for h in handles if (h["spec"].get("resourceClaim") or {}).get("name") == "approval-01"
                and h["spec"]["resourceClaim"].get("namespace") == namespace]

    await kube.patch_status(CLAIM, namespace, "approval-01", {"approval": {"state": "approved"}})
    claim = await until(kube, CLAIM, namespace, "approval-01",
                        lambda c: has_state(c) and bool(c["status"].get("lifespan")))
    assert has("Bound", "Bound")(claim)
    assert claim["status"]["approval"]["state"] == "approved"
    handle, resource = bound_to(claim) or "", f"approval-01-{guid(claim)}"
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == resource
    assert (await kube.get(TEST_KIND, namespace, resource))["spec"] == {"numbervalue": 1}

    await kube.delete(CLAIM, namespace, "approval-01")
    await gone(kube, CLAIM, namespace, "approval-01")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, resource)
