"""Poolboy's test-02 (test/roles/poolboy_test_simple/tasks/test-02.yaml): lifespan settings written as templates
over the claim's annotations. The default gives the end, a requested end within the limits is honoured, an
annotation changes the limits the claim shows, and an end now deletes claim, handle and resource."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, HANDLE
from lessor.templates import parse_timestamp
from tests.polling import gone, until

from .lab import LIFESPAN, OPS, TEST_KIND, Scenario, condition, has_state, named_like, ready


def lifespan_of(claim: dict) -> tuple[datetime, datetime]:
    status = claim["status"]["lifespan"]
    return parse_timestamp(status["start"]), parse_timestamp(status["end"])


async def test_lifespan_templates_follow_the_claim(kube: Gateway, namespace: str, scenario: Scenario) -> None:
    provider = scenario.name("test-02")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {
            "lifespan": dict(LIFESPAN), "override": scenario.override(spec={"foo": "bar"}),
            "validation": named_like("test-02")}),
        scenario.poolboy("ResourceClaim", "test-02", {"resources": [{"provider": {"name": provider},
                                                                     "template": {"metadata": {"name": "test-02-a"}}}]}))
    assert not [n for n in scenario.notes if n.field.startswith("spec.lifespan")]  # the templates carry over
    claim = await until(kube, CLAIM, namespace, "test-02",
                        lambda c: has_state(c) and ready(c) and "end" in c["status"].get("lifespan", {}))
    assert claim["status"]["resources"][0]["state"]["metadata"]["name"] == "test-02-a"
    assert (claim["status"]["lifespan"]["maximum"], claim["status"]["lifespan"]["relativeMaximum"]) == ("2h", "1h")
    # the default counts from the first Ready, as in Poolboy (lessor shows when that was)
    first_ready = parse_timestamp(claim["status"]["lifespan"]["firstReady"])
    start, end = lifespan_of(claim)
    assert end - first_ready == timedelta(minutes=30)
    assert (await kube.get(TEST_KIND, namespace, "test-02-a"))["spec"]["foo"] == "bar"

    asked = start + timedelta(minutes=45)
    await kube.merge_patch(CLAIM, namespace, "test-02", {"spec": {"lifespan": {"end": asked.strftime("%Y-%m-%dT%H:%M:%SZ")}}})
    claim = await until(kube, CLAIM, namespace, "test-02", lambda c: lifespan_of(c)[1] == asked)
    assert lifespan_of(claim)[1] - lifespan_of(claim)[0] == timedelta(minutes=45)

    await kube.merge_patch(CLAIM, namespace, "test-02", {"metadata": {"annotations": {"extended-lifespan": ""}}})
    await until(kube, CLAIM, namespace, "test-02", lambda c: (c["status"]["lifespan"].get("maximum"),
                                                             c["status"]["lifespan"].get("relativeMaximum")) == ("2d", "1d"))

    handle = claim["status"]["resourceHandle"]["name"]
    now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.merge_patch(CLAIM, namespace, "test-02", {"spec": {"lifespan": {"end": now}}})
    await gone(kube, CLAIM, namespace, "test-02")
    await gone(kube, HANDLE, OPS, handle)
    await gone(kube, TEST_KIND, namespace, "test-02-a")


async def test_a_lifespan_template_that_cannot_render_is_named_on_the_claim(
        kube: Gateway, namespace: str, scenario: Scenario) -> None:
    """lessor's answer where Poolboy retries in its log: Valid=False, ProviderTemplateError, naming the setting."""
    provider = scenario.name("test-02-bad")
    await scenario.put(
        scenario.poolboy("ResourceProvider", provider, {"lifespan": {"maximum": "{{ resource_claim.spec.nope }}h"},
                                                        "override": scenario.override()}),
        scenario.poolboy("ResourceClaim", "test-02-bad", {"resources": [{"provider": {"name": provider}}]}))
    claim = await until(kube, CLAIM, namespace, "test-02-bad", lambda c: condition(c, "Valid").get("status") == "False")
    valid = condition(claim, "Valid")
    assert valid["reason"] == "ProviderTemplateError"
    assert f"ResourceProvider {provider}'s spec.lifespan.maximum: could not render: undefined" in valid["message"]
