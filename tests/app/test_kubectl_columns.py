"""What `kubectl get` shows, through the Table view of the real API server with the operator running:
every lease and claim says why it is not Ready, a released lease shows when it really ended, times
that can be in the future are not `date` columns (kubectl prints those as `<invalid>`), and policies
and providers have columns that say something."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER, Resource
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _now(offset: float = 0) -> dt.datetime:
    return dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=offset)


def _stamp(when: dt.datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


async def table(kube: Gateway, res: Resource, namespace: str) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """`kubectl get -o wide` as the API server renders it: rows by name (column name -> cell), column types."""
    got = await kube.request("list", res.kind, "GET", res.path(namespace), accept=TABLE)
    columns = [c["name"] for c in got["columnDefinitions"]]
    rows = {row["cells"][0]: dict(zip(columns, row["cells"], strict=True)) for row in got["rows"]}
    return rows, {c["name"]: c["type"] for c in got["columnDefinitions"]}


async def until_row(kube: Gateway, res: Resource, namespace: str, name: str,
                    check: Callable[[Mapping[str, Any]], bool], timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + scaled(timeout)
    row: dict[str, Any] = {}
    while time.monotonic() < deadline:
        rows, _ = await table(kube, res, namespace)
        row = rows.get(name, {})
        if row and check(row):
            return row
        await asyncio.sleep(0.2)
    raise AssertionError(f"{res.kind} {namespace}/{name}: kubectl get shows {row}")


async def _lease(kube: Gateway, ns: str, name: str, **spec: Any) -> None:
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name},
                                  "spec": {"clientRef": {"name": "alice"}, **spec}})


async def test_every_lease_says_why_it_is_not_ready_and_a_released_one_when_it_ended(
    kube: Gateway, namespace: str
) -> None:
    await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter",
                                            "metadata": {"name": "e1", "labels": {"board": "x"}}})
    await kube.patch_status(EXPORTER, namespace, "e1", {"lastSeen": _stamp(_now()), "exporterStatus": "Available"})
    await kube.create(CLIENT, namespace, {"apiVersion": API, "kind": "Client", "metadata": {"name": "alice"}})
    await _lease(kube, namespace, "held", selector={"matchLabels": {"board": "x"}}, duration="1h")
    held = await until_row(kube, LEASE, namespace, "held", lambda r: r["Ready"] == "True")
    assert held["Reason"] == "Ready" and held["Exporter"] == "e1"
    # The leased exporter names its holder; what its agent says is the Agent column, not a Status
    exporter = (await table(kube, EXPORTER, namespace))[0]["e1"]
    assert (exporter["Online"], exporter["Lease"], exporter["Agent"]) == ("True", "held", "Available"), exporter
    planned_end = held["End"]

    await _lease(kube, namespace, "waiting", selector={"matchLabels": {"board": "x"}}, duration="1h")
    await _lease(kube, namespace, "invalid", selector={})
    await _lease(kube, namespace, "ghost", exporterRef={"name": "ghost"})
    await _lease(kube, namespace, "later", selector={"matchLabels": {"board": "x"}},
                 beginTime=_stamp(_now(3600)), duration="1h")
    expected = {"waiting": "NotAvailable", "invalid": "InvalidSelector", "ghost": "ExporterNotFound",
                "later": "Scheduled"}
    for name, reason in expected.items():
        row = await until_row(kube, LEASE, namespace, name, lambda r: r["Reason"] is not None)
        assert (row["Ready"], row["Reason"]) == ("False", reason), row

    before = _now(-1)
    await kube.merge_patch(LEASE, namespace, "held", {"spec": {"release": True}})
    released = await until_row(kube, LEASE, namespace, "held", lambda r: r["Reason"] == "Released")
    assert released["Ready"] == "False" and released["Ended"] is True
    ended = dt.datetime.fromisoformat(released["End"].replace("Z", "+00:00"))
    assert before <= ended <= _now(1), f"the release moment, not the planned end {planned_end}"

    _, types = await table(kube, LEASE, namespace)
    later = (await table(kube, LEASE, namespace))[0]["later"]
    assert types["Begin"] == types["End"] == "string", types  # a date column would print <invalid>
    assert later["Begin"] is None or later["Begin"] > _stamp(_now())


async def test_claims_policies_providers_and_handles_have_columns_that_say_something(
    kube: Gateway, namespace: str
) -> None:
    await kube.create(POLICY, namespace, {
        "apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "p1"},
        "spec": {"exporterSelector": {"matchLabels": {"board": "rpi4"}},
                 "policies": [{"priority": 1, "from": [{"clientSelector": {}}]}]}})
    row = await until_row(kube, POLICY, namespace, "p1", lambda r: r["Valid"] is not None)
    assert (row["Exporters"], row["Valid"]) == ("board=rpi4", "True"), row
    # A valid policy's message says what it grants, to whom (the rules themselves have no column)
    assert row["Message"] == "exporters board=rpi4: policies[0]: any client, priority 1", row
    _, types = await table(kube, POLICY, namespace)
    assert {"Reason", "Message"} <= types.keys()
    # Exporters prints the selector as kubectl does, matchExpressions too (a JSONPath would print JSON or
    # nothing): the operator writes it with Valid, and again when the selector changes
    selectors = {"p2": ({"matchLabels": {"board": "rpi4"}, "matchExpressions": [
                           {"key": "env", "operator": "In", "values": ["lab"]},
                           {"key": "arch", "operator": "NotIn", "values": ["x86", "arm"]},
                           {"key": "broken", "operator": "DoesNotExist"}]},
                        "arch notin (arm,x86),board=rpi4,!broken,env in (lab)"),
                 "p3": ({}, "<all>")}
    for name, (selector, shown) in selectors.items():
        await kube.create(POLICY, namespace, {"apiVersion": API, "kind": "ExporterAccessPolicy",
                                              "metadata": {"name": name},
                                              "spec": {"exporterSelector": selector, "policies": []}})
        row = await until_row(kube, POLICY, namespace, name, lambda r, shown=shown: r["Exporters"] == shown)
    await kube.merge_patch(POLICY, namespace, "p3", {"spec": {"exporterSelector": {
        "matchExpressions": [{"key": "board", "operator": "Exists"}]}}})
    await until_row(kube, POLICY, namespace, "p3", lambda r: r["Exporters"] == "board")

    await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                         "spec": {"resources": [{"provider": {"name": "no-such-provider"},
                                                                 "template": {"data": {"a": "b"}}}]}})
    row = await until_row(kube, CLAIM, namespace, "c1", lambda r: r["Reason"] is not None)
    claim = await kube.get(CLAIM, namespace, "c1")
    ready = next(c for c in claim["status"]["conditions"] if c["type"] == "Ready")
    assert (row["Ready"], row["Reason"]) == ("False", ready["reason"]), row

    _, types = await table(kube, CLAIM, namespace)
    assert types["End"] == "string", types
    _, types = await table(kube, HANDLE, "lessor-system")
    assert types["Rendered"] == "string" and types["End"] == "string", types
    # A handle's Ready prints True as every kind's does (the Ready condition, not the boolean status.ready)
    ready_provider = f"ready-{namespace}"
    await kube.create(PROVIDER, "lessor-system", {
        "apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": ready_provider},
        "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": "lessor-system"}}}})
    await kube.create(POOL, "lessor-system", {
        "apiVersion": API, "kind": "ResourcePool", "metadata": {"name": ready_provider},
        "spec": {"minAvailable": 1, "resources": [{"provider": {"name": ready_provider}, "template": {}}]}})
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            rows, types = await table(kube, HANDLE, "lessor-system")
            mine = [row for row in rows.values() if row["Pool"] == ready_provider]
            if mine and mine[0]["Ready"] == "True":
                break
            await asyncio.sleep(0.2)
        else:
            raise AssertionError(f"the pool's handle: kubectl get shows {mine}")
        assert types["Ready"] == "string", types
    finally:
        await kube.delete(POOL, "lessor-system", ready_provider)
        await kube.delete(PROVIDER, "lessor-system", ready_provider)
    provider = f"cols-{namespace}"
    await kube.create(PROVIDER, "lessor-system", {
        "apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
        "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap"}, "matchIgnore": ["^/data/(a"]}})
    try:  # a provider says what it creates, and that it is not valid (an RE2 pattern that does not compile)
        row = await until_row(kube, PROVIDER, "lessor-system", provider, lambda r: r["Valid"] is not None)
        assert (row["Kind"], row["Valid"], row["Reason"]) == ("ConfigMap", "False", "InvalidRegex"), row
    finally:
        await kube.delete(PROVIDER, "lessor-system", provider)
    pinned = f"pinned-{namespace}"  # the kind fixed by the schema alone: no column has it, the message does
    await kube.create(PROVIDER, "lessor-system", {
        "apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": pinned},
        "spec": {"validation": {"openAPIV3Schema": {"type": "object", "properties": {
            "apiVersion": {"type": "string", "enum": ["v1"]}, "kind": {"type": "string", "const": "ConfigMap"}}}}}})
    try:
        row = await until_row(kube, PROVIDER, "lessor-system", pinned, lambda r: r["Valid"] is not None)
        assert (row["Kind"], row["Valid"]) == (None, "True"), row
        assert row["Message"] == "creates ConfigMap (v1) for each claim's resource", row
    finally:
        await kube.delete(PROVIDER, "lessor-system", pinned)


async def test_the_online_message_does_not_go_stale(kube: Gateway, namespace: str) -> None:
    await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter", "metadata": {"name": "e1"}})
    first = _stamp(_now(-5))
    await kube.patch_status(EXPORTER, namespace, "e1", {"lastSeen": first, "exporterStatus": "Available"})
    deadline = time.monotonic() + scaled(20)
    while True:
        obj = await kube.get(EXPORTER, namespace, "e1")
        online = next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == "Online"), None)
        if online is not None:
            break
        assert time.monotonic() < deadline, obj.get("status")
        await asyncio.sleep(0.2)
    await kube.patch_status(EXPORTER, namespace, "e1", {"lastSeen": _stamp(_now())})  # the next heartbeat
    await asyncio.sleep(scaled(1))
    obj = await kube.get(EXPORTER, namespace, "e1")
    online = next(c for c in obj["status"]["conditions"] if c["type"] == "Online")
    assert online["status"] == "True" and first not in online["message"], online
    assert "status.lastSeen" in online["message"]
