"""Poolboy's test/roles/poolboy_test_simple/tasks/test-pool-03.yaml, in lessor's terms.

A pool in provider mode (`spec.provider` with `parameterValues`, no `spec.resources`) keeps its handles
made from the provider's `template.definition` rendered with those values (the others take their
defaults). A claim in provider mode with the same values binds one of them, and the pool makes another. A
claim that lists the same resource in `spec.resources` is not served by that pool: it gets a handle of its
own, with no `spec.provider`. Deleting the pool takes its unbound handles only.
"""

from __future__ import annotations

from lessor.gateway.resources import CLAIM, HANDLE, POOL
from tests.polling import get, gone, until

from .lab import OPS, TEST_KIND, Scenario, bound_to, parameters_spec, state


async def test_a_pool_in_provider_mode_serves_claims_with_its_values_and_only_those(scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider = pool = scenario.name("test-pool-03")
    await scenario.put(scenario.poolboy("ResourceProvider", provider, parameters_spec(
        scenario.override({"name": f"{provider}-{{{{ guid }}}}"}), "{{ numbervar | int }}", "{{ stringvar }}")))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "minAvailable": 2, "provider": {"name": provider, "parameterValues": {"numbervar": 1}}}))

    handles = await scenario.unbound(pool, 2)
    reference = handles[0]["status"]["resources"][0]["reference"]
    made = await until(kube, TEST_KIND, ns, reference["name"], lambda _: True)
    assert made["spec"] == {"numbervalue": 1, "stringvalue": "one"}  # the pool's value, and the default
    assert handles[0]["spec"]["provider"] == {"name": provider, "parameterValues": {"numbervar": 1,
                                                                                   "stringvar": "one"}}

    await scenario.put(scenario.poolboy("ResourceClaim", "test-pool-03", {
        "provider": {"name": provider, "parameterValues": {"numbervar": 1}}}))
    claim = await until(kube, CLAIM, ns, "test-pool-03", lambda c: state(c) is not None)
    handle_name = bound_to(claim)
    assert handle_name in {h["metadata"]["name"] for h in handles}  # one of the pool's
    guid = (handle_name or "").removeprefix("guid-")
    assert (state(claim) or {})["metadata"]["name"] == f"{provider}-{guid}"
    await scenario.unbound(pool, 2)  # and the pool made another

    await scenario.put(scenario.poolboy("ResourceClaim", "test-pool-03-no-parameters", {"resources": [
        {"name": "test-pool-03", "provider": scenario.provider_ref(provider),
         "template": {"spec": {"numbervalue": 1, "stringvalue": "one"}}}]}))
    plain = await until(kube, CLAIM, ns, "test-pool-03-no-parameters", lambda c: bound_to(c) is not None)
    own = await get(kube, HANDLE, OPS, bound_to(plain) or "")
    assert own is not None and "provider" not in own["spec"] and "resourcePool" not in own["spec"]

    await kube.delete(POOL, OPS, pool)
    await scenario.unbound(pool, 0, reported=False)
    assert await get(kube, HANDLE, OPS, handle_name or "") is not None  # the bound one stays with its claim

    for name, handle in (("test-pool-03", handle_name), ("test-pool-03-no-parameters", bound_to(plain))):
        await kube.delete(CLAIM, ns, name)
        await gone(kube, HANDLE, OPS, handle or "")
