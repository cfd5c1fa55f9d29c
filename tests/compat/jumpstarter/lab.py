"""A Jumpstarter lab for the compatibility suite: the objects as the Jumpstarter controller's users write them
(`apiVersion: jumpstarter.dev/v1alpha1`), put through `lessor convert` (its library function, as the CLI calls
it), created on the real API server, and read back as lessor writes them.

The peer's suite (controller/internal/controller/lease_controller_test.go) works in one namespace with a
Client `client` (label `name: client`) and three exporters: two with `dut: a`, one with `dut: b`, all online.
`Lab.standard()` builds the same (in words of our own), in the test's namespace. Where the peer's test
writes an exporter's status (its agent's heartbeat), so does `Lab.heartbeat`: `lessor convert` leaves status
out, and lessor reads `status.lastSeen` and `status.exporterStatus` as the agent reports them.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import Callable, Mapping
from typing import Any

from lessor.gateway import Gateway, Resource
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, POLICY
from lessor.tools.porting.convert import convert
from tests.polling import until_seen

PEER_API = "jumpstarter.dev/v1alpha1"
RESOURCES = {r.kind: r for r in (CLIENT, EXPORTER, LEASE, POLICY)}
ENDED = "lessor.dev/lease-ended"
CLIENT_NAME = "client"
DUT_A = ("exporter1-dut-a", "exporter2-dut-a")
DUT_B = "exporter3-dut-b"

Check = Callable[[Mapping[str, Any]], bool]


def manifest(kind: str, name: str, spec: Mapping[str, Any] | None = None,
             labels: Mapping[str, str] | None = None) -> dict[str, Any]:
    """An object in the Jumpstarter controller's apiVersion."""
    obj: dict[str, Any] = {"apiVersion": PEER_API, "kind": kind, "metadata": {"name": name}}
    if labels:
        obj["metadata"]["labels"] = dict(labels)
    if spec is not None:
        obj["spec"] = dict(spec)
    return obj


def lease_manifest(name: str = "lease1", *, dut: str | None = "a", **spec: Any) -> dict[str, Any]:
    """A lease of the client's for a `dut` exporter (None: no selector); keyword arguments are spec fields,
    and a None value leaves the field out. Without a length it asks for an hour."""
    body: dict[str, Any] = {"clientRef": {"name": CLIENT_NAME}}
    if dut is not None:
        body["selector"] = {"matchLabels": {"dut": dut}}
    if not {"duration", "endTime", "beginTime"} & spec.keys():
        body["duration"] = "1h"
    body.update({key: value for key, value in spec.items() if value is not None})
    return manifest("Lease", name, body)


def converted(*docs: Mapping[str, Any]) -> list[dict[str, Any]]:
    """lessor's objects for the peer's, as `lessor convert` writes them; nothing may be left out on the way."""
    result = convert(docs)
    lost = [str(note) for note in result.notes if note.dropped]
    assert not lost, f"lessor convert left out: {lost}"
    assert all(obj["apiVersion"] == "lessor.dev/v1alpha1" for obj in result.objects)
    return result.objects


def at(seconds: float) -> str:
    """Now truncated to the second, plus `seconds`, as RFC 3339 (the peer's tests write whole-second times)."""
    moment = dt.datetime.now(dt.UTC).replace(microsecond=0) + dt.timedelta(seconds=seconds)
    return moment.strftime("%Y-%m-%dT%H:%M:%SZ")


def parse(text: str) -> dt.datetime:
    """Parse a time lessor wrote, in whole seconds with `Z`: what `metav1.Time` and the peer's tools read."""
    return dt.datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.UTC)


def condition(obj: Mapping[str, Any], type_: str) -> Mapping[str, Any] | None:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), None)


def has(type_: str, reason: str | None = None, status: str = "True") -> Check:
    def check(obj: Mapping[str, Any]) -> bool:
        found = condition(obj, type_)
        return found is not None and found["status"] == status and reason in (None, found["reason"])
    return check


def message(obj: Mapping[str, Any], type_: str) -> str:
    found = condition(obj, type_)
    assert found is not None, f"no {type_} condition: {obj.get('status')}"
    return str(found["message"])


def ready(obj: Mapping[str, Any]) -> bool:
    return has("Ready", "Ready")(obj)


def ended(obj: Mapping[str, Any]) -> bool:
    return (obj.get("status") or {}).get("ended") is True


def exporter_of(obj: Mapping[str, Any]) -> str | None:
    return ((obj.get("status") or {}).get("exporterRef") or {}).get("name")


def lease_of(exporter: Mapping[str, Any]) -> str | None:
    return ((exporter.get("status") or {}).get("leaseRef") or {}).get("name")


def status_time(obj: Mapping[str, Any], field: str) -> dt.datetime:
    text = (obj.get("status") or {}).get(field)
    assert isinstance(text, str), f"no status.{field}: {obj.get('status')}"
    return parse(text)


class Lab:
    """One test's namespace seen as the peer's `default` namespace."""

    def __init__(self, kube: Gateway, namespace: str) -> None:
        self.kube, self.namespace = kube, namespace

    async def apply(self, *docs: Mapping[str, Any]) -> list[dict[str, Any]]:
        made = []
        for obj in converted(*docs):
            made.append(await self.kube.create(RESOURCES[obj["kind"]], self.namespace, obj))
        return made

    async def standard(self, *, online: bool = True) -> None:
        """The peer's client and three exporters, online (heartbeat Available) unless told otherwise."""
        await self.apply(manifest("Client", CLIENT_NAME, {}, {"name": CLIENT_NAME}),
                         *(manifest("Exporter", name, {}, {"dut": "a"}) for name in DUT_A),
                         manifest("Exporter", DUT_B, {}, {"dut": "b"}))
        if online:
            await asyncio.gather(*(self.heartbeat(name) for name in (*DUT_A, DUT_B)))

    async def admit_everyone(self) -> None:
        """A policy admitting every client to every exporter at priority 0: access as without a policy, but
        decided at once (lessor waits 3 s before it grants under open access, docs/leasing.md), which keeps the
        time-driven specs short."""
        await self.apply(manifest("ExporterAccessPolicy", "everyone", {
            "exporterSelector": {}, "policies": [{"priority": 0, "from": [{"clientSelector": {}}]}]}))

    async def heartbeat(self, name: str, exporter_status: str = "Available") -> None:
        """What the exporter's agent reports: seen now, in this state."""
        await self.kube.patch_status(EXPORTER, self.namespace, name,
                                     {"lastSeen": at(0), "exporterStatus": exporter_status})

    async def offline(self, name: str) -> None:
        """The agent's last report, two minutes old, saying it went offline (as the peer's helper writes it)."""
        await self.kube.patch_status(EXPORTER, self.namespace, name,
                                     {"lastSeen": at(-120), "exporterStatus": "Offline"})

    async def enable(self, name: str, enabled: bool) -> None:
        await self.kube.merge_patch(EXPORTER, self.namespace, name, {"spec": {"enabled": enabled}})

    async def lease(self, name: str = "lease1", *, dut: str | None = "a", **spec: Any) -> dict[str, Any]:
        [made] = await self.apply(lease_manifest(name, dut=dut, **spec))
        return made

    async def patch(self, name: str, spec: Mapping[str, Any]) -> dict[str, Any]:
        return await self.kube.merge_patch(LEASE, self.namespace, name, {"spec": dict(spec)})

    async def get(self, name: str, res: Resource = LEASE) -> dict[str, Any]:
        return await self.kube.get(res, self.namespace, name)

    async def until(self, name: str, check: Check, timeout: float = 20, res: Resource = LEASE) -> Mapping[str, Any]:
        """Until `check` holds in any version of the object (a watch: a 1 s lease's Ready is not missed
        between two polls), the limit scaled by the run's slowness; fail with the last status."""
        return await until_seen(self.kube, res, self.namespace, name, check, timeout)

    async def holds(self, name: str, check: Check, seconds: float, res: Resource = LEASE) -> Mapping[str, Any]:
        """`check` holds the whole time for `seconds` (not scaled: a minimum, the state must not change)."""
        deadline = time.monotonic() + seconds
        obj: Mapping[str, Any] = await self.get(name, res)
        while True:
            assert check(obj), f"{res.kind} {self.namespace}/{name} changed: {obj.get('status')}"
            if time.monotonic() >= deadline:
                return obj
            await asyncio.sleep(0.1)
            obj = await self.get(name, res)
