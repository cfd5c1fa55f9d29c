"""One tenant cannot slow another (issue 23): a canary claim and lease in one namespace while another spins templates,
and a canary lease while another namespace creates leases as fast as the API server takes them.

The attack is the one measured in the issue: fifteen claims on a provider
whose template spins until the 2 s time limit, each re-triggered by a spec
patch every 2 s. With one shared first-come line in front of the render
threads, the canary's renders queued behind all of them (30 s to Ready
against 0.8 s quiet; its lease 6.9 s against 3.0 s). The limit is a ratio
to a quiet phase measured in the same test, so a busy machine slows both
sides alike.
"""

from __future__ import annotations

import asyncio
import statistics
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest

from pathlib import Path

from lessor.actors.provisioning import throttle
from lessor.gateway import Gateway
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, LEASE, NAMESPACE, POLICY, PROVIDER
from lessor.tools.bench.canary_tenant import CanaryTimes
from lessor.tools.bench.canary_tenant import canary_lease as tenant_lease
from lessor.tools.bench.common import gather_limited
from tests.app.test_hostile_input import API, OPS, claim, condition, has, lease, now
from tests.app.test_metrics import samples, scrape, value
from tests.polling import discard, until, wait_events
from tests.tasks import cancelled

pytestmark = pytest.mark.usefixtures("operator")

SPIN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
ATTACKERS = 15
ROUNDS = 3
#: The canary's worst time to Ready under attack, at most this many times its worst quiet one (the issue's target;
#: the lease-storm canary compares medians, see there).
RATIO = 2.0
#: The resolution of a time to Ready: `until` reads the claim every 0.1 s, and one status write more or less
#: (a handle's report arriving a read later) is noise, so a quiet phase faster than five reads counts as five.
RESOLUTION = 0.5


@pytest.fixture
async def providers(kube: Gateway) -> AsyncIterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}}
    specs = {"spin": {"template": {"enable": True}, "override": configmap, "default": {"data": {"spin": SPIN}}},
             "plain": {"override": configmap}}
    names = {key: f"fair-{key}-{suffix}" for key in specs}
    for key, spec in specs.items():
        await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider",
                                          "metadata": {"name": names[key]}, "spec": spec})
    yield names
    for name in names.values():
        await discard(kube, PROVIDER, OPS, name)


@pytest.fixture
async def attacker(kube: Gateway) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACE, None, name)


async def canary(kube: Gateway, namespace: str, provider: str) -> float:
    """Seconds from creating a claim to its Ready=True; the claim is deleted again."""
    name = f"canary-{uuid.uuid4().hex[:6]}"
    began = time.monotonic()
    await claim(kube, namespace, name, provider, {"data": {"x": "fine"}})
    await until(kube, CLAIM, namespace, name, has("Ready", "True", "Ready"), timeout=90)
    took = time.monotonic() - began
    await discard(kube, CLAIM, namespace, name)
    return took


async def canary_lease(kube: Gateway, namespace: str, board: str) -> float:
    """Seconds from creating a lease of the exporter labelled `board` (given a fresh heartbeat) to its Ready=True."""
    await kube.patch_status(EXPORTER, namespace, board, {"lastSeen": now(), "exporterStatus": "Available"})
    began = time.monotonic()
    await lease(kube, namespace, board, duration="1h", selector={"matchLabels": {"board": board}})
    await until(kube, LEASE, namespace, board, has("Ready", "True", "Ready"), timeout=90)
    return time.monotonic() - began


async def exporters(kube: Gateway, namespace: str, boards: list[str]) -> None:
    await kube.create(CLIENT, namespace, {"apiVersion": API, "kind": "Client", "metadata": {"name": "alice"}})
    for board in boards:
        await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter", "metadata": {
            "name": board, "labels": {"board": board}}, "spec": {"enabled": True}})


async def storm(kube: Gateway, namespace: str, names: list[str]) -> None:
    """Every 2 s, a spec patch of every spinning claim: each one renders again (and spins again)."""
    for n in range(1_000_000):
        began = time.monotonic()
        await asyncio.gather(*(kube.merge_patch(CLAIM, namespace, name, {"spec": {"resources": [
            {"provider": {"name": name.rsplit("-", 1)[0]}, "template": {"data": {"round": str(n)}}}]}})
            for name in names), return_exceptions=True)
        await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - began)))


async def test_a_canary_claim_is_not_slowed_by_another_namespaces_spinning_templates(
    kube: Gateway, namespace: str, attacker: str, providers: dict[str, str], monkeypatch: pytest.MonkeyPatch,
    operator: Any
) -> None:
    monkeypatch.setattr(throttle, "STRIKES", 10**9)  # the fair render queue alone: the provider is never held back
    boards = [f"board-{i}" for i in range(2 * ROUNDS)]  # an exporter per canary lease: none waits for a release
    await exporters(kube, namespace, boards)
    quiet = [await canary(kube, namespace, providers["plain"]) for _ in range(ROUNDS)]
    quiet_leases = [await canary_lease(kube, namespace, board) for board in boards[:ROUNDS]]

    spinning = [f"{providers['spin']}-{i}" for i in range(ATTACKERS)]
    for name in spinning:  # named after their provider, so that the storm's patch can name it again
        await claim(kube, attacker, name, providers["spin"], {})
    await until(kube, CLAIM, attacker, spinning[-1], has("Valid", "False", "ProviderTemplateError"), timeout=60)
    patches = asyncio.create_task(storm(kube, attacker, spinning))
    try:
        attacked = [await canary(kube, namespace, providers["plain"]) for _ in range(ROUNDS)]
        attacked_leases = [await canary_lease(kube, namespace, board) for board in boards[ROUNDS:]]
        assert not patches.done(), patches.exception()
    finally:
        await cancelled(patches)
    spun = await kube.get(CLAIM, attacker, spinning[0])
    print(f"canary claim to Ready: quiet {[round(t, 2) for t in quiet]} s, under attack "
          f"{[round(t, 2) for t in attacked]} s; canary lease: quiet {[round(t, 2) for t in quiet_leases]} s, "
          f"under attack {[round(t, 2) for t in attacked_leases]} s")

    assert "the template time limit is 2 s" in condition(spun, "Valid")["message"]  # it kept spinning
    # How long each namespace's template work waited for a render thread, for whoever watches the operator.
    found = samples(await asyncio.to_thread(scrape, operator.config.metrics_port))
    for tenant in (namespace, attacker):
        assert value(found, "lessor_render_queue_seconds_count", namespace=tenant) > 0, tenant

    base = max(*quiet, RESOLUTION)
    assert max(attacked) <= RATIO * base, (
        f"the canary took {max(attacked):.2f} s to Ready while another namespace spun templates, "
        f"more than {RATIO:g}x its {base:.2f} s in the quiet phase")
    base = max(*quiet_leases, RESOLUTION)
    assert max(attacked_leases) <= RATIO * base, (
        f"the canary lease took {max(attacked_leases):.2f} s to Ready while another namespace spun templates, "
        f"more than {RATIO:g}x its {base:.2f} s in the quiet phase")


async def test_a_provider_whose_templates_keep_running_out_of_time_is_throttled_and_says_so(
    kube: Gateway, attacker: str, providers: dict[str, str]
) -> None:
    spinning = [f"{providers['spin']}-{i}" for i in range(4)]
    for name in spinning:
        await claim(kube, attacker, name, providers["spin"], {})

    provider = await until(kube, PROVIDER, OPS, providers["spin"], has("Throttled", "True", "TemplateTimeLimit"),
                           timeout=60)
    held = await until(kube, CLAIM, attacker, spinning[-1], has("Valid", "False", "ProviderThrottled"), timeout=60)
    events = await wait_events(kube, OPS, providers["spin"], lambda found: any(
        e["reason"] == "TemplateTimeLimit" for e in found), kind="ResourceProvider")

    message = condition(provider, "Throttled")["message"]
    assert f"ResourceProvider {providers['spin']} is throttled for 60 s: its template spec.default.data.spin ran " \
           "out of time 3 times within 60 s, each costing a render thread 2 s (6 s in all)" in message
    assert message in condition(held, "Valid")["message"]  # the claim says why it waits, naming the provider
    assert condition(provider, "Valid")["status"] == "True"  # held back, not broken
    assert any(message in (e.get("note") or "") for e in events)


STORM_EXPORTERS = 200
STORM_GROUPS = 20  # ten exporters per group: most of the storm's leases wait, as in a real one
#: Leases the storm creates, at most, while the canaries run (it is cancelled once they are Ready).
STORM_LEASES = 3000
#: Leases the storm must create while the canaries run, or they did not run in a storm.
STORM_DURING = 100


async def tenant(kube: Gateway, namespace: str, client: str, exporters: dict[str, dict[str, str]]) -> None:
    """A client, a policy that lets it lease every exporter here, and the exporters, their agents reporting."""
    await kube.create(CLIENT, namespace, {"apiVersion": API, "kind": "Client", "metadata": {
        "name": client, "labels": {"tier": client}}})
    await kube.create(POLICY, namespace, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {
        "name": client}, "spec": {"exporterSelector": {}, "policies": [{
            "priority": 10, "maximumDuration": "8h", "from": [{"clientSelector": {"matchLabels": {"tier": client}}}]}]}})

    async def exporter(name: str, labels: dict[str, str]) -> None:
        await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter",
                                                "metadata": {"name": name, "labels": labels}})
        await kube.patch_status(EXPORTER, namespace, name, {"lastSeen": now(), "exporterStatus": "Available"})

    await gather_limited([exporter(name, labels) for name, labels in exporters.items()])


async def test_a_canary_lease_is_not_slowed_by_another_namespaces_lease_storm(
    kube: Gateway, namespace: str, attacker: str, kubeconfig: Path, operator: Any
) -> None:
    """`lessor bench leases`'s canary in the suite, smaller: another tenant's lease, sent by a process of its own
    as another tenant's client is (`canary_tenant`), timed to the Ready its watch delivers, alone and then while
    another namespace creates leases as fast as the API server takes them. The limit is the issue's ratio to the
    quiet leases of the same test, on lessor's part of each time: the watched time less the API server's own for
    the same requests, measured by the canary's process alongside (`api_floor_seconds`, as the bench reports it);
    the storm must be under way throughout."""
    slots = [f"{phase}-{i}" for phase in ("quiet", "storm") for i in range(ROUNDS)]
    await tenant(kube, namespace, "canary", {slot: {"slot": slot} for slot in slots})
    await tenant(kube, attacker, "storm", {f"e{i:03d}": {"group": f"g{i % STORM_GROUPS}"}
                                            for i in range(STORM_EXPORTERS)})

    async def canary(slot: str, after: Any = lambda: True) -> CanaryTimes:
        await kube.patch_status(EXPORTER, namespace, slot, {"lastSeen": now(), "exporterStatus": "Available"})
        return await tenant_lease(kubeconfig, namespace, slot, after)

    quiet = [await canary(slot) for slot in slots[:ROUNDS]]
    created = 0

    async def storm() -> None:
        nonlocal created
        async with await Gateway.connect(str(kubeconfig)) as client:  # the storm's own connections

            async def one(i: int) -> None:
                nonlocal created
                await client.create(LEASE, attacker, {"apiVersion": API, "kind": "Lease", "metadata": {
                    "name": f"l{i:05d}"}, "spec": {"clientRef": {"name": "storm"}, "duration": "1h",
                                                   "selector": {"matchLabels": {"group": f"g{i % STORM_GROUPS}"}}}})
                created += 1

            await gather_limited([one(i) for i in range(STORM_LEASES)])

    sent_at: list[int] = []  # leases created when the first canary was sent

    def under_way() -> bool:
        if created >= STORM_DURING:
            sent_at.append(created)
        return bool(sent_at)

    creating = asyncio.create_task(storm())
    try:
        attacked = [await canary(slots[ROUNDS], after=under_way)]
        attacked += [await canary(slot) for slot in slots[ROUNDS + 1:]]
        during = created - sent_at[0]
        assert not creating.done(), creating.exception() if creating.done() else None
    finally:
        await cancelled(creating)

    def lessors(times: list[CanaryTimes]) -> list[float]:
        return [max(0.0, t.watched_seconds - t.api_floor_seconds) for t in times]

    def shown(times: list[CanaryTimes]) -> str:
        return ", ".join(f"{t.watched_seconds:.2f} (API {t.api_floor_seconds:.2f})" for t in times)

    print(f"canary lease to Ready (watched, and the API server's own time for its requests): quiet {shown(quiet)} s, "
          f"in another namespace's lease storm {shown(attacked)} s; the storm created {during} leases meanwhile")
    assert during >= STORM_DURING, f"the storm created only {during} leases while the canaries ran"
    # Lessor's part: the storm slows the API server's own answers to the canary's create and writes (0.1-0.5 s on
    # two cores, more on a busy machine), which no operator can take back; the canary's process measures them
    # alongside. A quiet phase faster than `RESOLUTION` counts as that. The median of the rounds: a canary stuck
    # behind the storm's line is late every round (seconds: the storm's hundreds of leases ahead of it), while
    # one round a busy machine's scheduler stretched is not the unfairness this test is about.
    base = max(statistics.median(lessors(quiet)), RESOLUTION)
    typical = statistics.median(lessors(attacked))
    assert typical <= RATIO * base, (
        f"lessor's part of the canary lease's time to Ready was {typical:.2f} s (median; times {shown(attacked)}) "
        f"while another namespace created leases, more than {RATIO:g}x its {base:.2f} s in the quiet phase")
