"""Benchmark of the template budget: what the sandbox's checks and the render threads cost.

Renders a provider override like the samples' (a few templated strings,
a timestamp, a filter) three ways: in a plain Jinja2 immutable sandbox
(the baseline, no budget), in lessor's budgeted sandbox on the calling
thread, and through `offload` (a render thread, as the actors do),
sequentially and with many concurrent renders. Also times one hostile
template, to show the time limit holds.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from collections.abc import Callable
from typing import Any

from jinja2 import StrictUndefined
from jinja2.sandbox import ImmutableSandboxedEnvironment

from lessor.templates import TemplateError, offload, render_object, template_variables
from lessor.templates.budget import MAX_SECONDS, switch_fast

OVERRIDE: dict[str, Any] = {
    "apiVersion": "v1", "kind": "ConfigMap",
    "metadata": {"name": "{{ resource_claim.metadata.name }}-{{ resource_index }}",
                 "labels": {"team": "{{ resource_claim.metadata.labels.team | default('none') | lower }}"}},
    "data": {
        "greeting": "hello {{ resource_claim.metadata.name | upper }} from {{ resource_provider.metadata.name }}",
        "stop": "{{ timestamp.utcnow.add('8h') }}",
        "list": "{{ resource_claim.spec.entries | map('string') | join(',') }}",
        "size": "{{ '%05d' % (resource_index * 3) }}",
    },
}
CLAIM = {"metadata": {"name": "bench", "labels": {"team": "QA"}}, "spec": {"entries": list(range(20))}}
HOSTILE = {"data": {"spin": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"}}


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--renders", type=int, default=2_000, help="renders per measurement")
    parser.add_argument("--concurrency", type=int, default=50, help="concurrent offloaded renders")


def _variables() -> dict[str, Any]:
    return template_variables(resource_claim=CLAIM, resource_index=1,
                              resource_provider={"metadata": {"name": "configmaps"}})


def _baseline(renders: int) -> float:
    env = ImmutableSandboxedEnvironment(undefined=StrictUndefined)
    compiled = {key: env.from_string(value) for key, value in OVERRIDE["data"].items()}
    name = env.from_string(OVERRIDE["metadata"]["name"])
    team = env.from_string(OVERRIDE["metadata"]["labels"]["team"])
    variables = _variables()

    def once() -> None:
        name.render(variables)
        team.render(variables)
        for template in compiled.values():
            template.render(variables)

    return _cpu_per_call(once, renders)


def _inline(renders: int) -> float:
    variables = _variables()
    render_object(OVERRIDE, variables)  # compile once, as the cache does in the operator
    return _cpu_per_call(lambda: render_object(OVERRIDE, variables), renders)


def _cpu_per_call(call: Callable[[], object], calls: int, rounds: int = 3) -> float:
    """CPU seconds per call, the best of a few rounds (the machine is shared; wall time is noisy)."""
    best = float("inf")
    for _ in range(rounds):
        start = time.process_time()
        for _ in range(calls):
            call()
        best = min(best, (time.process_time() - start) / calls)
    return best


async def _offloaded(renders: int, concurrency: int) -> tuple[float, float, list[float]]:
    switch_fast()  # as `lessor run` does
    variables = _variables()
    start = time.perf_counter()
    for _ in range(renders):
        await offload(render_object, OVERRIDE, variables, key="bench")
    sequential = (time.perf_counter() - start) / renders

    latencies: list[float] = []

    async def one(tenant: int) -> None:  # many tenants, so the fair queue lets them use every thread
        began = time.perf_counter()
        await offload(render_object, OVERRIDE, variables, key=f"bench-{tenant}")
        latencies.append(time.perf_counter() - began)

    start = time.perf_counter()
    for _ in range(max(renders // concurrency, 1)):
        await asyncio.gather(*(one(i) for i in range(concurrency)))
    concurrent = (time.perf_counter() - start) / len(latencies)
    return sequential, concurrent, latencies


async def _hostile() -> tuple[float, str]:
    start = time.perf_counter()
    try:
        await offload(render_object, HOSTILE, _variables(), "/spec/override", key="bench-hostile")
        outcome = "rendered"
    except TemplateError as error:
        outcome = str(error)
    return time.perf_counter() - start, outcome


async def run(args: argparse.Namespace) -> dict[str, Any]:
    baseline = _baseline(args.renders)
    inline = _inline(args.renders)
    sequential, concurrent, latencies = await _offloaded(args.renders, args.concurrency)
    hostile_seconds, hostile_outcome = await _hostile()
    micro = 1e6
    return {
        "renders": args.renders,
        "templated_strings_per_render": 6,
        "baseline_plain_sandbox_cpu_us": round(baseline * micro, 1),
        "budgeted_inline_cpu_us": round(inline * micro, 1),
        "budgeted_overhead_pct": round((inline / baseline - 1) * 100, 1),
        "offloaded_sequential_wall_us": round(sequential * micro, 1),
        "offloaded_concurrent_wall_us_per_render": round(concurrent * micro, 1),
        "offloaded_concurrent_latency_p50_ms": round(statistics.median(latencies) * 1e3, 2),
        "offloaded_concurrent_latency_p99_ms": round(statistics.quantiles(latencies, n=100)[98] * 1e3, 2),
        "concurrency": args.concurrency,
        "hostile_template_seconds": round(hostile_seconds, 2),
        "hostile_template_outcome": hostile_outcome,
        "time_limit_seconds": MAX_SECONDS,
    }
