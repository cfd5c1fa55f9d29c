"""Hostile objects through the real API server, with the in-process operator deciding (issue 10, findings 1, 2, 4).

A catastrophic regex, template memory bombs, a template that spins, and
durations that used to overflow: each gets a condition naming its field,
and the operator stays responsive meanwhile. The one timed assertion the
issue asks for is here: the event loop's lag stays under 100 ms while the
hostile objects are processed.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import gc
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.client import ApiError
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, LEASE, PROVIDER
from tests.polling import until
from tests.slowness import scaled

pytestmark = pytest.mark.usefixtures("operator")
API = "lessor.dev/v1alpha1"
OPS = "lessor-system"
MAX_LAG = scaled(0.1)  # at most 1 s (tests/slowness.py): still short of the 2 s a template may run


def condition(obj: Mapping[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or () if c["type"] == type_), {})


def has(type_: str, status: str, reason: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda obj: (condition(obj, type_).get("status"), condition(obj, type_).get("reason")) == (status, reason)


def _runqueue_wait() -> float:
    """Seconds this thread has waited for a CPU while runnable (0 where Linux's schedstat is not there)."""
    try:
        with open("/proc/thread-self/schedstat") as stats:
            return int(stats.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


class LagMonitor:
    """Samples the event loop's lag: how late a 10 ms sleep wakes up, less the time the loop's thread waited
    for a CPU while it could run (a busy machine is not the loop blocked: a full suite's run once measured
    168 ms here, which the test alone never showed; Linux's schedstat counts that wait) and less the cycle
    collector's passes, which walk the whole test process and no hostile object causes (the operator freezes
    its own heap after start-up, lessor/health/memory.py). A step that blocks the loop, on the CPU or in a call that
    waits, still counts in full. `worst_wall` and `worst_collecting` are reported beside it."""

    def __init__(self) -> None:
        self.worst = 0.0
        self.worst_wall = 0.0
        self.worst_collecting = 0.0
        self.samples = 0
        self._collecting = 0.0  # seconds of collector passes so far
        self._pass_began = 0.0
        self._task: asyncio.Task[None] | None = None

    def _gc(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._pass_began = time.perf_counter()
        else:
            spent = time.perf_counter() - self._pass_began
            self._collecting += spent
            self.worst_collecting = max(self.worst_collecting, spent)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            start, queued, collecting = loop.time(), _runqueue_wait(), self._collecting
            await asyncio.sleep(0.01)
            late = loop.time() - start - 0.01
            self.worst_wall = max(self.worst_wall, late)
            self.worst = max(self.worst, late - (_runqueue_wait() - queued) - (self._collecting - collecting))
            self.samples += 1

    def __enter__(self) -> LagMonitor:
        gc.callbacks.append(self._gc)
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self._gc)
        assert self._task is not None
        self._task.cancel()


@pytest.fixture
async def providers(kube: Gateway) -> AsyncIterator[dict[str, str]]:
    suffix = uuid.uuid4().hex[:6]
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPS}}
    specs = {
        # finding 1: a catastrophic pattern (backtracking `re` would take hours on the claim below)
        "redos": {"override": configmap, "validation": {"openAPIV3Schema": {"type": "object", "properties": {
            "data": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}}}}},
        # a pattern RE2 cannot compile: a named error on the provider, reported on its claims
        "lookahead": {"override": configmap, "validation": {"openAPIV3Schema": {"type": "object", "properties": {
            "data": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(?=a)a$"}}}}}}},
        # finding 4: memory bombs and a spin, rendered by the claim (default) and the handle (override)
        "bomb": {"template": {"enable": True}, "override": {**configmap, "data": {
            "pad": "{{ '{:>999999999}'.format(1) }}"}}},
        "spin": {"template": {"enable": True}, "override": configmap, "default": {"data": {
            "spin": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}}},
        "plain": {"override": configmap},
    }
    names = {key: f"{key}-{suffix}" for key in specs}
    for key, spec in specs.items():
        await kube.create(PROVIDER, OPS, {"apiVersion": API, "kind": "ResourceProvider",
                                          "metadata": {"name": names[key]}, "spec": spec})
    yield names
    for name in names.values():
        await kube.delete(PROVIDER, OPS, name)


async def claim(kube: Gateway, ns: str, name: str, provider: str, template: Mapping[str, Any]) -> None:
    await kube.create(CLAIM, ns, {"apiVersion": API, "kind": "ResourceClaim", "metadata": {"name": name},
                                  "spec": {"resources": [{"provider": {"name": provider}, "template": template}]}})


async def test_hostile_claims_get_named_conditions_while_the_event_loop_stays_responsive(
    kube: Gateway, namespace: str, providers: dict[str, str]
) -> None:
    with LagMonitor() as lag:
        await claim(kube, namespace, "redos", providers["redos"], {"data": {"x": "a" * 40 + "!"}})
        await claim(kube, namespace, "lookahead", providers["lookahead"], {"data": {"x": "a"}})
        await claim(kube, namespace, "bomb", providers["bomb"], {})
        await claim(kube, namespace, "spin", providers["spin"], {})
        await claim(kube, namespace, "plain", providers["plain"], {"data": {"x": "fine"}})

        redos = await until(kube, CLAIM, namespace, "redos", has("Valid", "False", "SchemaViolation"))
        lookahead = await until(kube, CLAIM, namespace, "lookahead", has("Valid", "False", "ProviderInvalid"))
        spin = await until(kube, CLAIM, namespace, "spin", has("Valid", "False", "ProviderTemplateError"))
        bomb = await until(kube, CLAIM, namespace, "bomb", lambda c: condition(c, "Ready").get("status") == "False"
                           and "template size limit" in condition(c, "Ready").get("message", ""))
        await until(kube, CLAIM, namespace, "plain", has("Ready", "True", "Ready"))  # the operator kept working
    print(f"worst event-loop lag {lag.worst * 1000:.1f} ms over {lag.samples} samples (waits for a CPU apart; wall "
          f"{lag.worst_wall * 1000:.1f} ms; collector passes apart, the longest {lag.worst_collecting * 1000:.1f} ms)")

    assert "spec.resources[0].template/data/x" in condition(redos, "Valid")["message"]
    assert "does not match '^(a+)+$'" in condition(redos, "Valid")["message"]
    assert ("spec.validation.openAPIV3Schema.properties.data.properties.x.pattern: invalid regular expression "
            "'^(?=a)a$' (RE2 syntax)") in condition(lookahead, "Valid")["message"]
    assert "/spec/default/data/spin" in condition(spin, "Valid")["message"]
    assert "the template time limit is 2 s" in condition(spin, "Valid")["message"]
    assert "/spec/override/data/pad" in condition(bomb, "Ready")["message"]
    assert lag.samples > 10
    assert lag.worst < MAX_LAG, f"the event loop stalled for {lag.worst * 1000:.0f} ms (limit {MAX_LAG * 1000:.0f} ms)"


# --- finding 2: durations that used to overflow ------------------------------------------------------


def now(offset: float = 0) -> str:
    return (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=offset)).strftime("%Y-%m-%dT%H:%M:%SZ")


async def lease(kube: Gateway, ns: str, name: str, **spec: Any) -> None:
    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}}, **spec}})


async def test_a_lease_beyond_100_years_is_invalid_and_the_next_lease_gets_the_exporter(
    kube: Gateway, namespace: str
) -> None:
    await kube.create(CLIENT, namespace, {"apiVersion": API, "kind": "Client", "metadata": {"name": "alice"}})
    await kube.create(EXPORTER, namespace, {"apiVersion": API, "kind": "Exporter",
                                            "metadata": {"name": "rpi4-01", "labels": {"board": "rpi4"}},
                                            "spec": {"enabled": True}})
    await kube.patch_status(EXPORTER, namespace, "rpi4-01", {"lastSeen": now(), "exporterStatus": "Available"})

    with pytest.raises(ApiError) as refused:  # the CRD's pattern already refuses a term this long
        await lease(kube, namespace, "absurd", duration="99999999h")
    assert refused.value.invalid and "spec.duration" in refused.value.message

    with pytest.raises(ApiError) as refused:  # year 1 minus an hour overflowed; years before 1970 are refused
        await lease(kube, namespace, "ancient", endTime="0001-01-01T00:00:00Z", duration="1h")
    assert refused.value.invalid and "spec.endTime" in refused.value.message

    await lease(kube, namespace, "century", duration="876001h")  # passes the pattern, one hour too long
    await lease(kube, namespace, "normal", duration="1h")

    century = await until(kube, LEASE, namespace, "century", has("Invalid", "True", "InvalidDuration"))
    await until(kube, LEASE, namespace, "normal", has("Ready", "True", "Ready"))
    exporter = await kube.get(EXPORTER, namespace, "rpi4-01")

    assert condition(century, "Invalid")["message"] == (
        "spec.duration: duration '876001h' is out of range: at most 100 years (36500d, 876000h)")
    assert exporter["status"]["leaseRef"]["name"] == "normal"
