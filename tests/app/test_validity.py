"""Every Client, ExporterAccessPolicy and ResourceProvider is told whether it is valid, on itself.

Against the real API server with the in-process operator (no webhook, so
broken objects get in, as they do in a cluster whose webhook is off); the
webhook's denial of the same errors is in test_webhook_checks.py.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, CONFIGMAP, POLICY, PROVIDER
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
Until = Callable[..., Awaitable[Mapping[str, Any]]]  # the `until` fixture


def valid(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Valid"), {})


def verdict(status: str, reason: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: (valid(obj).get("status"), valid(obj).get("reason")) == (status, reason)


def body(kind: str, name: str, spec: Mapping[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": API, "kind": kind, "metadata": {"name": name, **metadata}, "spec": dict(spec)}


QA = {"clientSelector": {"matchLabels": {"team": "qa"}}}


async def test_a_client_and_a_policy_get_valid_and_a_broken_policy_names_every_bad_field(
        kube: Gateway, namespace: str, until: Until) -> None:
    await kube.create(CLIENT, namespace, body("Client", "alice", {}, labels={"team": "qa"}))
    await until(CLIENT, namespace, "alice", verdict("True", "Valid"))

    broken = {"exporterSelector": {"matchLabels": {"board": "rpi4"}},
              "policies": [{"from": []}, {"from": [QA], "maximumDuration": "0s"}]}
    await kube.create(POLICY, namespace, body("ExporterAccessPolicy", "broken", broken))
    got = await until(POLICY, namespace, "broken", verdict("False", "InvalidRule"))
    message = valid(got)["message"]
    assert "spec.policies[0].from: empty" in message
    assert "spec.policies[1].maximumDuration: must be positive, not 0s" in message
    assert valid(got)["observedGeneration"] == got["metadata"]["generation"]

    fixed = await kube.merge_patch(POLICY, namespace, "broken", {"spec": {"policies": [{"from": [QA]}]}})
    got = await until(POLICY, namespace, "broken", verdict("True", "Valid"))
    assert valid(got)["observedGeneration"] == fixed["metadata"]["generation"]

    await kube.create(POLICY, namespace, body("ExporterAccessPolicy", "nowhere", {"policies": [{"from": [QA]}]}))
    got = await until(POLICY, namespace, "nowhere", verdict("False", "InvalidSelector"))
    assert valid(got)["message"].startswith("spec.exporterSelector: missing")


async def test_a_refused_provider_says_why_on_itself_and_is_logged_once(
        kube: Gateway, until: Until, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="lessor.actors.validity")
    name = f"bad-regex-{uuid.uuid4().hex[:6]}"
    spec = {"override": {"apiVersion": "v1", "kind": "ConfigMap"}, "matchIgnore": ["^/data/(a"]}
    await kube.create(PROVIDER, OPS, body("ResourceProvider", name, spec))
    try:
        got = await until(PROVIDER, OPS, name, verdict("False", "InvalidRegex"))
        assert valid(got)["message"].startswith("spec.matchIgnore[0]: invalid regular expression '^/data/(a'")
        for n in range(3):  # changes that do not change the verdict: no write, no new log line
            await kube.merge_patch(PROVIDER, OPS, name, {"metadata": {"labels": {"touched": str(n)}}})
        await asyncio.sleep(scaled(1.0))
        lines = [r.getMessage() for r in caplog.records if name in r.getMessage()]
        assert len(lines) == 1 and "is invalid and not used (InvalidRegex): spec.matchIgnore[0]" in lines[0], lines

        await kube.merge_patch(PROVIDER, OPS, name, {"spec": {"matchIgnore": ["^/data/a"]}})
        await until(PROVIDER, OPS, name, verdict("True", "Valid"))
    finally:
        await kube.delete(PROVIDER, OPS, name)


async def test_a_provider_whose_schema_alone_fixes_the_kind_is_valid_and_used(
        kube: Gateway, namespace: str, until: Until) -> None:
    """Issue 14, finding 1: `apiVersion: {enum: [v1]}`, `kind: {enum: [ConfigMap]}`; override sets only the
    namespace."""
    name = f"pinned-{uuid.uuid4().hex[:6]}"
    spec = {"override": {"metadata": {"namespace": namespace}},
            "validation": {"openAPIV3Schema": {"type": "object", "properties": {
                "apiVersion": {"type": "string", "enum": ["v1"]},
                "kind": {"type": "string", "enum": ["ConfigMap"]}}}}}
    await kube.create(PROVIDER, OPS, body("ResourceProvider", name, spec))
    try:
        await until(PROVIDER, OPS, name, verdict("True", "Valid"))
        await kube.create(CLAIM, namespace, body("ResourceClaim", "c1", {"resources": [
            {"provider": {"name": name}, "template": {"data": {"a": "b"}}}]}))
        got = await until(CLAIM, namespace, "c1", lambda c: any(
            x["type"] == "Ready" and x["status"] == "True" for x in (c.get("status") or {}).get("conditions") or ()))
        reference = got["status"]["resources"][0]["reference"]
        assert (reference["apiVersion"], reference["kind"], reference["namespace"]) == ("v1", "ConfigMap", namespace)
        assert (await kube.get(CONFIGMAP, namespace, reference["name"]))["data"] == {"a": "b"}
        await kube.delete(CLAIM, namespace, "c1")
    finally:
        await kube.delete(PROVIDER, OPS, name)
