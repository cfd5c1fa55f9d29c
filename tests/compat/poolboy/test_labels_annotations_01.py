"""Poolboy's labels-annotations-01 (test/roles/poolboy_test_simple/tasks/test-labels-annotations-01.yaml): a
pool's `resourceLabels` and `resourceAnnotations` are copied onto the handle it makes, and from there onto the
resource the handle creates."""

from __future__ import annotations

from lessor.gateway import Gateway
from lessor.gateway.resources import POOL
from tests.polling import gone

from .lab import OPS, TEST_KIND, Scenario, value_provider


async def test_a_pools_labels_and_annotations_reach_its_handles_resources(kube: Gateway, namespace: str,
                                                                          scenario: Scenario) -> None:
    provider, pool = scenario.name("labels-annotations-01"), scenario.name("labels-annotations-01")
    await scenario.put(
        value_provider(scenario, provider),
        scenario.poolboy("ResourcePool", pool, {
            "minAvailable": 1, "resourceAnnotations": {"test-annotation": "test-annotation-value"},
            "resourceLabels": {"test-label": "test-label-value"},
            "resources": [{"provider": scenario.provider_ref(provider), "template": {"spec": {"value": "foo"}}}]}))

    [handle] = await scenario.unbound(pool, 1)
    assert handle["spec"]["resourceAnnotations"] == {"test-annotation": "test-annotation-value"}
    assert handle["spec"]["resourceLabels"] == {"test-label": "test-label-value"}
    reference = handle["status"]["resources"][0]["reference"]
    assert (reference["kind"], reference["namespace"]) == (TEST_KIND.kind, namespace)
    made = await kube.get(TEST_KIND, namespace, reference["name"])
    assert made["metadata"]["annotations"]["test-annotation"] == "test-annotation-value"
    assert made["metadata"]["labels"]["test-label"] == "test-label-value"

    await kube.delete(POOL, OPS, pool)
    await gone(kube, TEST_KIND, namespace, reference["name"])  # the pool's unbound handle goes, and its resource
