"""Poolboy's test/roles/poolboy_test_simple/tasks/test-pool-03.yaml, in lessor's terms.

A pool in provider mode (`spec.provider` with `parameterValues`, no `spec.resources`) keeps its handles
made from the provider's `template.definition` rendered with those values (the others take their
defaults). A claim in provider mode with the same values binds one of them, and the pool makes another. A
claim that lists the same resource in `spec.resources` is not served by that pool: it gets a handle of its
own, with no `spec.provider`. Deleting the pool takes its unbound handles only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE, POOL
from tests.compat.poolboy.binding_lab import OPS, TEST_KIND, Scenario, bound_to, install_test_kind, state
from tests.polling import get, gone, until

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
async def scenario(kube: Gateway, namespace: str) -> AsyncIterator[Scenario]:
    await install_test_kind(kube)
    made = Scenario(kube, namespace)
    yield made
    await made.clean()


def parameters_provider(scenario: Scenario, name: str) -> dict[str, object]:
    return scenario.poolboy("ResourceProvider", name, {
        "override": {"apiVersion": "poolboy.gpte.redhat.com/v1", "kind": "ResourceClaimTest",
                     "metadata": {"name": f"{name}-{{{{ guid }}}}", "namespace": scenario.namespace}},
        "parameters": [
            {"name": "stringvar", "allowUpdate": True, "required": True, "validation": {"openAPIV3Schema": {
                "type": "string", "default": "one", "enum": ["one", "two", "three"]}}},
            {"name": "numbervar", "allowUpdate": True, "validation": {"openAPIV3Schema": {
                "type": "integer", "default": 0, "minimum": 0}}},
        ],
        "template": {"enable": True, "definition": {"spec": {"numbervalue": "{{ numbervar | int }}",
                                                             "stringvalue": "{{ stringvar }}"}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}],
    })


async def test_a_pool_in_provider_mode_serves_claims_with_its_values_and_only_those(scenario: Scenario) -> None:
    kube, ns = scenario.kube, scenario.namespace
    provider = pool = scenario.name("test-pool-03")
    await scenario.put(parameters_provider(scenario, provider))
    await scenario.put(scenario.poolboy("ResourcePool", pool, {
        "minAvailable": 2, "provider": {"name": provider, "parameterValues": {"numbervar": 1}}}))

    handles = await scenario.unbound(pool, 2)
    reference = handles[0]["status"]["resources"][0]["reference"]
    made = await until(kube, TEST_KIND, ns, reference["name"], lambda _: True)
    assert made["spec"] == {"numbervalue": 1, "stringvalue": "one"}  # the pool's value, and the default
    assert handles[0]["spec"]["provider"] == {"name": provider, "parameterValues": {"numbervar": 1,
                                                                                   "stringvar": "one"}}

    await scenario.put(scenario.poolboy("ResourceClaim", "test-pool-03", {
        "provider": {"name": provider, "parameterValues": {"numbervar": 1}}}, namespace=ns))
    claim = await until(kube, CLAIM, ns, "test-pool-03", lambda c: state(c) is not None)
    handle_name = bound_to(claim)
    assert handle_name in {h["metadata"]["name"] for h in handles}  # one of the pool's
    guid = (handle_name or "").removeprefix("guid-")
    assert (state(claim) or {})["metadata"]["name"] == f"{provider}-{guid}"
    await scenario.unbound(pool, 2)  # and the pool made another

    await scenario.put(scenario.poolboy("ResourceClaim", "test-pool-03-no-parameters", {"resources": [
        {"name": "test-pool-03", "provider": scenario.provider_ref(provider),
         "template": {"spec": {"numbervalue": 1, "stringvalue": "one"}}}]}, namespace=ns))
    plain = await until(kube, CLAIM, ns, "test-pool-03-no-parameters", lambda c: bound_to(c) is not None)
    own = await get(kube, HANDLE, OPS, bound_to(plain) or "")
    assert own is not None and "provider" not in own["spec"] and "resourcePool" not in own["spec"]

    await kube.delete(POOL, OPS, pool)
    await scenario.unbound(pool, 0, reported=False)
    assert await get(kube, HANDLE, OPS, handle_name or "") is not None  # the bound one stays with its claim

    for name, handle in (("test-pool-03", handle_name), ("test-pool-03-no-parameters", bound_to(plain))):
        await kube.delete(CLAIM, ns, name)
        await gone(kube, HANDLE, OPS, handle or "")
