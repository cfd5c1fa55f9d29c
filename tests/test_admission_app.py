"""The webhook over HTTP, with an example checker written the way lessor's real ones will be."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

import anyio
import pytest
from aiohttp.test_utils import TestClient, TestServer

from lessor.admission import (
    VALIDATE_PATH,
    AdmissionRequest,
    Cause,
    Check,
    CheckResult,
    Deadline,
    Lookup,
    Registry,
    make_app,
)


class Objects:
    """An in-memory Lookup over a fixed set of objects."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self._objects = objects

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = [o for o in await self.list(group, kind, namespace) if o["metadata"]["name"] == name]
        return found[0] if found else None

    async def list(self, group: str, kind: str, namespace: str) -> list[Mapping[str, Any]]:
        return [
            o
            for o in self._objects
            if o["apiVersion"].split("/")[0] == group
            and o["kind"] == kind
            and o["metadata"]["namespace"] == namespace
        ]


def duration(text: str) -> timedelta:
    """Go-style durations such as ``1h30m``."""
    units = {"h": "hours", "m": "minutes", "s": "seconds"}
    return timedelta(**{units[unit]: int(n) for n, unit in re.findall(r"(\d+)([hms])", text)})


class LeaseChecker:
    """Example: the lab's policies are fetched once and shared by both checks."""

    name = "lease"
    check_names = ("lease-selector", "lease-duration")

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        spec = request["object"].get("spec", {})
        policies = await lookup.list("lessor.dev", "ExporterAccessPolicy", request["namespace"])
        limits = [p["maximumDuration"] for pol in policies for p in pol["spec"]["policies"]]

        async def selector() -> CheckResult:
            chosen = spec.get("selector") or {}
            if chosen.get("matchLabels") or chosen.get("matchExpressions"):
                return CheckResult.ok()
            return CheckResult.deny(Cause("must select at least one label", "spec.selector"))

        async def within_policy() -> CheckResult:
            if not limits:
                return CheckResult.ok("no ExporterAccessPolicy in this namespace: open access")
            longest = max(limits, key=duration)
            if duration(spec["duration"]) <= duration(longest):
                return CheckResult.ok()
            too_long = Cause(f"{spec['duration']} exceeds the policies' maximum {longest}", "spec.duration")
            return CheckResult.deny(too_long)

        checks: dict[str, Check] = {"lease-selector": selector}
        if "duration" in spec:  # only leases that ask for a duration are held to one
            checks["lease-duration"] = within_policy
        return checks


POLICY = {
    "apiVersion": "lessor.dev/v1alpha1",
    "kind": "ExporterAccessPolicy",
    "metadata": {"name": "lab-policy", "namespace": "lab"},
    "spec": {"policies": [{"priority": 10, "maximumDuration": "1h30m"}]},
}


def lease_review(spec: dict[str, Any], uid: str = "c8f5b4a2-0001") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": uid,
            "kind": {"group": "lessor.dev", "version": "v1alpha1", "kind": "Lease"},
            "resource": {"group": "lessor.dev", "version": "v1alpha1", "resource": "leases"},
            "name": "my-lease",
            "namespace": "lab",
            "operation": "CREATE",
            "userInfo": {"username": "alice"},
            "object": {
                "apiVersion": "lessor.dev/v1alpha1",
                "kind": "Lease",
                "metadata": {"name": "my-lease", "namespace": "lab"},
                "spec": spec,
            },
            "oldObject": None,
            "dryRun": False,
        },
    }


@pytest.fixture
async def client() -> AsyncIterator[TestClient[Any, Any]]:
    registry = Registry()
    registry.register("lessor.dev", "Lease", LeaseChecker())
    app = make_app(registry, Objects(POLICY), deadline=Deadline(webhook_timeout=0.2, margin=0.1))
    async with TestClient(TestServer(app)) as test_client:
        yield test_client


async def post(client: TestClient[Any, Any], body: dict[str, Any]) -> dict[str, Any]:
    resp = await client.post(VALIDATE_PATH, json=body)
    assert resp.status == 200
    assert resp.content_type == "application/json"
    answer: dict[str, Any] = await resp.json()
    assert (answer["apiVersion"], answer["kind"]) == ("admission.k8s.io/v1", "AdmissionReview")
    return answer


async def test_a_valid_lease_is_admitted_and_the_uid_echoed(client: TestClient[Any, Any]) -> None:
    spec = {"selector": {"matchLabels": {"board": "rpi4"}}, "duration": "1h"}

    answer = await post(client, lease_review(spec))

    assert answer["response"] == {"uid": "c8f5b4a2-0001", "allowed": True}


async def test_an_invalid_lease_is_denied_with_every_cause(client: TestClient[Any, Any]) -> None:
    answer = await post(client, lease_review({"selector": {}, "duration": "2h"}, uid="c8f5b4a2-0002"))

    response = answer["response"]
    assert response["uid"] == "c8f5b4a2-0002"
    assert response["allowed"] is False
    assert response["status"]["code"] == 422
    assert response["status"]["message"] == (
        "denied by lessor preflight: lease-selector: spec.selector: must select at least one label; "
        "lease-duration: spec.duration: 2h exceeds the policies' maximum 1h30m"
    )


async def test_a_hanging_lookup_is_answered_by_the_webhook_itself_before_its_timeout() -> None:
    class Hanging(Objects):
        async def list(self, group: str, kind: str, namespace: str) -> list[Mapping[str, Any]]:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    registry = Registry()
    registry.register("lessor.dev", "Lease", LeaseChecker())
    app = make_app(registry, Hanging(), deadline=Deadline(webhook_timeout=0.2, margin=0.1))
    async with TestClient(TestServer(app)) as test_client:
        with anyio.fail_after(5):
            answer = await post(test_client, lease_review({"selector": {}}))

    status = answer["response"]["status"]
    assert (status["code"], status["reason"]) == (500, "InternalError")
    assert "set-up of checker lease did not finish within 0.1 s" in status["message"]


@pytest.mark.parametrize(
    "body",
    [
        b"{not json",
        b"[]",
        b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
        b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
    ],
    ids=["not-json", "not-an-object", "wrong-version", "no-uid"],
)
async def test_a_body_that_is_not_an_admission_review_gets_400(
    client: TestClient[Any, Any], body: bytes
) -> None:
    resp = await client.post(VALIDATE_PATH, data=body, headers={"Content-Type": "application/json"})

    assert resp.status == 400
    assert "not an AdmissionReview" in await resp.text()
