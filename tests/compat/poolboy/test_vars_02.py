"""Poolboy's vars-02 (test/roles/poolboy_test_simple/tasks/test-vars-02.yaml): validation checks see the
provider's vars (`spec.count <= count_maximum`). A claim update a check refuses does not reach the resource and
is named in `status.resources[].validationError`; one within the bounds does."""

from __future__ import annotations

from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM
from tests.polling import until

from .lab import TEST_KIND, Scenario, condition, has_state, merged, named_like


def counted(provider: str, count: int) -> dict[str, Any]:
    return {"resources": [{"provider": {"name": provider},
                           "template": {"metadata": {"name": "vars-02-a"}, "spec": {"count": count}}}]}


async def test_checks_see_the_providers_vars(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("vars-02")
    count_schema = {"type": "object", "additionalProperties": False, "required": ["count"],
                    "properties": {"count": {"type": "integer"}}}
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "template": {"enable": True}, "vars": {"count_minimum": 1, "count_maximum": 10},
            "override": scenario.override(),
            "updateFilters": [{"pathMatch": "/spec/count", "allowedOps": ["replace"]}],
            "validation": {**merged(named_like("vars-02"), spec=count_schema),
                           "checks": [{"name": "minimum count", "check": "spec.count >= count_minimum"},
                                      {"name": "maximum count", "check": "spec.count <= count_maximum"}]}}),
        scenario.poolboy("ResourceClaim", "vars-02-a", counted(provider, 3)))
    claim = await until(kube, CLAIM, namespace, "vars-02-a", has_state)
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == "vars-02-a"
    assert "validationError" not in claim["status"]["resources"][0]
    assert (await kube.get(TEST_KIND, namespace, "vars-02-a"))["spec"]["count"] == 3

    await kube.merge_patch(CLAIM, namespace, "vars-02-a", {"spec": counted(provider, 11)})
    refused = await until(kube, CLAIM, namespace, "vars-02-a",
                          lambda c: "validationError" in c["status"]["resources"][0])
    assert refused["status"]["resources"][0]["validationError"] == \
        "spec.resources[0].template: check 'maximum count' failed"
    assert condition(refused, "Valid")["reason"] == "CheckFailed"
    assert (await kube.get(TEST_KIND, namespace, "vars-02-a"))["spec"]["count"] == 3

    await kube.merge_patch(CLAIM, namespace, "vars-02-a", {"spec": counted(provider, 10)})
    await until(kube, CLAIM, namespace, "vars-02-a", lambda c: "validationError" not in c["status"]["resources"][0]
                and condition(c, "Valid").get("status") == "True")
    await until(kube, TEST_KIND, namespace, "vars-02-a", lambda obj: obj["spec"]["count"] == 10)
