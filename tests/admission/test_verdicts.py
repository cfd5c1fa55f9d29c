"""Checks that cannot finish in time still end the review with a verdict, never a 500 (issue 23).

A tenant whose own template work fills its line of the render threads waits
behind it; its review's checks then cannot finish, and each answers as its
failure policy says: the provider's `validation.checks` (claim-checks, Fail)
deny naming themselves, the rest (Ignore) let the object in with a warning.
Another namespace's review, meanwhile, is judged as usual. And a pool too big
to judge in time is answered in time, through the HTTP app.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer

from lessor.admission import Deadline, make_app, review
from lessor.admission.checks import preflight_registry
from lessor.templates import offload
from lessor.templates.budget import RENDERING
from tests.admission.test_app import Objects
from tests.slowness import scaled

OPS = "lessor-system"
DEADLINE = Deadline(webhook_timeout=1.0, margin=0.5)  # the checks get 0.5 s
PROVIDER = {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceProvider",
            "metadata": {"name": "small", "namespace": OPS},
            "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}},
                     "validation": {"checks": [{"name": "short", "check": "data.x | length < 5"}]}}}


def admission(kind: str, namespace: str, spec: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
        "uid": "0e1f9a3c-5b6d-4e7f-8a9b-0c1d2e3f4a5b", "kind": {"group": "lessor.dev", "version": "v1alpha1",
                                                              "kind": kind},
        "operation": "CREATE", "name": "x", "namespace": namespace,
        "object": {"apiVersion": "lessor.dev/v1alpha1", "kind": kind,
                   "metadata": {"name": "x", "namespace": namespace}, "spec": spec}}}


def claim(namespace: str) -> dict[str, Any]:
    return admission("ResourceClaim", namespace, {"resources": [
        {"provider": {"name": "small"}, "template": {"data": {"x": "too long"}}}]})


def causes(response: Mapping[str, Any]) -> list[tuple[str, str]]:
    return [(c["reason"], c["message"]) for c in response["status"]["details"]["causes"]]


@pytest.fixture
async def busy_namespace() -> AsyncIterator[str]:
    """A namespace whose render line is full: its work holds its share of the threads until the test ends."""
    release, name = threading.Event(), "busy"
    held = [asyncio.ensure_future(offload(release.wait, 60, key=name)) for _ in range(RENDERING.share + 3)]
    while RENDERING.waiting().get(name, 0) < 3:
        await asyncio.sleep(0.01)
    yield name
    release.set()
    await asyncio.gather(*held)


async def test_a_review_whose_checks_cannot_finish_is_denied_by_the_check_whose_policy_is_fail(
    busy_namespace: str
) -> None:
    registry = preflight_registry(OPS)

    began = time.monotonic()
    late = (await review(claim(busy_namespace), registry, Objects(PROVIDER), DEADLINE))["response"]
    took = time.monotonic() - began
    other = (await review(claim("quiet"), registry, Objects(PROVIDER), DEADLINE))["response"]

    assert late["allowed"] is False and late["status"]["code"] == 422  # a verdict, not a 500
    assert causes(late) == [("claim-checks", "check claim-checks could not finish (set-up of checker claim did "
                                             "not finish within the review's 0.5 s); it refuses what it could not "
                                             "check (failure policy Fail): try again later, or make the object "
                                             "smaller")]
    assert sorted(w.split(":")[0] for w in late["warnings"]) == [
        "claim-lifespan", "claim-providers", "claim-templates", "claim-update-filters"]
    assert took < scaled(DEADLINE.webhook_timeout)
    # The other namespace's review did not wait in the busy one's line: its check ran and judged the claim.
    assert other["status"]["code"] == 422 and causes(other) == [
        ("claim-checks", "check 'short' failed (ResourceProvider small)")]


async def test_a_pool_too_big_to_judge_in_time_is_answered_in_time_with_a_verdict() -> None:
    entries = [{"provider": {"name": "small"}, "template": {"data": {"x": str(i)}}} for i in range(100_000)]
    body = json.dumps(admission("ResourcePool", OPS, {"minAvailable": 1, "resources": entries}))
    app = make_app(preflight_registry(OPS), Objects(PROVIDER), deadline=DEADLINE)
    async with TestClient(TestServer(app)) as client:
        began = time.monotonic()
        answer = await client.post("/validate", data=body, headers={"Content-Type": "application/json"})
        took = time.monotonic() - began
        assert answer.status == 200, await answer.text()
        response = (await answer.json())["response"]

    assert response["allowed"] is True  # the pool checks' policy is Ignore: the pool's Valid condition will say
    assert {w.split(":")[0] for w in response["warnings"]} == {"pool-providers", "pool-templates", "pool-lifespan"}
    assert all("did not finish within the review's 0.5 s" in w for w in response["warnings"]), response["warnings"]
    assert took < scaled(DEADLINE.webhook_timeout), f"answered after {took:.2f} s"
