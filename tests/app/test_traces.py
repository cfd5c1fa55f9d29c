"""Traces a developer can follow, against the real API server: one lease, from the watch event of its creation
to the write that makes it Ready, is one trace with one root; every span follows OpenTelemetry's messaging and
HTTP client conventions."""

from __future__ import annotations

import asyncio
import contextlib
import io
from collections.abc import AsyncIterator, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import orjson
import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind
from prometheus_client import CollectorRegistry

from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY, PROVIDER
from lessor.app.install import install
from lessor.leadership.election import COORDINATION_LEASE, ElectionSettings, LeaderElector
from lessor.app.operator import Operator, OperatorConfig
from lessor.telemetry.tracefile import JsonLinesExporter, print_trace
from tests.polling import until
from tests.slowness import scaled
from tests.tasks import cancelled

API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
NS = "lab"



@contextlib.asynccontextmanager
async def traced_operator(tmp_path: Path, *, heartbeat_timeout: float = 60.0, held_leader: bool = False,
                          ) -> AsyncIterator[tuple[Gateway, InMemorySpanExporter]]:
    """Its own control plane and an operator in this process whose spans go to memory. `held_leader`: the
    operator elects on the Lease `HELD`, which another holder keeps until the test releases it (`release`)."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    provider.add_span_processor(SimpleSpanProcessor(JsonLinesExporter(tmp_path / "traces.jsonl")))
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp:
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=lambda _: None)
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            election = None
            if held_leader:
                now = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
                await kube.create(COORDINATION_LEASE, OPS, {
                    "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": HELD},
                    "spec": {"holderIdentity": "somebody-else", "leaseDurationSeconds": 3600, "renewTime": now}})
                election = ElectionSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.3, name=HELD)
            config = OperatorConfig(operator_namespace=OPS, bind_address="127.0.0.1", health_port=free_port(),
                                    metrics_port=free_port(), exporter_heartbeat_timeout=heartbeat_timeout,
                                    leader_election=election)
            async with await Gateway.connect(str(cp.kubeconfig), registry=CollectorRegistry(),
                                             tracer_provider=provider) as gateway:
                op = Operator(config, gateway, CollectorRegistry(), tracer_provider=provider)
                task = asyncio.create_task(op.run())
                try:
                    while not op.ready()[0]:
                        assert not task.done(), task.exception()
                        await asyncio.sleep(0.05)
                    yield kube, spans
                finally:
                    await cancelled(task)


HELD = "held-leader"


async def release(kube: Gateway) -> None:
    """The other holder of `HELD` hands it over, as a replica stopping does."""
    await kube.merge_patch(COORDINATION_LEASE, OPS, HELD, {"spec": {"holderIdentity": None,
                                                                    "leaseDurationSeconds": 1}})


async def heartbeat(kube: Gateway, exporter: str) -> None:
    """What an exporter's agent writes every few seconds."""
    await kube.patch_status(EXPORTER, NS, exporter, {
        "lastSeen": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%S.%fZ"), "exporterStatus": "Available"})


async def lab(kube: Gateway, exporters: int, *, policy: bool = True) -> None:
    for i in range(exporters):
        await kube.create(EXPORTER, NS, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": f"e{i}", "labels": {"board": "rpi"}}})
        await kube.patch_status(EXPORTER, NS, f"e{i}", {
            "lastSeen": datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"), "exporterStatus": "Available"})
    await kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client",
                                   "metadata": {"name": "alice", "labels": {"team": "qa"}}})
    if policy:
        await a_policy(kube)


async def a_policy(kube: Gateway) -> None:
    await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "p"},
                                   "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                                       {"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}]}]}})


async def a_lease(kube: Gateway, name: str) -> None:
    await kube.create(LEASE, NS, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi"}}, "duration": "1h"}})


def ready(obj: Any) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (obj.get("status") or {}).get("conditions") or ())


def condition(obj: Any, kind: str) -> str | None:
    return next((c["status"] for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == kind), None)


def changes(spans: Sequence[ReadableSpan], kind: str, status: str) -> list[ReadableSpan]:
    """The spans that wrote condition `kind` with `status`."""
    return [s for s in spans for e in s.events if e.name == "condition changed"
            and dict(e.attributes or {}).get("lessor.condition.type") == kind
            and dict(e.attributes or {}).get("lessor.condition.status") == status]


def attributes(span: ReadableSpan) -> dict[str, Any]:
    return dict(span.attributes or {})


def writes(spans: Sequence[ReadableSpan], verb: str, kind: str) -> list[ReadableSpan]:
    return [s for s in spans if s.kind == SpanKind.CLIENT and attributes(s).get("lessor.api.verb") == verb
            and attributes(s).get("lessor.api.kind") == kind]


@pytest.mark.apiserver
async def test_one_lease_from_its_watch_event_to_ready_is_one_trace_with_one_root(tmp_path: Path) -> None:
    async with traced_operator(tmp_path) as (kube, spans):
        await lab(kube, 2)
        await asyncio.sleep(scaled(1))
        spans.clear()
        await a_lease(kube, "l1")
        lease = await until(kube, LEASE, NS, "l1", ready)
        await asyncio.sleep(scaled(0.5))  # the spans of the Ready write end just after it
        finished = spans.get_finished_spans()
    exporter = lease["status"]["exporterRef"]["name"]
    commit = [s for s in writes(finished, "patch", "Exporter") if exporter in attributes(s)["url.full"]]
    ready_write = [s for s in writes(finished, "patch", "Lease") if "/leases/l1/status" in attributes(s)["url.full"]]
    assert commit and ready_write, [s.name for s in finished]
    trace_id = ready_write[-1].context.trace_id
    assert commit[0].context.trace_id == trace_id  # the exporter's commit and the lease's Ready: one trace
    story = [s for s in finished if s.context.trace_id == trace_id]
    roots = [s for s in story if s.parent is None]
    assert [r.name for r in roots] == ["receive Lease"], [r.name for r in roots]
    assert attributes(roots[0])["k8s.object.name"] == "l1" and attributes(roots[0])["k8s.event.type"] == "ADDED"
    ids = {s.context.span_id for s in story}
    assert all(s.parent is None or s.parent.span_id in ids for s in story), "a span whose parent is elsewhere"
    types = {attributes(s).get("lessor.message.type") for s in story}
    assert {"Observed", "Want", "Offer", "Accept", "Granted"} <= types, types
    assert any(s.name == "start lease" for s in story)  # the lease actor's start-up, in it
    # Each actor span is named by its step; the object is in its attributes.
    assert {"process Offer", "process Accept", "process Granted"} <= {s.name for s in story}, {s.name for s in story}
    assert {attributes(s)["messaging.destination.name"] for s in story if s.name == "process Offer"} == {"lease/lab/l1"}
    assert any(s.name == "create Event" for s in story), "the lease's Ready Event is written in a trace of its own"
    changes = [dict(e.attributes or {}) for s in story for e in s.events if e.name == "condition changed"]
    assert {"lessor.condition.type": "Ready", "lessor.condition.status": "True", "lessor.condition.reason": "Ready",
            "lessor.condition.message": f"exporter {exporter} is leased"} in changes, changes

    out = io.StringIO()  # `lessor trace lease lab/l1`, from the file the same spans went to
    assert print_trace("lease", "lab/l1", tmp_path / "traces.jsonl", out) == 0
    lines = out.getvalue().splitlines()
    shown = "\n".join(lines)
    assert lines[1].split()[2:4] == ["receive", "Lease"], lines
    assert len([line for line in lines if "·" not in line]) == len(story) + 1, lines
    assert f"· Ready=True Ready: exporter {exporter} is leased" in shown, shown
    assert "patch Exporter" in shown and "patch Lease" in shown and "process Granted  @ lease/lab/l1" in shown, shown
    offsets = [float(line.split()[0]) for line in lines[1:] if "·" not in line]
    assert offsets[0] == 0.0 and all(offset >= 0 for offset in offsets)


@pytest.mark.apiserver
async def test_a_lease_that_waits_for_another_ones_release_is_one_trace_linked_to_the_release(
        tmp_path: Path) -> None:
    async with traced_operator(tmp_path) as (kube, spans):
        await lab(kube, 1)
        await asyncio.sleep(scaled(1))
        spans.clear()
        await a_lease(kube, "first")
        await until(kube, LEASE, NS, "first", ready)
        await a_lease(kube, "second")
        await until(kube, LEASE, NS, "second", lambda o: bool((o.get("status") or {}).get("conditions")))
        await asyncio.sleep(scaled(1))
        await kube.delete(LEASE, NS, "first")
        await until(kube, LEASE, NS, "second", ready)
        await asyncio.sleep(scaled(0.5))
        finished = spans.get_finished_spans()
    root = [s for s in finished if s.parent is None and s.name == "receive Lease"
            and attributes(s)["k8s.object.name"] == "second" and attributes(s)["k8s.event.type"] == "ADDED"]
    assert len(root) == 1
    story = [s for s in finished if s.context.trace_id == root[0].context.trace_id]
    assert [s.name for s in story if s.parent is None] == ["receive Lease"]
    became_ready = [(s.context.trace_id, dict(e.attributes or {})) for s in finished for e in s.events
                    if e.name == "condition changed" and dict(e.attributes or {}).get("lessor.condition.type") == "Ready"
                    and dict(e.attributes or {}).get("lessor.condition.status") == "True"]
    ready_write = [a for t, a in became_ready if t == root[0].context.trace_id]
    assert ready_write, became_ready  # second's Ready is written in second's trace
    release = {s.context.trace_id for s in finished if s.parent is None and attributes(s).get("k8s.object.name")
               == "first" and attributes(s).get("k8s.event.type") != "ADDED"}
    linked = {link.context.trace_id for s in story for link in s.links}
    assert release & linked, "the offer to the waiting lease links to nothing of the first one's release"


@pytest.mark.apiserver
async def test_a_lease_seen_before_its_policy_is_still_one_trace_from_its_creation_to_its_ready(
        tmp_path: Path) -> None:
    """What a busy machine does to `lessor dev`'s samples: the lease's watch event is handled before the policy's.
    The lease resolves again when the policy arrives; its grant is still the lease's story, linked to the policy."""
    async with traced_operator(tmp_path) as (kube, spans):
        await lab(kube, 1, policy=False)
        await a_lease(kube, "l1")
        deadline = asyncio.get_running_loop().time() + scaled(30)
        while not any(s.name == "start lease" and attributes(s).get("messaging.destination.name") == "lease/lab/l1"
                      for s in spans.get_finished_spans()):
            assert asyncio.get_running_loop().time() < deadline, "the lease's actor never started"
            await asyncio.sleep(0.05)
        await a_policy(kube)  # within the lease's 3 s grace for open access: it resolves again on this
        await until(kube, LEASE, NS, "l1", ready)
        await asyncio.sleep(scaled(0.5))
        finished = spans.get_finished_spans()
    root = [s for s in finished if s.parent is None and s.name == "receive Lease"
            and attributes(s)["k8s.object.name"] == "l1" and attributes(s)["k8s.event.type"] == "ADDED"]
    assert len(root) == 1
    story = [s for s in finished if s.context.trace_id == root[0].context.trace_id]
    assert [s.name for s in story if s.parent is None] == ["receive Lease"]
    assert changes(story, "Ready", "True"), "l1's Ready is written in another trace than its creation's"
    policy = {s.context.trace_id for s in finished if s.parent is None
              and attributes(s).get("k8s.object.name") == "p" and attributes(s).get("k8s.event.type") == "ADDED"}
    assert policy and policy & {link.context.trace_id for s in story for link in s.links}, \
        "the lease's resolution after the policy arrived links to nothing of the policy's event"


@pytest.mark.apiserver
async def test_the_start_up_listings_are_one_trace(tmp_path: Path) -> None:
    """A viewer opened after `lessor run` shows one start-up trace with every kind's listing in it, not a root per
    kind to scroll past."""
    async with traced_operator(tmp_path) as (_, spans):
        # Ready once the caches are synced; the span of the listings ends in a task of its own at that moment,
        # which a loaded machine may run a little after the readiness is seen.
        async with asyncio.timeout(scaled(10)):
            while not any(s.name == "list informers" for s in spans.get_finished_spans()):
                await asyncio.sleep(0.01)
        finished = spans.get_finished_spans()
    lists = [s for s in finished if s.kind == SpanKind.CLIENT and attributes(s).get("lessor.api.verb") == "list"]
    assert {attributes(s).get("lessor.api.kind") for s in lists} >= {"Exporter", "Lease", "ResourceClaim"}, \
        [s.name for s in lists]
    traces = {s.context.trace_id for s in lists}
    assert len(traces) == 1, [s.name for s in lists]
    assert [s.name for s in finished if s.parent is None and s.context.trace_id in traces] == ["list informers"]


@pytest.mark.apiserver
async def test_heartbeats_that_change_nothing_start_no_trace_and_an_exporter_back_online_is_traced(
        tmp_path: Path) -> None:
    """After Ready, the agent's heartbeat (a new `status.lastSeen` every second here) re-reads the exporter and
    its lease and changes nothing: no trace. The exporter going Offline when they stop, and the heartbeat that
    brings it back Online, are news: traced."""
    async with traced_operator(tmp_path, heartbeat_timeout=scaled(6)) as (kube, spans):
        async def agent() -> None:
            while True:
                await heartbeat(kube, "e0")
                await asyncio.sleep(1.0)

        await lab(kube, 1)
        beating = asyncio.create_task(agent())
        try:
            await a_lease(kube, "l1")
            await until(kube, LEASE, NS, "l1", ready)
            await asyncio.sleep(scaled(1))
            spans.clear()
            seen = (await kube.get(EXPORTER, NS, "e0"))["status"]["lastSeen"]
            await asyncio.sleep(scaled(4))
            quiet = spans.get_finished_spans()
            assert (await kube.get(EXPORTER, NS, "e0"))["status"]["lastSeen"] != seen  # the agent did beat
        finally:
            beating.cancel()
        await until(kube, EXPORTER, NS, "e0", lambda o: condition(o, "Online") == "False")
        await asyncio.sleep(scaled(0.5))
        offline = spans.get_finished_spans()
        spans.clear()
        await heartbeat(kube, "e0")
        await until(kube, EXPORTER, NS, "e0", lambda o: condition(o, "Online") == "True")
        await asyncio.sleep(scaled(0.5))
        back = spans.get_finished_spans()
    # No new trace, and nothing of the heartbeats (a late span of the lease's own story may still end here).
    assert not [s for s in quiet if s.parent is None or s.name == "receive Exporter"], sorted({s.name for s in quiet})
    assert changes(offline, "Online", "False"), sorted({s.name for s in offline})
    online = changes(back, "Online", "True")
    assert online, sorted({s.name for s in back})
    story = [s for s in back if s.context.trace_id == online[0].context.trace_id]
    roots = [s for s in story if s.parent is None]
    assert [(r.name, attributes(r)["k8s.object.name"]) for r in roots] == [("receive Exporter", "e0")]


@pytest.mark.apiserver
async def test_a_lease_created_before_the_operator_leads_is_one_story_from_its_creation_to_ready(
        tmp_path: Path) -> None:
    """The operator follows while another replica holds the leader Lease; a lease is created meanwhile. When
    the operator takes over, the lease's actor starts in the trace of the lease's creation event, not in a
    trace of the take-over's: its Ready is in that trace."""
    async with traced_operator(tmp_path, held_leader=True) as (kube, spans):
        await lab(kube, 1)
        await a_lease(kube, "l1")
        await asyncio.sleep(scaled(2))  # received, and not acted on: this replica does not lead
        assert not ready(await kube.get(LEASE, NS, "l1"))
        await release(kube)
        await until(kube, LEASE, NS, "l1", ready)
        await asyncio.sleep(scaled(0.5))
        finished = spans.get_finished_spans()
    created = [s for s in finished if s.parent is None and s.name == "receive Lease"
               and attributes(s)["k8s.object.name"] == "l1" and attributes(s)["k8s.event.type"] == "ADDED"]
    assert len(created) == 1, [s.name for s in finished if s.parent is None]
    story = [s for s in finished if s.context.trace_id == created[0].context.trace_id]
    assert any(s.name == "start lease" and attributes(s)["messaging.destination.name"] == "lease/lab/l1"
               for s in story), [s.name for s in story]
    made_ready = changes(finished, "Ready", "True")
    assert made_ready and all(s.context.trace_id == created[0].context.trace_id for s in made_ready), \
        [(s.name, s.context.trace_id, created[0].context.trace_id) for s in made_ready]
    start = next(s for s in story if s.name == "start lease")
    assert start.links, "the lease's start-up says nothing of the take-over that made it run now"


@pytest.mark.apiserver
@pytest.mark.parametrize("traced", [False, True], ids=["by-default", "trace-leader-election"])
async def test_leader_election_is_traced_only_when_asked(kube: Gateway, kubeconfig: Path, traced: bool) -> None:
    """A leader renews its Lease every retry period: those traces drowned the lessor ones in Zipkin (82 of 152).
    Off by default; `--trace-leader-election` turns them on."""
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    settings = ElectionSettings(lease_duration=3.0, renew_deadline=2.0, retry_period=0.3,
                                name=f"traced-{str(traced).lower()}", traced=traced)
    async with await Gateway.connect(str(kubeconfig), registry=CollectorRegistry(),
                                     tracer_provider=provider) as gateway:
        elector = LeaderElector(gateway, OPS, settings)
        task = asyncio.create_task(elector.run())
        try:
            await asyncio.wait_for(elector.wait_leading(), scaled(10))
            await asyncio.sleep(scaled(1.5))  # a few renewals
        finally:
            await cancelled(task)
        await elector.release()
    assert (await kube.get(COORDINATION_LEASE, OPS, settings.name))["spec"].get("holderIdentity") is None
    election = [s.name for s in spans.get_finished_spans() if s.name.endswith(" Lease.coordination.k8s.io")]
    if traced:  # the acquisition, renewals and the release, each a trace of its own
        assert len(election) >= 4 and "update Lease.coordination.k8s.io" in election, election
    else:
        assert not spans.get_finished_spans(), [s.name for s in spans.get_finished_spans()]


@pytest.mark.apiserver
async def test_one_claim_from_its_watch_event_to_ready_is_one_trace_through_the_objects_lessor_writes(
        tmp_path: Path) -> None:
    """The claim's actor creates a handle, the handle's actor creates the ConfigMap, the handle's status brings
    the claim its Ready: three watch events of lessor's own writes, each continuing the trace of the write."""
    async with traced_operator(tmp_path) as (kube, spans):
        await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider", "metadata": {"name": "p"},
                                          "spec": {"override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                                "metadata": {"namespace": OPS}}}})
        await asyncio.sleep(scaled(1))
        spans.clear()
        await kube.create(CLAIM, NS, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": "c1"},
                                      "spec": {"resources": [{"provider": {"name": "p"},
                                                              "template": {"data": {"x": "1"}}}]}})
        await until(kube, CLAIM, NS, "c1", ready)
        await asyncio.sleep(scaled(0.5))
        finished = spans.get_finished_spans()
    roots = [s for s in finished if s.parent is None and s.name == "receive ResourceClaim"
             and attributes(s)["k8s.event.type"] == "ADDED"]
    assert len(roots) == 1, [s.name for s in finished if s.parent is None]
    story = [s for s in finished if s.context.trace_id == roots[0].context.trace_id]
    assert [s.name for s in story if s.parent is None] == ["receive ResourceClaim"]
    ids = {s.context.span_id for s in story}
    assert all(s.parent is None or s.parent.span_id in ids for s in story), "a span whose parent is elsewhere"
    names = [s.name for s in story]
    assert {"create ResourceHandle", "receive ResourceHandle", "create ConfigMap", "receive ConfigMap"} <= set(names)
    claim_ready = [s for s in story for e in s.events if e.name == "condition changed"
                   and dict(e.attributes or {}).get("lessor.condition.type") == "Ready"
                   and dict(e.attributes or {}).get("lessor.condition.status") == "True"]
    assert claim_ready, names  # the write that made the claim Ready is in the claim's trace

    out = io.StringIO()
    assert print_trace("claim", "lab/c1", tmp_path / "traces.jsonl", out) == 0
    assert "create ConfigMap" in out.getvalue() and "Ready=True" in out.getvalue(), out.getvalue()


@pytest.mark.apiserver
async def test_every_span_of_a_small_storm_follows_the_conventions(tmp_path: Path) -> None:
    async with traced_operator(tmp_path) as (kube, spans):
        await lab(kube, 3)
        await asyncio.gather(*(a_lease(kube, f"l{i}") for i in range(6)))
        for i in range(6):
            await until(kube, LEASE, NS, f"l{i}", lambda o: bool((o.get("status") or {}).get("conditions")))
        await asyncio.sleep(scaled(0.5))
        finished = spans.get_finished_spans()
    assert finished
    problems = []
    for span in finished:
        a = attributes(span)
        if "_" in span.name.split(" ")[-1][:1]:
            problems.append(f"{span.name}: a private name")
        if span.kind in (SpanKind.PRODUCER, SpanKind.CONSUMER):
            missing = {"messaging.system", "messaging.operation.name", "messaging.operation.type",
                       "messaging.destination.name"} - a.keys()
            if missing:
                problems.append(f"{span.name}: without {sorted(missing)}")
            elif a["messaging.system"] == "lessor":
                step = (a["messaging.destination.template"].partition("/")[0]
                        if a["messaging.operation.name"] == "start" else a["lessor.message.type"])
                if span.name != f"{a['messaging.operation.name']} {step}":
                    problems.append(f"{span.name}: not '{{operation}} {{message type}}' (or 'start {{kind}}')")
                if a["lessor.message.type"].startswith("_"):
                    problems.append(f"{span.name}: private message type {a['lessor.message.type']}")
        elif span.kind == SpanKind.CLIENT:
            missing = {"http.request.method", "url.full", "server.address", "server.port"} - a.keys()
            if missing:
                problems.append(f"{span.name}: without {sorted(missing)}")
            elif "://" in str(a["server.address"]) or not isinstance(a["server.port"], int):
                problems.append(f"{span.name}: server.address {a['server.address']!r} port {a['server.port']!r}")
            elif "http.response.status_code" not in a and span.status.is_ok:
                problems.append(f"{span.name}: no status code and no error")
    assert not problems, problems[:20]


def test_lessor_trace_says_what_to_do_without_a_file_or_a_trace(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="run `lessor dev --traces`"):
        print_trace("lease", "lab/l1", tmp_path / "none.jsonl", io.StringIO())
    (tmp_path / "t.jsonl").write_text("")
    with pytest.raises(ValueError, match="no trace of the creation of lease lab/l1"):
        print_trace("lease", "lab/l1", tmp_path / "t.jsonl", io.StringIO())
    with pytest.raises(ValueError, match="NAMESPACE/NAME"):
        print_trace("lease", "l1", tmp_path / "t.jsonl", io.StringIO())


def _record(trace: str, span: str, parent: str | None, name: str, **attrs: Any) -> str:
    return orjson.dumps({"trace": trace, "span": span, "parent": parent, "name": name, "start": 1, "end": 2,
                         "error": False, "description": "", "attributes": attrs, "events": []}).decode()


def test_lessor_trace_url_links_the_lease_s_own_trace_in_zipkin(tmp_path: Path) -> None:
    trace = "4bf92f3577b34da6a3ce929d0e0e4736"
    (tmp_path / "t.jsonl").write_text("\n".join([
        _record("0" * 31 + "1", "1" * 16, None, "receive Lease", **{
            "k8s.event.type": "ADDED", "k8s.namespace.name": "lab", "k8s.object.name": "other"}),
        _record(trace, "2" * 16, None, "receive Lease", **{
            "k8s.event.type": "ADDED", "k8s.namespace.name": "lab", "k8s.object.name": "l1"}),
        _record(trace, "3" * 16, "2" * 16, "start lease"),
    ]) + "\n")
    out = io.StringIO()
    assert print_trace("lease", "lab/l1", tmp_path / "t.jsonl", out, zipkin_port=19411) == 0
    assert out.getvalue() == f"http://127.0.0.1:19411/zipkin/traces/{trace}\n"


@pytest.mark.parametrize("bad, what", [('{"trace": "4bf92f35', "not JSON"), ("[1, 2]", "not a span"),
                                       ('{"trace": "x"}', "not a span")])
def test_lessor_trace_names_a_malformed_line_and_says_what_to_do(tmp_path: Path, bad: str, what: str) -> None:
    path = tmp_path / "t.jsonl"
    path.write_text(_record("1" * 32, "1" * 16, None, "receive Lease") + "\n\n" + bad + "\n")
    with pytest.raises(ValueError) as refused:
        print_trace("lease", "lab/l1", path, io.StringIO())
    message = str(refused.value)
    assert message.startswith(f"{path}, line 3: {what}") and "delete that line" in message, message
