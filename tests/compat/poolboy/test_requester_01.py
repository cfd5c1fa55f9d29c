"""Poolboy's test/roles/poolboy_test_simple/tasks/test-requester-01.yaml, in lessor's terms.

A provider with `resourceRequiresClaim` whose override names the requester (`requester_user`, the User
named by the claim namespace's `openshift.io/requester` annotation). (a) A claim gets its own handle and a
resource that names its requester. (b) A free-standing handle made first waits for a claim
(`status.resources[0].waitingFor: ResourceClaim`, nothing created); the next matching claim binds that very
handle, and only then is the resource created, naming the claim's requester.
"""

from __future__ import annotations

import pytest

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLAIM, HANDLE, NAMESPACE
from tests.polling import discard, gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, install_crd, state

pytestmark = pytest.mark.usefixtures("user_kind")
USER = Resource("user.openshift.io", "v1", "User", "users", namespaced=False)
_USER_CRD = {  # OpenShift's User, as much of it as the requester lookup reads
    "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
    "metadata": {"name": "users.user.openshift.io"},
    "spec": {"group": "user.openshift.io", "scope": "Cluster",
             "names": {"kind": "User", "plural": "users", "singular": "user", "listKind": "UserList"},
             "versions": [{"name": "v1", "served": True, "storage": True, "schema": {"openAPIV3Schema": {
                 "type": "object", "x-kubernetes-preserve-unknown-fields": True}}}]},
}


@pytest.fixture(scope="module")
async def user_kind(kube: Gateway) -> Resource:
    """OpenShift's User, where the requester lookup finds the requester's name."""
    await install_crd(kube, _USER_CRD)
    return USER


async def test_a_handle_that_waits_for_a_claim_is_bound_by_the_next_claim_and_names_its_requester(
        scenario: Scenario, kube: Gateway) -> None:
    user, provider = scenario.name("test-user"), scenario.name("test-requester-01")
    await kube.create(USER, None, {"apiVersion": "user.openshift.io/v1", "kind": "User",
                                   "metadata": {"name": user}, "identities": []})
    try:
        await kube.merge_patch(NAMESPACE, None, scenario.namespace,
                               {"metadata": {"annotations": {"openshift.io/requester": user}}})
        await scenario.put(scenario.poolboy("ResourceProvider", provider, {
            "override": scenario.override({"name": f"{provider}-{{{{ guid }}}}"},
                                          spec={"requesterName": "{{ requester_user.metadata.name }}"}),
            "resourceRequiresClaim": True,
            "template": {"enable": True},
        }))

        # (a) no handle waits: the claim gets one of its own
        await scenario.put(scenario.poolboy("ResourceClaim", "test-requester-01-a",
                                            {"resources": [{"provider": {"name": provider}}]}))
        claim_a = await until(kube, CLAIM, scenario.namespace, "test-requester-01-a", lambda c: state(c) is not None)
        assert (state(claim_a) or {}).get("spec") == {"requesterName": user}
        await kube.delete(CLAIM, scenario.namespace, "test-requester-01-a")
        await gone(kube, CLAIM, scenario.namespace, "test-requester-01-a")

        # (b) a free-standing handle, made first, waits for a claim and creates nothing meanwhile
        handle = f"guid-{scenario.suffix}b"
        await scenario.put(scenario.poolboy("ResourceHandle", handle,
                                            {"resources": [{"provider": scenario.provider_ref(provider)}]}))
        waiting = await until(kube, HANDLE, OPS, handle, lambda h: [
            r.get("waitingFor") for r in (h.get("status") or {}).get("resources") or ()] == ["ResourceClaim"])
        assert "reference" not in waiting["status"]["resources"][0]

        await scenario.put(scenario.poolboy("ResourceClaim", "test-requester-01-b",
                                            {"resources": [{"provider": {"name": provider}}]}))
        claim_b = await until(kube, CLAIM, scenario.namespace, "test-requester-01-b",
                              lambda c: bound_to(c) is not None and state(c) is not None)
        assert bound_to(claim_b) == handle
        made = state(claim_b)
        assert made is not None and made["spec"]["requesterName"] == user
        assert made["metadata"]["name"] == f"{provider}-{scenario.suffix}b"

        await kube.delete(CLAIM, scenario.namespace, "test-requester-01-b")
        await gone(kube, HANDLE, OPS, handle)
        await gone(kube, TEST_KIND, scenario.namespace, made["metadata"]["name"])
    finally:
        await discard(kube, USER, None, user)
