"""Poolboy's vars-01 (test/roles/poolboy_test_simple/tasks/test-vars-01.yaml): a provider's var in its override;
a var set on the claim's handle wins and reaches the resource."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from tests.polling import until

from .lab import OPS, TEST_KIND, Scenario, has_state, named_like


async def test_a_handles_var_wins_over_the_providers_and_updates_the_resource(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("vars-01")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {"template": {"enable": True}, "vars": {"foo": "bar"},
                                                        "override": scenario.override(spec={"foo": "{{ foo }}"}),
                                                        "updateFilters": [{"pathMatch": "/spec/foo", "allowedOps": ["replace"]}],
                                                        "validation": named_like("vars-01")}),
        scenario.poolboy("ResourceClaim", "vars-01-a", {"resources": [{"provider": {"name": provider},
                                                                       "template": {"metadata": {"name": "vars-01-a"}}}]}))
    claim = await until(kube, CLAIM, namespace, "vars-01-a", has_state)
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == "vars-01-a"
    assert (await kube.get(TEST_KIND, namespace, "vars-01-a"))["spec"]["foo"] == "bar"

    await kube.merge_patch(HANDLE, OPS, claim["status"]["resourceHandle"]["name"], {"spec": {"vars": {"foo": "updated"}}})
    await until(kube, TEST_KIND, namespace, "vars-01-a", lambda obj: obj["spec"]["foo"] == "updated")
