"""What a start writes, counted from the operator's own requests against the real API server: a first start
writes each object's conditions once (an Exporter's `Online`, a Client's and a policy's `Valid`), a restart
onto a settled cluster writes nothing, and the benches' ceiling measurement leaves no Exporter behind for
the operator they start next to write.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import re
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY
from lessor.model.views.conditions import StatusView
from lessor.tools.bench.apiserver import measure_ceiling
from lessor.tools.bench.common import WRITE_VERBS, metrics_text
from lessor.tools.controlplane import ControlPlane
from tests.clusters import own_cluster
from tests.slowness import described, scaled

pytestmark = pytest.mark.apiserver
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
BEATING, NEVER_SEEN, OFFLINE = 24, 4, 4
EXPORTERS = BEATING + NEVER_SEEN + OFFLINE
LEASES = 3  # two granted, one waiting for the exporter it selects
RETRIES = 2  # attempts the API server did not answer in time, tried again: a busy machine's, not waste


@pytest.fixture(scope="module")
async def cluster(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[tuple[ControlPlane, Gateway]]:
    """A control plane of this module's own: the operator's requests are this module's objects' alone."""
    async with own_cluster(tmp_path_factory.mktemp("startup")) as (cp, kube):
        yield cp, kube


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


async def _lab(kube: Gateway, ns: str) -> None:
    """Exporters whose agents beat, never reported, or report Offline; one client; one policy; leases."""
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    for i in range(EXPORTERS):
        name = f"e{i:02d}"
        await kube.create(EXPORTER, ns, {"apiVersion": API, "kind": "Exporter",
                                         "metadata": {"name": name, "labels": {"board": "rpi", "slot": name}}})
        if i < BEATING:
            await kube.patch_status(EXPORTER, ns, name, {"lastSeen": _stamp(), "exporterStatus": "Available"})
        elif i >= BEATING + NEVER_SEEN:
            await kube.patch_status(EXPORTER, ns, name, {"lastSeen": _stamp(), "exporterStatus": "Offline"})
    await kube.create(CLIENT, ns, {"apiVersion": API, "kind": "Client",
                                   "metadata": {"name": "qa", "labels": {"team": "qa"}}})
    await kube.create(POLICY, ns, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "lab"},
                                   "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                                       {"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}]}]}})


async def _leases(kube: Gateway, ns: str) -> None:
    for name, slot in (("l0", "e00"), ("l1", "e01"), ("l2", "e00")):  # l2 waits behind l0
        await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
            "clientRef": {"name": "qa"}, "selector": {"matchLabels": {"slot": slot}}, "duration": "1h"}})


def _writes(port: int, *, answered: bool = True) -> dict[str, float]:
    """The operator's writes to lessor's own kinds so far, by 'verb kind': those the API server took (2xx), or
    with `answered=False` every attempt (a busy machine may time one out, and the actor try again)."""
    found: dict[str, float] = {}
    for code, kind, verb, value in re.findall(
            r'lessor_api_requests_total\{code="([^"]*)",kind="([^"]*)",verb="([^"]*)"\} (\S+)', metrics_text(port)):
        if verb in WRITE_VERBS and kind in (EXPORTER.kind, CLIENT.kind, POLICY.kind, LEASE.kind) \
                and float(value) and (code.startswith("2") or not answered):
            found[f"{verb} {kind}"] = found.get(f"{verb} {kind}", 0.0) + float(value)
    return found


def _exporter_messages(port: int) -> tuple[float, float]:
    """(the Observed messages exporter actors have handled, the messages waiting in their mailboxes)."""
    handled = depth = 0.0
    for line in metrics_text(port).splitlines():
        if line.startswith("lessor_messages_handled_total{") and 'kind="exporter"' in line \
                and 'message_type="Observed"' in line:
            handled += float(line.rsplit(" ", 1)[1])
        elif line.startswith("lessor_mailbox_depth{") and 'kind="exporter"' in line:
            depth += float(line.rsplit(" ", 1)[1])
    return handled, depth


async def _poll(check: Callable[[], Awaitable[bool]], what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + scaled(timeout)
    while not await check():
        assert time.monotonic() < deadline, f"{what}: not within {described(timeout)}"
        await asyncio.sleep(0.2)


async def _started(port: int) -> None:
    """Every exporter actor has handled the start's announcement of its exporter (so its `started` ran,
    and with it any write a start makes), and the writes have stopped for a second."""
    async def announced() -> bool:
        try:
            handled, depth = await asyncio.to_thread(_exporter_messages, port)
        except OSError:  # not serving /metrics yet
            return False
        return handled >= EXPORTERS and depth == 0

    await _poll(announced, "every exporter actor started")
    last: dict[str, float] | None = None

    async def still() -> bool:
        nonlocal last
        now = await asyncio.to_thread(_writes, port)
        settled, last = now == last, now
        if not settled:
            await asyncio.sleep(scaled(1.0))  # a write that trails shows by the next look
        return settled

    await _poll(still, "the operator's writes stopped")


async def test_a_start_writes_each_condition_once_and_a_restart_nothing(
        cluster: tuple[ControlPlane, Gateway], operator_process: Callable[[ControlPlane], Any]) -> None:
    cp, kube = cluster
    ns = f"s-{uuid.uuid4().hex[:6]}"
    await _lab(kube, ns)
    operator = operator_process(cp)
    # The heartbeat outlasts the test however slow the machine: the beating exporters stay Online, so each
    # write counted is the start's own and none an expiry's.
    operator.start("--exporter-heartbeat-timeout", "1h")

    async def all_online() -> bool:
        exporters, _ = await kube.list(EXPORTER, ns)
        return sum(StatusView.of(e).condition("Online") is not None for e in exporters) == EXPORTERS

    await _poll(all_online, "every exporter's Online written")
    await _started(operator.metrics_port)
    assert _writes(operator.metrics_port) == {
        "patch Exporter": EXPORTERS, "patch Client": 1, "patch ExporterAccessPolicy": 1}, \
        "a first start writes each object's condition once"
    assert sum(_writes(operator.metrics_port, answered=False).values()) <= EXPORTERS + 2 + RETRIES

    await _leases(kube, ns)
    await _poll(lambda: _settled_leases(kube, ns), "two leases granted, one waiting")
    held = await kube.get(EXPORTER, ns, "e00")
    assert (held.get("status") or {}).get("leaseRef") == {"name": "l0"}

    operator.kill()
    operator.start("--exporter-heartbeat-timeout", "1h")
    await _started(operator.metrics_port)
    assert _writes(operator.metrics_port) == {}, "a restart onto a settled cluster writes nothing"
    assert sum(_writes(operator.metrics_port, answered=False).values()) <= RETRIES


async def _settled_leases(kube: Gateway, ns: str) -> bool:
    leases = {lease["metadata"]["name"]: StatusView.of(lease) for lease in (await kube.list(LEASE, ns))[0]}
    return (len(leases) == LEASES and leases["l0"].is_true("Ready") and leases["l1"].is_true("Ready")
            and leases["l2"].condition("Pending") is not None and not leases["l2"].is_true("Ready"))


async def test_the_ceiling_measurement_leaves_no_exporter_behind(cluster: tuple[ControlPlane, Gateway]) -> None:
    """The benches measure the ceiling on a control plane without a namespace controller, before starting the
    operator: whatever it left, the operator would list and write (`bench leases` wrote some 2,500 such
    `Online` conditions at its start)."""
    _, kube = cluster
    await measure_ceiling(kube, seconds=0.2, watch_samples=3)
    left, _ = await kube.list(EXPORTER, None, label_selector="bench=1")
    assert left == []
