"""Waiting on the real API server, for the tests: read an object, poll it until a check holds, delete it
if it is there, wait until it is gone, wait for an object's Events. One copy, which the `until` fixture (conftest.py) and the test modules share."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping
from typing import Any

from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import EVENT
from tests.slowness import described, scaled

Check = Callable[[Mapping[str, Any]], bool]


async def get(kube: Gateway, res: Resource, ns: str, name: str) -> dict[str, Any] | None:
    """The object, or None when it does not exist."""
    try:
        return await kube.get(res, ns, name)
    except ApiError as error:
        if error.not_found:
            return None
        raise


async def discard(kube: Gateway, res: Resource, ns: str | None, name: str) -> None:
    """Delete the object if it is there; one the operator deleted first is no failure of a clean-up."""
    try:
        await kube.delete(res, ns, name)
    except ApiError as error:
        if not error.not_found:
            raise


async def until(kube: Gateway, res: Resource, ns: str, name: str, check: Check,
                timeout: float = 30) -> Mapping[str, Any]:
    """Poll the object until `check(obj)` holds and return it (a missing object counts as not yet);
    fail with its last status otherwise. `timeout` is for a quiet machine: it is `scaled` here, as in every
    helper of this module."""
    deadline = time.monotonic() + scaled(timeout)
    obj: Mapping[str, Any] | None = None
    while time.monotonic() < deadline:
        obj = await get(kube, res, ns, name)
        if obj is not None and check(obj):
            return obj
        await asyncio.sleep(0.1)
    raise AssertionError(f"{res.kind} {ns}/{name} never got there within {described(timeout)}; "
                         f"last status: {(obj or {}).get('status')}")


async def until_seen(kube: Gateway, res: Resource, ns: str, name: str, check: Check,
                     timeout: float = 30) -> Mapping[str, Any]:
    """As `until`, but every version of the object counts, from a watch: a state that lasts less than a
    poll's gap on a loaded machine (a 1 s lease's Ready) is seen too. Fails with its last status."""
    import json

    obj = await get(kube, res, ns, name)
    if obj is not None and check(obj):
        return obj
    version = (obj or {}).get("metadata", {}).get("resourceVersion") or (await kube.list(res, ns))[1]
    try:
        async with asyncio.timeout(scaled(timeout)):
            while True:  # a watch the server ends (its timeout) is started again where it stopped
                resp = await kube.stream(res.kind, res.path(ns), {
                    "watch": "1", "resourceVersion": version, "fieldSelector": f"metadata.name={name}",
                    "allowWatchBookmarks": "true"})
                try:
                    async for line in resp.content:
                        event = json.loads(line)
                        version = event["object"].get("metadata", {}).get("resourceVersion") or version
                        if event.get("type") in ("ADDED", "MODIFIED"):
                            obj = event["object"]
                            if check(obj):
                                return obj
                finally:
                    resp.release()
    except TimeoutError:
        raise AssertionError(f"{res.kind} {ns}/{name} never got there within {described(timeout)}; "
                             f"last status: {(obj or {}).get('status')}") from None


async def gone(kube: Gateway, res: Resource, ns: str, name: str, timeout: float = 30) -> None:
    """Wait until the object no longer exists."""
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if await get(kube, res, ns, name) is None:
            return
        await asyncio.sleep(0.05)
    raise AssertionError(f"{res.kind} {ns}/{name} still exists after {described(timeout)}")


async def record(kube: Gateway, res: Resource, ns: str, version: str, seen: Callable[[Mapping[str, Any]], Any],
                 history: list[Any]) -> None:
    """Append `seen(obj)` for every write to the namespace's objects of `res` after `version`, in etcd's
    order (a watch), until cancelled: what a list at one moment cannot show, such as two leases Ready
    on one exporter for a few milliseconds."""
    import json

    resp = await kube.stream(res.kind, res.path(ns), {"watch": "1", "resourceVersion": version})
    try:
        async for line in resp.content:
            history.append(seen(json.loads(line)["object"]))
    finally:
        resp.release()


async def events_of(kube: Gateway, ns: str, name: str, kind: str | None = None) -> list[dict[str, Any]]:
    items, _ = await kube.list(EVENT, ns)
    return [e for e in items if e["regarding"].get("name") == name and kind in (None, e["regarding"].get("kind"))]


async def wait_events(kube: Gateway, ns: str, name: str, check: Callable[[list[dict[str, Any]]], bool], *,
                      kind: str | None = None, timeout: float = 30) -> list[dict[str, Any]]:
    deadline = time.monotonic() + scaled(timeout)
    found: list[dict[str, Any]] = []
    while time.monotonic() < deadline:
        found = await events_of(kube, ns, name, kind)
        if check(found):
            return found
        await asyncio.sleep(0.2)
    shown = [(e["type"], e["reason"], e.get("note"), e.get("series")) for e in found]
    raise AssertionError(f"events of {ns}/{name} never got there within {described(timeout)}: {shown}")
