"""Kubernetes Events (events.k8s.io/v1): what `kubectl describe` shows of leases, claims and handles,
and the recorder's aggregation and per-object rate limit, against the real API server."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import subprocess
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from lessor.actors.api import CLAIM as CLAIM_KIND
from lessor.actors.api import Kind
from lessor.actors.events import NORMAL, WARNING, record_transitions, severity
from lessor.tools.controlplane import ControlPlane
from lessor.events.recorder import EventRecorder, GatewaySink
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, CONFIGMAP, EVENT, EXPORTER, LEASE, PROVIDER
from tests.polling import events_of, until, wait_events
from tests.slowness import scaled
from tests.tasks import cancelled

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
CONFIGMAP_KIND = Kind("v1", "ConfigMap")


# --- helpers ---------------------------------------------------------------------------------------


def with_reason(reason: str, type_: str = NORMAL) -> Callable[[list[dict[str, Any]]], bool]:
    return lambda events: any(e["reason"] == reason and e["type"] == type_ for e in events)


def one(events: list[dict[str, Any]], reason: str) -> dict[str, Any]:
    matching = [e for e in events if e["reason"] == reason]
    assert len(matching) == 1, matching
    return matching[0]


def condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c["type"] == type_:
            return c["status"], c["reason"]
    return None


def describe(kubeconfig: Path, resource: str, ns: str, name: str) -> str | None:
    """`kubectl describe`, when kubectl is installed."""
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        return None
    done = subprocess.run([kubectl, "--kubeconfig", str(kubeconfig), "describe", resource, name, "-n", ns],
                          capture_output=True, text=True, timeout=scaled(60), env={**os.environ, "KUBECTL_COLOR": "false"})
    assert done.returncode == 0, done.stderr
    return done.stdout


async def lab(kube: Gateway, ns: str) -> None:
    await kube.create(EXPORTER, ns, {"apiVersion": API, "kind": "Exporter",
                                     "metadata": {"name": "e1", "labels": {"board": "rpi"}}})
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    await kube.patch_status(EXPORTER, ns, "e1", {"lastSeen": stamp, "exporterStatus": "Available"})
    await kube.create(CLIENT, ns, {"apiVersion": API, "kind": "Client", "metadata": {"name": "alice"}})


async def lease(kube: Gateway, ns: str, name: str) -> None:
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi"}}, "duration": "1h"}})


@pytest.fixture
async def recorder_gateway(controlplane: ControlPlane) -> AsyncIterator[Gateway]:
    """A connection of the recorder's own, so that its requests are counted apart."""
    async with await Gateway.connect(str(controlplane.kubeconfig)) as gateway:
        yield gateway


@contextlib.asynccontextmanager
async def recording(sink: Any, **settings: Any) -> AsyncIterator[tuple[EventRecorder, CollectorRegistry]]:
    """A recorder writing to `sink`, running in the background, with a registry of its own."""
    registry = CollectorRegistry()
    recorder = EventRecorder(sink, instance="test", registry=registry, **settings)
    task = asyncio.create_task(recorder.run())
    try:
        yield recorder, registry
    finally:
        assert not task.done(), "the recorder stopped"
        await cancelled(task)


async def _events_until(kube: Gateway, ns: str, check: Callable[[list[dict[str, Any]]], bool],
                        timeout: float = 30) -> list[dict[str, Any]]:
    """Every Event of the namespace, once `check` holds for them."""
    deadline = time.monotonic() + scaled(timeout)
    while True:
        items, _ = await kube.list(EVENT, ns)
        if check(items) or time.monotonic() > deadline:
            assert check(items), [(e["reason"], e["regarding"]["name"], e.get("series")) for e in items]
            return items
        await asyncio.sleep(0.2)


async def configmap(kube: Gateway, ns: str, name: str) -> dict[str, Any]:
    return await kube.create(CONFIGMAP, ns, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}})


# --- leases, through the operator -----------------------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_a_granted_lease_shows_ready_and_a_released_one_released(
        kube: Gateway, namespace: str, kubeconfig: Path) -> None:
    await lab(kube, namespace)
    await lease(kube, namespace, "l1")
    granted = await until(kube, LEASE, namespace, "l1", lambda o: condition(o, "Ready") == ("True", "Ready"))
    events = await wait_events(kube, namespace, "l1", with_reason("Ready"), kind="Lease")
    ready = one(events, "Ready")
    assert ready["note"] == "exporter e1 is leased"
    assert ready["regarding"]["uid"] == granted["metadata"]["uid"]
    assert ready["regarding"]["apiVersion"] == API and ready["regarding"]["namespace"] == namespace
    assert ready["reportingController"] == "lessor.dev/operator" and ready["reportingInstance"]
    assert ready["action"] == "Lease"
    assert len(ready["eventTime"]) == len("2026-01-02T03:04:05.123456Z")  # MicroTime: microseconds

    await kube.merge_patch(LEASE, namespace, "l1", {"spec": {"release": True}})
    events = await wait_events(kube, namespace, "l1", with_reason("Released"), kind="Lease")
    assert one(events, "Released")["note"] == "spec.release is true"

    shown = describe(kubeconfig, "leases.lessor.dev", namespace, "l1")
    if shown is not None:
        lines = shown[shown.index("Events:"):].splitlines()
        assert any("Normal" in line and "Ready" in line and "exporter e1 is leased" in line for line in lines), shown
        assert any("Normal" in line and "Released" in line for line in lines), shown


@pytest.mark.usefixtures("operator")
async def test_a_waiting_lease_shows_its_pending_reason_and_a_lease_nobody_may_have_a_warning(
        kube: Gateway, namespace: str) -> None:
    await lab(kube, namespace)
    await lease(kube, namespace, "first")
    await until(kube, LEASE, namespace, "first", lambda o: condition(o, "Ready") == ("True", "Ready"))
    await lease(kube, namespace, "second")  # e1 is taken: it waits
    pending = await until(kube, LEASE, namespace, "second", lambda o: condition(o, "Pending") is not None)
    reason = condition(pending, "Pending")[1]  # type: ignore[index]
    await wait_events(kube, namespace, "second", with_reason(reason), kind="Lease")

    await kube.create(LEASE, namespace, {"apiVersion": API, "kind": "Lease", "metadata": {"name": "nowhere"}, "spec": {
        "clientRef": {"name": "alice"}, "exporterRef": {"name": "missing"}, "duration": "1h"}})
    events = await wait_events(kube, namespace, "nowhere", with_reason("ExporterNotFound", WARNING), kind="Lease")
    assert "missing" in one(events, "ExporterNotFound")["note"]


# --- claims and handles, through the operator ------------------------------------------------------


@pytest.mark.usefixtures("operator")
async def test_a_claim_shows_bound_and_ready_and_its_handle_created(
        kube: Gateway, namespace: str, kubeconfig: Path) -> None:
    provider = f"env-{uuid.uuid4().hex[:6]}"
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": OPS}}}})
    try:
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                             "spec": {"resources": [{"provider": {"name": provider},
                                                                     "template": {"data": {"a": "b"}}}]}})
        claim = await until(kube, CLAIM, namespace, "c1", lambda o: condition(o, "Ready") == ("True", "Ready"))
        events = await wait_events(kube, namespace, "c1", lambda es: with_reason("Bound")(es)
                                   and with_reason("Ready")(es), kind="ResourceClaim")
        handle = claim["status"]["resourceHandle"]["name"]
        assert handle in one(events, "Bound")["note"]
        assert one(events, "Ready")["note"] == "every resource is ready"
        assert not [e for e in events if e["type"] == WARNING]
        created = await wait_events(kube, OPS, handle, with_reason("Created"), kind="ResourceHandle")
        assert one(created, "Created")["note"] == f"for claim {namespace}/c1"

        shown = describe(kubeconfig, "resourceclaims.lessor.dev", namespace, "c1")
        if shown is not None:
            lines = shown[shown.index("Events:"):].splitlines()
            assert any("Bound" in line and handle in line for line in lines), shown
    finally:
        await kube.delete(PROVIDER, OPS, provider)


@pytest.mark.usefixtures("operator")
async def test_a_resource_the_api_server_refuses_shows_a_warning_on_its_handle(
        kube: Gateway, namespace: str) -> None:
    provider = f"nowhere-{uuid.uuid4().hex[:6]}"
    await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": provider},
                                      "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                            "metadata": {"namespace": f"missing-{provider}"}}}})
    try:
        await kube.create(CLAIM, namespace, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                             "spec": {"resources": [{"provider": {"name": provider},
                                                                     "template": {"data": {"a": "b"}}}]}})
        claim = await until(kube, CLAIM, namespace, "c1", lambda o: (o.get("status") or {}).get("resourceHandle"))
        handle = claim["status"]["resourceHandle"]["name"]
        events = await wait_events(kube, OPS, handle, with_reason("ApplyFailed", WARNING), kind="ResourceHandle")
        assert f"missing-{provider}" in one(events, "ApplyFailed")["note"]
        await wait_events(kube, namespace, "c1", with_reason("ApplyFailed", WARNING), kind="ResourceClaim")
    finally:
        await kube.delete(CLAIM, namespace, "c1")
        await kube.delete(PROVIDER, OPS, provider)


# --- the recorder: aggregation and the per-object rate limit ----------------------------------------


async def test_identical_events_become_one_event_with_a_series(
        kube: Gateway, namespace: str, recorder_gateway: Gateway) -> None:
    async with recording(GatewaySink(recorder_gateway)) as (recorder, registry):
        obj = await configmap(kube, namespace, "cm")
        recorder.record(CONFIGMAP_KIND, obj, WARNING, "Flapping", "first", "Test")
        first = (await wait_events(kube, namespace, "cm", lambda es: len(es) == 1))[0]
        assert "series" not in first
        for i in range(29):  # a storm of the same event
            recorder.record(CONFIGMAP_KIND, obj, WARNING, "Flapping", f"again {i}", "Test")
        events = await wait_events(kube, namespace, "cm",
                                   lambda es: len(es) == 1 and (es[0].get("series") or {}).get("count") == 30)
        assert events[0]["metadata"]["name"] == first["metadata"]["name"]
        assert events[0]["note"] == "first"  # an Event's note never changes; its count does
        assert events[0]["series"]["lastObservedTime"] >= first["eventTime"]
        await recorder.drain()
        writes = recorder_gateway.requests[("create", "Event")] + recorder_gateway.requests[("patch", "Event")]
        assert writes <= 3, recorder_gateway.requests  # one create; repeats share a patch or two, not 29
        assert registry.get_sample_value("lessor_events_aggregated_total") == 29

        # A different reason regarding the same object is an Event of its own.
        recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Calm", "settled", "Test")
        await wait_events(kube, namespace, "cm", lambda es: len(es) == 2 and with_reason("Calm")(es))


async def test_a_burst_for_one_object_is_rate_limited_and_another_object_is_not(
        kube: Gateway, namespace: str, recorder_gateway: Gateway) -> None:
    async with recording(GatewaySink(recorder_gateway), burst=5) as (recorder, registry):
        noisy = await configmap(kube, namespace, "noisy")
        quiet = await configmap(kube, namespace, "quiet")
        for i in range(20):  # twenty different events: more than the bucket holds
            recorder.record(CONFIGMAP_KIND, noisy, WARNING, f"Reason{i}", f"event {i}", "Test")
        recorder.record(CONFIGMAP_KIND, quiet, NORMAL, "Fine", "its own bucket", "Test")
        await recorder.drain()
        await wait_events(kube, namespace, "quiet", lambda es: len(es) == 1)
        written = await wait_events(kube, namespace, "noisy", lambda es: len(es) == 5)
        assert sorted(e["reason"] for e in written) == sorted(f"Reason{i}" for i in range(5))  # the first five
        assert registry.get_sample_value("lessor_events_dropped_total", {"reason": "rate_limited"}) == 15
        await asyncio.sleep(scaled(0.5))
        assert len(await events_of(kube, namespace, "noisy")) == 5

        # Repeats of a written event are not lost to the limit: the count waits for the next token.
        recorder.record(CONFIGMAP_KIND, noisy, WARNING, "Reason0", "again", "Test")
        assert recorder.waiting


async def test_an_event_the_api_server_refuses_is_counted_and_does_not_stop_the_recorder(
        kube: Gateway, namespace: str, recorder_gateway: Gateway) -> None:
    async with recording(GatewaySink(recorder_gateway)) as (recorder, registry):
        ghost = {"metadata": {"name": "ghost", "namespace": f"no-such-{namespace}", "uid": "x"}}
        recorder.record(CONFIGMAP_KIND, ghost, NORMAL, "Lost", "its namespace does not exist", "Test")
        await recorder.drain()
        assert registry.get_sample_value("lessor_events_failed_total", {"verb": "create"}) == 1
        obj = await configmap(kube, namespace, "after")
        recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Works", "still writing", "Test")
        await wait_events(kube, namespace, "after", lambda es: len(es) == 1)


async def test_a_storm_in_one_namespace_is_summarised_and_its_warning_still_written(
        kube: Gateway, namespace: str, recorder_gateway: Gateway) -> None:
    """A burst of Ready in one namespace: the budget's Events, then one summary counting the rest; a Warning in
    the same storm is written on its own object; another namespace is not touched."""
    storm, budget = 40, 5
    async with recording(GatewaySink(recorder_gateway), namespace_burst=budget, namespace_rate=0.0,
                         summary_every=0.1, retry_every=0.1) as (recorder, registry):
        objects = await asyncio.gather(*(configmap(kube, namespace, f"l{i:02d}") for i in range(storm)))
        for i, obj in enumerate(objects):
            recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Ready", f"exporter e{i:02d} is leased", "Lease")
            if i == storm // 2:
                recorder.record(CONFIGMAP_KIND, obj, WARNING, "Evicted", "a higher priority took e20", "End")
        await recorder.drain()

        def summarised(events: list[dict[str, Any]]) -> bool:
            return any((e.get("series") or {}).get("count") == storm - budget for e in events)

        items = await _events_until(kube, namespace, summarised)
        ready = [e for e in items if e["reason"] == "Ready"]
        assert len(ready) == budget + 1, [(e["regarding"]["name"], e.get("series")) for e in ready]
        assert sorted(e["regarding"]["name"] for e in ready) == [f"l{i:02d}" for i in range(budget + 1)]
        summary = next(e for e in ready if e.get("series"))
        assert summary["regarding"]["name"] == f"l{budget:02d}"  # the first one it summarises
        assert summary["note"].startswith("ConfigMaps Ready past this namespace's Event budget")
        assert summary["note"].endswith(f"l{budget:02d} the first: exporter e{budget:02d} is leased")
        evicted = [e for e in items if e["reason"] == "Evicted"]
        assert [(e["type"], e["regarding"]["name"]) for e in evicted] == [(WARNING, f"l{storm // 2:02d}")]
        writes = recorder_gateway.requests[("create", "Event")] + recorder_gateway.requests[("patch", "Event")]
        assert writes == budget + 2, recorder_gateway.requests  # the budget's, the summary, the Warning: not 41
        assert registry.get_sample_value("lessor_events_summarised_total", {"reason": "Ready"}) == storm - budget


# --- fast unit tests (no API) ---------------------------------------------------------------------


class Sink:
    def __init__(self) -> None:
        self.created: list[dict[str, Any]] = []
        self.gate = asyncio.Event()

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        await self.gate.wait()
        self.created.append(body)
        return body

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        return patch


async def test_a_full_queue_drops_and_counts_and_record_never_blocks() -> None:
    sink = Sink()
    async with recording(sink, queue_size=3, burst=100) as (recorder, registry):
        obj = {"metadata": {"name": "x", "namespace": "ns", "uid": "u"}}
        for i in range(10):  # no write can happen between these calls: the queue fills, record returns at once
            recorder.record(CONFIGMAP_KIND, obj, NORMAL, f"R{i}", "n", "Test")
        assert registry.get_sample_value("lessor_events_dropped_total", {"reason": "queue_full"}) == 7
        recorder.record(CONFIGMAP_KIND, None, NORMAL, "R", "no object: ignored, no error", "Test")
        sink.gate.set()
        await recorder.drain()
    assert [e["reason"] for e in sink.created] == ["R0", "R1", "R2"]


def test_a_long_note_and_a_long_name_still_make_a_valid_event() -> None:
    recorder = EventRecorder(Sink(), instance="i" * 300)
    name = "a" * 250 + "-b"
    recorder.record(CONFIGMAP_KIND, {"metadata": {"name": name, "namespace": "ns"}}, NORMAL, "Long", "é" * 2000, "T")
    body = next(iter(recorder.series.values())).body
    assert len(body["note"].encode()) <= 1024
    assert len(body["metadata"]["name"]) <= 253 and body["metadata"]["name"].startswith("a" * 200)
    assert len(body["reportingInstance"]) == 128


class Recorded:
    def __init__(self) -> None:
        self.events: list[tuple[str, str, str]] = []

    def record(self, kind: Kind, obj: Mapping[str, Any] | None, type: str, reason: str, note: str,
               action: str) -> None:
        self.events.append((type, reason, action))


def cond(type_: str, status: str, reason: str) -> dict[str, str]:
    return {"type": type_, "status": status, "reason": reason, "message": f"{type_} {reason}"}


def test_claim_transitions_record_what_a_user_wants_to_see() -> None:
    seen = Recorded()
    waiting = [cond("Valid", "True", "Valid"), cond("Bound", "False", "Binding"), cond("Ready", "False", "NotBound")]
    record_transitions(seen, CLAIM_KIND, {}, None, waiting)
    assert seen.events == [(NORMAL, "Binding", "Bind")]  # a claim valid from the start is no news
    bound = [cond("Valid", "True", "Valid"), cond("Bound", "True", "Bound"),
             cond("Ready", "False", "ResourcesNotReady")]
    record_transitions(seen, CLAIM_KIND, {}, waiting, bound)
    record_transitions(seen, CLAIM_KIND, {}, bound, bound)  # nothing changed: nothing recorded
    ready = [cond("Valid", "True", "Valid"), cond("Bound", "True", "Bound"), cond("Ready", "True", "Ready")]
    record_transitions(seen, CLAIM_KIND, {}, bound, ready)
    broken = [cond("Valid", "False", "InvalidTemplate"), cond("Bound", "True", "Bound"),
              cond("Ready", "False", "ResourceConflict")]
    record_transitions(seen, CLAIM_KIND, {}, ready, broken)
    record_transitions(seen, CLAIM_KIND, {}, broken, ready)  # fixed: Valid recovers
    assert seen.events[1:] == [
        (NORMAL, "Bound", "Bind"), (NORMAL, "Ready", "Provision"),
        (WARNING, "InvalidTemplate", "Validate"), (WARNING, "ResourceConflict", "Provision"),
        (NORMAL, "Valid", "Validate"), (NORMAL, "Ready", "Provision"),
    ]


def test_severity_of_lease_endings() -> None:
    assert severity("Ready", True, "Ready") == NORMAL
    assert severity("Ready", False, "Released") == NORMAL
    assert severity("Ready", False, "Expired") == NORMAL
    assert severity("Ready", False, "Evicted") == WARNING
    assert severity("Unsatisfiable", True, "NoAccess") == WARNING
    assert severity("Invalid", True, "InvalidSelector") == WARNING


async def test_a_repeat_after_the_window_is_a_new_event_and_a_waiting_count_is_written_later() -> None:
    sink = Sink()
    sink.gate.set()
    async with recording(sink, window=0.2, burst=1, rate=5.0, retry_every=0.05) as (recorder, _):
        obj = {"metadata": {"name": "x", "namespace": "ns", "uid": "u"}}
        recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Again", "first", "Test")
        await recorder.drain()
        recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Again", "second", "Test")  # no token: its count waits
        assert recorder.waiting
        deadline = time.monotonic() + scaled(5)
        while recorder.waiting and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        await recorder.drain()
        assert next(iter(recorder.series.values())).written == 2  # written once a token came
        await asyncio.sleep(0.3)  # the window passes: the next one starts a new Event
        recorder.record(CONFIGMAP_KIND, obj, NORMAL, "Again", "third", "Test")
        await recorder.drain()
    assert [e["note"] for e in sink.created] == ["first", "third"]


def test_the_caches_stay_bounded() -> None:
    recorder = EventRecorder(Sink(), max_series=100, queue_size=10)
    for i in range(1000):
        recorder.record(CONFIGMAP_KIND, {"metadata": {"name": f"o{i}", "namespace": "ns", "uid": str(i)}},
                        NORMAL, "R", "n", "T")
    assert len(recorder.series) <= 100 + 10  # at most the queued ones beyond the bound
    assert len(recorder.buckets) <= 100
    for i in range(1000):  # a namespace budget each
        recorder.record(CONFIGMAP_KIND, thing(f"ns{i}", "o"), NORMAL, "R", "n", "T")
    assert len(recorder.namespaces) <= 100


class Writes(Sink):
    """An open sink that keeps the patches too."""

    def __init__(self) -> None:
        super().__init__()
        self.gate.set()
        self.patched: list[tuple[str, dict[str, Any]]] = []

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        self.patched.append((name, patch))
        return patch


def thing(namespace: str, name: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "uid": f"{namespace}/{name}"}}


async def until_written(recorder: EventRecorder) -> None:
    """Until no series update waits for a token (they are retried every `retry_every`)."""
    deadline = time.monotonic() + scaled(5)
    while recorder.waiting and time.monotonic() < deadline:
        await asyncio.sleep(0.02)
    await recorder.drain()
    assert not recorder.waiting


async def test_normal_events_past_the_namespace_budget_are_counted_into_one_summary_and_warnings_are_not() -> None:
    sink = Writes()
    async with recording(sink, namespace_burst=3, namespace_rate=0.0, summary_every=0.05,
                         retry_every=0.02) as (recorder, registry):
        for i in range(10):
            recorder.record(CONFIGMAP_KIND, thing("storm", f"l{i}"), NORMAL, "Ready", f"exporter e{i} is leased",
                            "Lease")
        recorder.record(CONFIGMAP_KIND, thing("storm", "l7"), WARNING, "Evicted", "a higher priority took e7", "End")
        for i in range(3):  # another namespace's budget is its own
            recorder.record(CONFIGMAP_KIND, thing("quiet", f"q{i}"), NORMAL, "Ready", "leased", "Lease")
        await recorder.drain()
        written = [(e["metadata"]["namespace"], e["regarding"]["name"], e["reason"], e.get("series", {}).get("count"))
                   for e in sink.created]
        assert written == [("storm", "l0", "Ready", None), ("storm", "l1", "Ready", None),
                           ("storm", "l2", "Ready", None), ("storm", "l3", "Ready", 7),
                           ("storm", "l7", "Evicted", None), ("quiet", "q0", "Ready", None),
                           ("quiet", "q1", "Ready", None), ("quiet", "q2", "Ready", None)]
        summary = sink.created[3]
        assert summary["type"] == NORMAL and summary["action"] == "Lease"
        assert summary["note"] == ("ConfigMaps Ready past this namespace's Event budget are counted in this "
                                   "Event's series.count, l3 the first: exporter e3 is leased")

        # More of the storm: the summary's count grows by patches (one per `summary_every` at most), no new Event.
        for i in range(10, 15):
            recorder.record(CONFIGMAP_KIND, thing("storm", f"l{i}"), NORMAL, "Ready", "leased", "Lease")
            await asyncio.sleep(0)
        await until_written(recorder)
        assert len(sink.created) == 8
        assert sink.patched[-1] == (summary["metadata"]["name"], {"series": {
            "count": 12, "lastObservedTime": sink.patched[-1][1]["series"]["lastObservedTime"]}})
        assert len(sink.patched) <= 2
        # A repeat of an Event already written is its own series, as in a quiet namespace.
        recorder.record(CONFIGMAP_KIND, thing("storm", "l0"), NORMAL, "Ready", "again", "Lease")
        await until_written(recorder)
        assert sink.patched[-1][0] == sink.created[0]["metadata"]["name"]
        assert registry.get_sample_value("lessor_events_summarised_total", {"reason": "Ready"}) == 12
        assert registry.get_sample_value("lessor_events_dropped_total", {"reason": "rate_limited"}) is None


async def test_the_namespace_budget_refills_and_a_quiet_namespace_never_sees_it() -> None:
    sink = Writes()
    async with recording(sink, namespace_burst=2, namespace_rate=50.0) as (recorder, registry):
        for i in range(6):  # a token comes every 20 ms: never short
            recorder.record(CONFIGMAP_KIND, thing("ns", f"o{i}"), NORMAL, "Ready", "leased", "Lease")
            await asyncio.sleep(0.05)
        await recorder.drain()
    assert [e["regarding"]["name"] for e in sink.created] == [f"o{i}" for i in range(6)]
    assert all("series" not in e for e in sink.created)
    assert registry.get_sample_value("lessor_events_summarised_total", {"reason": "Ready"}) is None
