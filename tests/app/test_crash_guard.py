"""The crash guard, against the real API server with the in-process operator.

An object whose content makes its actor fail on every try must not
crash-loop the actor nor keep what it holds: after a few failures on the
same resourceVersion the actor writes `Ready=False`/`InternalError` with the
error's message, gives back what it holds, and waits for the object to
change.

The failure is forced by monkeypatching a rule function of the lease actor
(`LeaseRequest.window`, which computes the lease's end on grant) to raise an
OverflowError for one lease: that is what `spec.duration: 99999999h` did
before durations were bounded where they are parsed, and no user input
should be able to do it any more, so the test injects it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

import pytest

from lessor.actors.leasing import spec as lease_spec
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, CONFIGMAP, EXPORTER, HANDLE, LEASE, PROVIDER
from tests.slowness import scaled

API = "lessor.dev/v1alpha1"
Until = Callable[..., Awaitable[Mapping[str, Any]]]  # the `until` fixture


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


def is_ready(obj: Mapping[str, Any]) -> bool:
    return condition(obj, "Ready").get("reason") == "Ready"


def failed_internally(obj: Mapping[str, Any]) -> bool:
    return (condition(obj, "Ready").get("status"), condition(obj, "Ready").get("reason")) == ("False",
                                                                                           "InternalError")


async def lease(kube: Gateway, ns: str, name: str) -> None:
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi"}}, "duration": "1h"}})


def lease_restarts(operator: Any) -> int:
    return sum(operator.system._kinds["lease"].stats.restarts.values())


def test_only_repeated_failures_of_the_objects_making_are_given_up_on() -> None:
    import aiohttp

    from lessor.actors.api import Conflict
    from lessor.actors.guard import GIVE_UP_AFTER, gives_up
    from lessor.mailbox import AskTimeout

    assert gives_up(OverflowError("date value out of range"), GIVE_UP_AFTER)
    assert gives_up(KeyError("x"), GIVE_UP_AFTER + 5)
    assert not gives_up(OverflowError("date value out of range"), GIVE_UP_AFTER - 1)
    for transient in (Conflict("stale"), ConnectionResetError(), TimeoutError(), AskTimeout("topology", 5.0),
                      aiohttp.ServerDisconnectedError()):
        assert not gives_up(transient, 100), transient


async def test_a_lease_that_always_fails_on_grant_gives_its_exporter_back_and_stops_retrying(
        kube: Gateway, namespace: str, operator: Any, until: Until, monkeypatch: pytest.MonkeyPatch) -> None:
    window = lease_spec.LeaseRequest.window

    def poisoned(self: lease_spec.LeaseRequest, now: dt.datetime) -> Any:
        if poisoned.armed and self.duration == dt.timedelta(hours=1) and self.name == "poison":
            raise OverflowError("date value out of range")
        return window(self, now)

    poisoned.armed = True  # type: ignore[attr-defined]
    monkeypatch.setattr(lease_spec.LeaseRequest, "window", poisoned)

    await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter",
                                            "metadata": {"name": "e1", "labels": {"board": "rpi"}}})
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await kube.patch_status(EXPORTER, namespace, "e1", {"lastSeen": now, "exporterStatus": "Available"})
    await kube.create(CLIENT, namespace, {"apiVersion": API, "kind": "Client", "metadata": {"name": "alice"}})
    before = lease_restarts(operator)
    await lease(kube, namespace, "poison")

    got = await until(LEASE, namespace, "poison", failed_internally)
    text = condition(got, "Ready")["message"]
    assert "OverflowError: date value out of range" in text and "resourceVersion" in text, text
    assert got["status"].get("ended") is not True  # given up on this version, not ended

    # What it held is given back: the next lease gets the exporter.
    await lease(kube, namespace, "next")
    got_next = await until(LEASE, namespace, "next", is_ready)
    assert got_next["status"]["exporterRef"]["name"] == "e1"
    assert ((await kube.get(EXPORTER, namespace, "e1"))["status"].get("leaseRef") or {}).get("name") == "next"

    # No crash loop: a couple of restarts before it gave up, then none while nothing changes.
    settled = lease_restarts(operator)
    assert settled - before <= 2
    await asyncio.sleep(scaled(2.0))
    assert lease_restarts(operator) == settled

    # A change of the lease wakes it: it tries afresh (and, no longer poisoned, waits its turn).
    poisoned.armed = False  # type: ignore[attr-defined]
    await kube.merge_patch(LEASE, namespace, "next", {"spec": {"release": True}})
    await kube.merge_patch(LEASE, namespace, "poison", {"metadata": {"labels": {"fixed": "yes"}}})
    got = await until(LEASE, namespace, "poison", is_ready)
    assert got["status"]["exporterRef"]["name"] == "e1"


async def test_a_claim_that_always_fails_keeps_its_handle_and_resources_and_recovers_when_changed(
        kube: Gateway, namespace: str, operator: Any, until: Until, monkeypatch: pytest.MonkeyPatch) -> None:
    """Forced by monkeypatching the claim actor's `resolve_claim` (the rule that validates the claim) to raise
    for this claim only while armed."""
    from lessor.actors.provisioning import claim as claim_module

    resolve = claim_module.resolve_claim
    armed = {"on": False}

    def poisoned(obj: Mapping[str, Any], *args: Any, **kwargs: Any) -> Any:
        if armed["on"] and obj["metadata"]["name"] == "poison":
            raise KeyError("nobody expected this key")
        return resolve(obj, *args, **kwargs)

    monkeypatch.setattr(claim_module, "resolve_claim", poisoned)
    provider = f"env-{namespace}"
    await kube.create(PROVIDER, "lessor-system", {
        "apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
        "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": namespace}}}})
    try:
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim",
                                             "metadata": {"name": "poison"}, "spec": {"resources": [
                                                 {"provider": {"name": provider}, "template": {"data": {"a": "b"}}}]}})
        bound = await until(CLAIM, namespace, "poison", is_ready)
        handle = bound["status"]["resourceHandle"]["name"]
        configmap = bound["status"]["resources"][0]["reference"]["name"]

        armed["on"] = True
        await kube.merge_patch(CLAIM, namespace, "poison", {"spec": {"resources": [
            {"provider": {"name": provider}, "template": {"data": {"a": "c"}}}]}})
        got = await until(CLAIM, namespace, "poison", failed_internally)
        assert "KeyError: 'nobody expected this key'" in condition(got, "Ready")["message"]
        # The binding and the environment stay.
        assert (await kube.get(HANDLE, "lessor-system", handle))["spec"]["resourceClaim"]["name"] == "poison"
        assert (await kube.get(CONFIGMAP, namespace, configmap))["data"] == {"a": "b"}

        armed["on"] = False
        await kube.merge_patch(CLAIM, namespace, "poison", {"metadata": {"labels": {"fixed": "yes"}}})
        got = await until(CLAIM, namespace, "poison", is_ready)
        assert got["status"]["resourceHandle"]["name"] == handle
        await kube.delete(CLAIM, namespace, "poison")
    finally:
        await kube.delete(PROVIDER, "lessor-system", provider)
