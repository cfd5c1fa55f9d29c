"""Poolboy's test/roles/poolboy_test_simple/tasks/test-ignore-01.yaml, in lessor's terms.

The ignore label (Poolboy's `poolboy.gpte.redhat.com/ignore`, which `lessor convert` maps onto
`lessor.dev/ignore`) makes the operator leave a claim and its handle alone: a change to the claim does not
reach its resource, a deleted resource is not made again, a new claim is not even given a status. Taking the
label off hands them back, and the operator catches up with what changed meanwhile.

Written without Poolboy's `now()` timestamp in the resource (lessor's sandbox has no `now()`): instead of
watching a time stop moving, the test changes the claim and deletes the resource while it is ignored, and
uses a second claim made afterwards as the witness that the operator was at work meanwhile.

The scenario's last part is an administrator's import: a claim restored with its status, a handle with a
hand-written status, and a resource made by hand, all under the label. When the label goes, lessor takes
them over as Poolboy does: the handle adopts the resource its status names (docs/claims.md says why that is
safe), and from then on it is lessor's, changed with the claim and deleted with it.
"""

from __future__ import annotations

from typing import Any

from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import get, gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, state

IGNORE = "lessor.dev/ignore"


def claim(scenario: Scenario, name: str, provider: str, value: str, **metadata: Any) -> dict[str, Any]:
    return scenario.poolboy("ResourceClaim", name, {"provider": {"name": provider,
                                                                 "parameterValues": {"stringvar": value}}}, **metadata)


async def witness(scenario: Scenario, provider: str, name: str) -> None:
    """A claim made now, followed until its resource exists: the operator was at work meanwhile."""
    await scenario.put(claim(scenario, name, provider, "three"))
    await until(scenario.kube, CLAIM, scenario.namespace, name, lambda c: state(c) is not None)


async def put_provider(scenario: Scenario) -> str:
    """Poolboy's test-ignore-01 provider: a ResourceClaimTest named `<provider>-<guid>` with the claim's stringvar."""
    provider = scenario.name("test-ignore-01")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, {
        "override": scenario.override({"name": f"{provider}-{{{{ guid }}}}"}),
        "parameters": [{"name": "stringvar", "allowUpdate": True, "required": True, "validation": {
            "openAPIV3Schema": {"type": "string", "default": "one", "enum": ["one", "two", "three"]}}}],
        "template": {"enable": True, "definition": {"spec": {"stringvalue": "{{ stringvar }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}],
    }))
    return provider


async def test_the_ignore_label_leaves_a_claim_and_its_handle_alone_until_it_goes(scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider = await put_provider(scenario)

    # a: a bound claim and its handle, labelled ignored, then changed behind the operator's back
    await scenario.put(claim(scenario, "test-ignore-01-a", provider, "one"))
    claim_a = await until(kube, CLAIM, ns, "test-ignore-01-a", lambda c: state(c) is not None)
    handle = bound_to(claim_a) or ""
    resource = f"{provider}-{handle.removeprefix('guid-')}"
    assert (state(claim_a) or {})["metadata"]["name"] == resource
    assert (state(claim_a) or {})["spec"] == {"stringvalue": "one"}

    await kube.merge_patch(HANDLE, OPS, handle, {"metadata": {"labels": {IGNORE: ""}}})
    await kube.merge_patch(CLAIM, ns, "test-ignore-01-a", {"metadata": {"labels": {IGNORE: ""}}})
    await kube.merge_patch(CLAIM, ns, "test-ignore-01-a",
                           {"spec": {"provider": {"parameterValues": {"stringvar": "two"}}}})
    await kube.delete(TEST_KIND, ns, resource)
    await gone(kube, TEST_KIND, ns, resource)
    await witness(scenario, provider, "test-ignore-01-witness-a")
    assert await get(kube, TEST_KIND, ns, resource) is None  # not made again
    left = await get(kube, HANDLE, OPS, handle)
    assert left is not None and left["spec"]["resources"][0]["template"]["spec"]["stringvalue"] == "one"

    await kube.merge_patch(HANDLE, OPS, handle, {"metadata": {"labels": {IGNORE: None}}})
    await kube.merge_patch(CLAIM, ns, "test-ignore-01-a", {"metadata": {"labels": {IGNORE: None}}})
    back = await until(kube, TEST_KIND, ns, resource, lambda r: r["spec"].get("stringvalue") == "two")
    assert back["spec"] == {"stringvalue": "two"}  # made again, with the change made while ignored

    await kube.delete(CLAIM, ns, "test-ignore-01-a")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, ns, resource)

    # b: a claim created ignored, in Poolboy's words: not even given a status until the label goes
    await scenario.put(claim(scenario, "test-ignore-01-b", provider, "one",
                             labels={"poolboy.gpte.redhat.com/ignore": ""}))
    created = await get(kube, CLAIM, ns, "test-ignore-01-b")
    assert created is not None and created["metadata"]["labels"] == {IGNORE: ""}
    await witness(scenario, provider, "test-ignore-01-witness-b")
    claim_b = await get(kube, CLAIM, ns, "test-ignore-01-b")
    assert claim_b is not None and "status" not in claim_b
    handles, _ = await kube.list(HANDLE, OPS)
    assert not [h for h in handles if (h["spec"].get("resourceClaim") or {}).get("name") == "test-ignore-01-b"]

    await kube.merge_patch(CLAIM, ns, "test-ignore-01-b", {"metadata": {"labels": {IGNORE: None}}})
    claim_b = await until(kube, CLAIM, ns, "test-ignore-01-b", lambda c: state(c) is not None)
    assert (state(claim_b) or {})["spec"] == {"stringvalue": "one"}


async def test_an_administrators_import_under_the_ignore_label_is_taken_over_when_it_goes(
        scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider = await put_provider(scenario)
    handle, guid = f"guid-{scenario.suffix}", scenario.suffix
    resource = f"{provider}-{guid}"
    ignored = {"poolboy.gpte.redhat.com/ignore": ""}

    # The claim, restored under the label: lessor gives it no status; the administrator restores it.
    await scenario.put(claim(scenario, "test-ignore-01-c", provider, "one", labels=ignored))
    await kube.patch_status(CLAIM, ns, "test-ignore-01-c", {"resourceHandle": {"name": handle, "namespace": OPS}})
    # The handle, under the label too, with the status Poolboy kept: its resource's reference.
    await scenario.put(scenario.poolboy("ResourceHandle", handle, {
        "resourceClaim": {"apiVersion": "poolboy.gpte.redhat.com/v1", "kind": "ResourceClaim",
                          "name": "test-ignore-01-c", "namespace": ns},
        "resources": [{"name": "test-ignore-01", "provider": scenario.provider_ref(provider),
                       "template": {"spec": {"stringvalue": "one"}}}], "vars": {}}, labels=ignored))
    reference = {"apiVersion": TEST_KIND.api_version, "kind": TEST_KIND.kind, "name": resource, "namespace": ns}
    await kube.patch_status(HANDLE, OPS, handle, {"resources": [
        {"name": "test-ignore-01", "provider": {"name": provider}, "reference": reference}]})
    # The resource, made by hand with Poolboy's marks (no lessor's).
    made = await kube.create(TEST_KIND, ns, {
        "apiVersion": TEST_KIND.api_version, "kind": TEST_KIND.kind, "metadata": {"name": resource, "annotations": {
            "poolboy.gpte.redhat.com/resource-handle-name": handle,
            "poolboy.gpte.redhat.com/resource-handle-namespace": "poolboy",
            "poolboy.gpte.redhat.com/resource-index": "0"}},
        "spec": {"stringvalue": "one", "ts": "1970-01-01T00:00:00Z"}})
    await witness(scenario, provider, "test-ignore-01-witness-c")
    untouched = await get(kube, TEST_KIND, ns, resource)
    assert untouched is not None and untouched["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]

    await kube.merge_patch(HANDLE, OPS, handle, {"metadata": {"labels": {IGNORE: None}}})
    await kube.merge_patch(CLAIM, ns, "test-ignore-01-c", {"metadata": {"labels": {IGNORE: None}}})
    taken = await until(kube, CLAIM, ns, "test-ignore-01-c", lambda c: state(c) is not None)
    assert bound_to(taken) == handle
    assert (state(taken) or {})["metadata"]["name"] == resource
    adopted = await get(kube, TEST_KIND, ns, resource)
    assert adopted is not None and adopted["metadata"]["uid"] == made["metadata"]["uid"]  # the same object
    assert adopted["metadata"]["labels"]["lessor.dev/resource-handle-name"] == handle  # marked as lessor's
    rendered = next(c for c in (await get(kube, HANDLE, OPS, handle) or {})["status"]["conditions"]
                    if c["type"] == "Rendered")
    assert rendered["status"] == "True", rendered

    # Managed from now on: the claim's change reaches it, and it goes with the claim.
    await kube.merge_patch(CLAIM, ns, "test-ignore-01-c", {"spec": {"provider": {"parameterValues": {
        "stringvar": "two"}}}})
    await until(kube, TEST_KIND, ns, resource, lambda r: r["spec"].get("stringvalue") == "two")
    await kube.delete(CLAIM, ns, "test-ignore-01-c")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, ns, resource)
