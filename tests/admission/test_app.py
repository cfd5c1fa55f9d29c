"""The webhook over HTTP, with an example checker written the way lessor's real ones will be."""

from __future__ import annotations

import json
import re
from collections.abc import AsyncIterator, Mapping
from datetime import timedelta
from typing import Any

import anyio
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

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
from lessor.admission.body import MAX_BODY, MAX_DEPTH
from lessor.admission.metrics import WebhookMetrics


class Objects:
    """An in-memory Lookup over a fixed set of objects."""

    def __init__(self, *objects: Mapping[str, Any]) -> None:
        self._objects = objects

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        found = [o for o in await self.list(group, kind, namespace) if o["metadata"]["name"] == name]
        return found[0] if found else None

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
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
    # With metrics, which read every body, malformed ones too.
    app = make_app(registry, Objects(POLICY), deadline=Deadline(webhook_timeout=0.2, margin=0.1),
                   metrics=WebhookMetrics(CollectorRegistry()))
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


async def test_a_hanging_lookup_is_answered_by_the_webhook_itself_before_its_timeout_with_a_verdict() -> None:
    class Hanging(Objects):
        async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
            await anyio.sleep_forever()
            raise AssertionError("unreachable")

    registry = Registry()
    registry.register("lessor.dev", "Lease", LeaseChecker())
    app = make_app(registry, Hanging(), deadline=Deadline(webhook_timeout=0.2, margin=0.1))
    async with TestClient(TestServer(app)) as test_client:
        with anyio.fail_after(5):
            answer = await post(test_client, lease_review({"selector": {}}))

    response = answer["response"]  # a verdict, never a 500: the lease checks' policy is Ignore
    assert response["allowed"] is True
    assert response["warnings"] and all(
        "could not finish (set-up of checker lease did not finish within the review's 0.1 s)" in warning
        for warning in response["warnings"])


def reviewed(change: Any) -> bytes:
    """A valid lease review, changed by ``change(review)`` (which edits it in place), as bytes."""
    body = lease_review({"selector": {"matchLabels": {"board": "rpi4"}}})
    change(body)
    return json.dumps(body).encode()


def nested(depth: int) -> Any:
    value: Any = "bottom"
    for _ in range(depth):
        value = {"a": value}
    return value


MALFORMED = {
    "not-json": (b"{not json", "the body is not JSON (Expecting property name"),
    "not-utf8": (b'{"a": "\xff\xfe"}', "the body is not UTF-8"),
    "empty": (b"", "the body is not JSON"),
    "not-an-object": (b"[]", "the body is a JSON array, not an object"),
    "a-number": (b"12", "the body is a JSON number, not an object"),
    "wrong-version": (b'{"apiVersion": "admission.k8s.io/v1beta1", "kind": "AdmissionReview", "request": {"uid": "u"}}',
                      "expected apiVersion admission.k8s.io/v1"),
    "no-request": (reviewed(lambda r: r.pop("request")), "request is missing"),
    "request-a-list": (reviewed(lambda r: r.update(request=[1])), "request must be an object, not array"),
    "no-uid": (b'{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {}}',
               "request.uid is missing"),
    "uid-a-number": (reviewed(lambda r: r["request"].update(uid=7)), "request.uid must be a non-empty string"),
    "no-kind": (reviewed(lambda r: r["request"].pop("kind")), "request.kind must be an object, not missing"),
    "kind-a-string": (reviewed(lambda r: r["request"].update(kind="Lease")), "request.kind must be an object"),
    "kind-kind-a-list": (reviewed(lambda r: r["request"]["kind"].update(kind=["Lease"])),
                         "request.kind.kind must be a string, not array"),
    "no-operation": (reviewed(lambda r: r["request"].pop("operation")), "request.operation must be one of"),
    "operation-unknown": (reviewed(lambda r: r["request"].update(operation="PATCH")), "not 'PATCH'"),
    "namespace-a-number": (reviewed(lambda r: r["request"].update(namespace=3)),
                           "request.namespace must be a string, not number"),
    "no-object-on-create": (reviewed(lambda r: r["request"].update(object=None)),
                            "request.object must be an object, not missing"),
    "object-a-string": (reviewed(lambda r: r["request"].update(object="lease")),
                        "request.object must be an object, not string"),
    "update-without-old": (reviewed(lambda r: r["request"].update(operation="UPDATE")),
                           "request.oldObject must be an object, not missing"),
    "metadata-a-list": (reviewed(lambda r: r["request"]["object"].update(metadata=[])),
                        "request.object.metadata must be an object, not array"),
    "no-metadata": (reviewed(lambda r: r["request"]["object"].pop("metadata")),
                    "request.object.metadata must be an object, not missing"),
    "labels-a-string": (reviewed(lambda r: r["request"]["object"]["metadata"].update(labels="a=b")),
                        "request.object.metadata.labels must be an object, not string"),
    "annotation-a-number": (
        reviewed(lambda r: r["request"]["object"]["metadata"].update(annotations={"preflight.lessor.dev/skip": 1})),
        "request.object.metadata.annotations[preflight.lessor.dev/skip] must be a string, not number"),
    "spec-a-list": (reviewed(lambda r: r["request"]["object"].update(spec=[])),
                    "request.object.spec must be an object, not array"),
    "deeper-than-the-stack": (b"[" * 100_000 + b"]" * 100_000, "the JSON nests too deep to decode"),
}


@pytest.mark.parametrize(("body", "says"), MALFORMED.values(), ids=MALFORMED.keys())
async def test_a_body_that_is_not_an_admission_review_gets_400_saying_what_is_wrong(
    client: TestClient[Any, Any], body: bytes, says: str
) -> None:
    resp = await client.post(VALIDATE_PATH, data=body, headers={"Content-Type": "application/json"})

    assert resp.status == 400
    text = await resp.text()
    assert text.startswith("not an AdmissionReview: ")
    assert says in text


async def test_a_body_over_the_size_limit_gets_413_and_is_not_read(client: TestClient[Any, Any]) -> None:
    huge = reviewed(lambda r: r["request"]["object"]["spec"].update(blob="x" * (MAX_BODY + 1)))

    resp = await client.post(VALIDATE_PATH, data=huge, headers={"Content-Type": "application/json"})

    assert resp.status == 413
    assert f"larger than the limit of {MAX_BODY} bytes" in await resp.text()


async def test_an_object_as_deep_as_the_limit_allows_is_checked(client: TestClient[Any, Any]) -> None:
    deep = reviewed(lambda r: r["request"]["object"]["spec"].update(deep=nested(MAX_DEPTH - 3)))

    answer = await post_raw(client, deep)

    assert answer["response"]["allowed"] is True


@pytest.mark.parametrize("depth", [MAX_DEPTH, 5_000], ids=["over-the-limit", "too-deep-to-decode"])
async def test_an_object_nested_deeper_than_the_limit_is_denied_not_refused_as_a_request(
    client: TestClient[Any, Any], depth: int
) -> None:
    """The API server lets templates nest without limit; its user must hear why, not 'failed calling webhook'."""
    if depth == MAX_DEPTH:
        deep = reviewed(lambda r: r["request"]["object"]["spec"].update(deep=nested(depth)))
    else:  # written by hand: json.dumps cannot nest this deep either
        deep = reviewed(lambda r: r["request"]["object"]["spec"].update(deep="HERE")).replace(
            b'"HERE"', b"[" * depth + b"]" * depth)

    response = (await post_raw(client, deep))["response"]

    assert (response["uid"], response["allowed"], response["status"]["code"]) == ("c8f5b4a2-0001", False, 422)
    (cause,) = response["status"]["details"]["causes"]
    assert cause["reason"] == "nesting"
    assert "nests deeper than 100 levels" in cause["message"]
    if depth == MAX_DEPTH:  # decoded: where is known
        assert cause["field"] == "spec.deep.a.a.a"
        assert "(at spec.deep.a.a.a.a.a" in cause["message"]


async def post_raw(client: TestClient[Any, Any], body: bytes) -> dict[str, Any]:
    resp = await client.post(VALIDATE_PATH, data=body, headers={"Content-Type": "application/json"})
    assert resp.status == 200, await resp.text()
    answer: dict[str, Any] = await resp.json()
    return answer


class FakeInformer:
    """What CacheLookup reads of an Informer: its resource, whether it has listed, its store."""

    def __init__(self, synced: bool) -> None:
        from lessor.gateway.resources import PROVIDER

        self.resource = PROVIDER
        self.synced = anyio.Event()
        if synced:
            self.synced.set()
        self.store: dict[tuple[str, str], dict[str, Any]] = {}


class CountingFallback:
    def __init__(self) -> None:
        self.calls: list[str] = []

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        self.calls.append(f"get {name}")
        return None

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
        self.calls.append("list")
        return []


async def test_the_cache_lookup_waits_briefly_for_an_object_created_just_before_and_falls_back_until_synced() -> None:
    from lessor.admission.lookup import CacheLookup

    provider = {"metadata": {"name": "env", "namespace": "ops"}}
    synced, listing, fallback = FakeInformer(True), FakeInformer(False), CountingFallback()
    lookup = CacheLookup([synced], fallback, grace=2.0, poll=0.01)  # type: ignore[list-item, arg-type]

    async def arrives() -> None:
        await anyio.sleep(0.1)
        synced.store[("ops", "env")] = provider

    async with anyio.create_task_group() as tasks:
        tasks.start_soon(arrives)
        found = await lookup.get("lessor.dev", "ResourceProvider", "ops", "env")
    listed = await lookup.list("lessor.dev", "ResourceProvider", "ops")
    not_yet = CacheLookup([listing], fallback)  # type: ignore[list-item, arg-type]
    await not_yet.get("lessor.dev", "ResourceProvider", "ops", "env")

    assert found is provider
    assert listed == [provider]
    assert fallback.calls == ["get env"]  # only the informer that has not listed yet sends a request


async def test_a_match_that_fits_no_cached_provider_is_confirmed_against_the_api_server_before_a_denial() -> None:
    """The cache holds some providers but not one created a moment ago: a claim left to `match` is
    judged against the API server's current list, not denied for the cache's lag."""
    from lessor.admission.checks.claims import ClaimChecker
    from lessor.admission.lookup import CacheLookup

    def provider(name: str, kind: str) -> dict[str, Any]:
        return {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceProvider",
                "metadata": {"name": name, "namespace": "ops"},
                "spec": {"match": {"apiVersion": "v1", "kind": kind}, "template": {"enable": True}}}

    class Etcd(CountingFallback):
        async def list(self, group: str, kind: str, namespace: str, *,
                       consistent: bool = False) -> list[Mapping[str, Any]]:
            self.calls.append(f"list consistent={consistent}")
            return [provider("secrets", "Secret"), provider("configmaps", "ConfigMap")]

    informer, etcd = FakeInformer(True), Etcd()
    informer.store[("ops", "secrets")] = provider("secrets", "Secret")  # "configmaps" not seen yet
    claim = {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceClaim",
             "metadata": {"name": "c", "namespace": "lab"},
             "spec": {"resources": [{"template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"a": "b"}}}]}}
    lookup = CacheLookup([informer], etcd)  # type: ignore[list-item, arg-type]
    checks = await ClaimChecker("ops").setup({"operation": "CREATE", "object": claim}, lookup)  # type: ignore[typeddict-item]

    assert (await checks["claim-providers"]()).allowed, "denied for a provider the cache had not seen yet"
    assert etcd.calls == ["list consistent=True"]
    claim["spec"]["resources"][0]["template"]["kind"] = "Service"  # a real miss is still denied
    checks = await ClaimChecker("ops").setup({"operation": "CREATE", "object": claim}, lookup)  # type: ignore[typeddict-item]
    assert not (await checks["claim-providers"]()).allowed


@pytest.mark.parametrize(("spec", "field", "message"), [
    ({"selector": "board=rpi4"}, "spec.selector", "must be an object, not string"),
    ({"selector": {"matchLabels": {"board": 4}}}, "spec.selector.matchLabels.board", "must be a string, not integer"),
    ({"selector": {"matchExpressions": [{"key": "board", "operator": "In", "values": "rpi4"}]}},
     "spec.selector.matchExpressions[0].values", "must be an array, not string"),
    ({"clientRef": ["alice"]}, "spec.clientRef", "must be an object, not array"),
    ({"release": "yes"}, "spec.release", "must be a boolean, not string"),
], ids=["selector-a-string", "label-a-number", "values-a-string", "ref-a-list", "bool-a-string"])
async def test_a_field_of_another_type_than_the_crd_gives_it_is_denied_by_name_before_any_check(
    client: TestClient[Any, Any], spec: dict[str, Any], field: str, message: str
) -> None:
    """The API server never sends these (the CRD's schema comes first); anyone else may, and gets an answer."""
    answer = await post(client, lease_review(spec))

    status = answer["response"]["status"]
    assert (status["code"], status["details"]["causes"]) == (422, [{"reason": "shape", "field": field,
                                                                    "message": message}])
