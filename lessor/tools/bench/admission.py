"""What the preflight webhook costs a user: ResourceClaim create latency through the API server.

Creates go to two namespaces of the same API server in the same run: one
the webhook is registered for (ten checks per claim: the real claim checks,
which look the providers up through the API server, plus cheap ones), and
one it is not, the baseline. The webhook is served in this process on
loopback, as `lessor run` serves it in development, so `--kubeconfig`
must name an API server that can reach 127.0.0.1 here.
"""

from __future__ import annotations

import argparse
import asyncio
import time
import uuid
from collections.abc import Mapping
from typing import Any

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Lookup, Registry
from lessor.admission.checks import ClaimChecker
from lessor.admission.lookup import GatewayLookup
from lessor.admission.registration import until_enforced
from lessor.admission.server import WebhookSettings, webhook
from lessor.tools.bench.common import add_cluster_arguments, cluster, machine, percentile, say
from lessor.gateway import Gateway
from lessor.gateway.resources import API_VERSION, CLAIM, NAMESPACE, PROVIDER

CONCURRENCY = (1, 50)
OPERATOR_NAMESPACE = "lessor-system"  # where bench.common's cluster() installs lessor
SCOPE_LABEL = "bench.lessor.dev/admission"
CHECKS = 10


class CheapChecker:
    """Checks that need nothing fetched, to bring a claim's checks to ten."""

    name = "cheap"
    check_names = tuple(f"cheap-{i}" for i in range(CHECKS - 4))  # the claim checker runs four on a create

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        names = [r.get("name") for r in request["object"].get("spec", {}).get("resources") or ()]

        async def distinct() -> CheckResult:
            if len(names) == len(set(names)):
                return CheckResult.ok()
            return CheckResult.deny(Cause("resource names repeat", "spec.resources"))

        return dict.fromkeys(self.check_names, distinct)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_cluster_arguments(parser)
    parser.add_argument("--requests", type=int, default=300,
                        help="creates per measurement, per concurrency, with and without the webhook "
                        "(default: %(default)s)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with cluster(args) as gateway:
        figures = await measure(gateway, requests=args.requests)
    return {"benchmark": "admission", "machine": machine(), **figures}


async def measure(gateway: Gateway, *, requests: int) -> dict[str, Any]:
    scope = uuid.uuid4().hex[:8]
    provider = f"bench-{scope}"
    checked, baseline = f"bench-{scope}-checked", f"bench-{scope}-baseline"
    await gateway.create(PROVIDER, OPERATOR_NAMESPACE, _provider(provider))
    for namespace, labels in ((checked, {SCOPE_LABEL: scope}), (baseline, {})):
        await gateway.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace",
                                               "metadata": {"name": namespace, "labels": labels}})
    registry = Registry()
    registry.register(CLAIM.group, CLAIM.kind, ClaimChecker(OPERATOR_NAMESPACE))
    registry.register(CLAIM.group, CLAIM.kind, CheapChecker())
    settings = WebhookSettings(port=0, registration=f"lessor-preflight-bench-{scope}",
                               namespace_selector={"matchLabels": {SCOPE_LABEL: scope}})
    results: dict[str, dict[str, Any]] = {"webhook": {}, "baseline": {}}
    try:
        async with webhook(gateway, registry, GatewayLookup(gateway), settings, "127.0.0.1"):
            await until_enforced(gateway, CLAIM, checked, _claim("probe", "no-such-provider"))
            for concurrency in CONCURRENCY:
                for label, namespace in (("baseline", baseline), ("webhook", checked)):
                    say(f"{requests} ResourceClaim creates, {concurrency} at a time, {label}")
                    await _creates(gateway, namespace, provider, f"warm{concurrency}", concurrency, concurrency)
                    results[label][str(concurrency)] = await _creates(
                        gateway, namespace, provider, f"c{concurrency}", requests, concurrency)
    finally:
        for namespace in (checked, baseline):
            await gateway.delete(NAMESPACE, None, namespace)
        await gateway.delete(PROVIDER, OPERATOR_NAMESPACE, provider)
    return {
        "checks_per_claim": CHECKS,
        "create_latency_ms": results,
        "notes": "webhook: the namespace the preflight webhook is registered for; baseline: the same creates "
        "in a namespace it is not. The webhook runs in the benchmark's process on loopback.",
    }


async def _creates(
    gateway: Gateway, namespace: str, provider: str, prefix: str, count: int, concurrency: int
) -> dict[str, Any]:
    latencies: list[float] = []
    names = iter(range(count))

    async def worker() -> None:
        for i in names:
            started = time.perf_counter()
            await gateway.create(CLAIM, namespace, _claim(f"{prefix}-{i}", provider))
            latencies.append((time.perf_counter() - started) * 1000)

    started = time.perf_counter()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    elapsed = time.perf_counter() - started
    return {"p50": round(percentile(latencies, 50), 2), "p99": round(percentile(latencies, 99), 2),
            "creates_per_second": round(count / elapsed, 1), "samples": len(latencies)}


def _claim(name: str, provider: str) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": {"name": name}, "spec": {
        "resources": [{"name": "environment", "provider": {"name": provider},
                       "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"}}}],
        "lifespan": {"end": "2099-01-01T00:00:00Z"},
    }}


def _provider(name: str) -> dict[str, Any]:
    """The sample environment provider: a schema, a check, a default and a lifespan to judge claims by."""
    return {"apiVersion": API_VERSION, "kind": "ResourceProvider", "metadata": {"name": name}, "spec": {
        "default": {"data": {"size": "small"}},
        "validation": {
            "openAPIV3Schema": {"type": "object", "required": ["apiVersion", "kind", "data"], "properties": {
                "apiVersion": {"type": "string", "enum": ["v1"]},
                "kind": {"type": "string", "enum": ["ConfigMap"]},
                "data": {"type": "object", "additionalProperties": False, "required": ["size"], "properties": {
                    "size": {"type": "string", "enum": ["small", "medium", "large"]},
                    "reason": {"type": "string"}}},
            }},
            "checks": [{"name": "a large environment needs a reason",
                        "check": "data.size != 'large' or (data.reason | default('') | length) > 0"}],
        },
        "lifespan": {"maximum": "7d", "relativeMaximum": "3d"},
    }}
