"""What the preflight webhook costs a user: ResourceClaim create latency through the API server.

Creates go to two namespaces of the same API server in the same run: one
the webhook is registered for (ten checks per claim: the real claim checks,
which look the providers up through the API server, plus cheap ones), and
one it is not, the baseline. The webhook is served in this process on
loopback, as `lessor run` serves it in development, so `--kubeconfig`
must name an API server that can reach 127.0.0.1 here.

The hostile mix (`--hostile`, default 200 reviews, 50 at a time) posts
AdmissionReviews straight to the webhook application with every lessor
check, as the API server would: pools of thousands of resources (named
providers, nulls, `match`), claims whose provider's check or default spins
until the template time limit, objects nested 99 levels deep, a lease with
a 1 MiB selector, and among them plain claims of another namespace. It
reports every answer other than HTTP 200 or whose AdmissionReview says 500,
and the latency percentiles against the deadline.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import time
import uuid
from collections.abc import Mapping
from typing import Any

from aiohttp import ClientSession, ClientTimeout, web

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Deadline, Lookup, Registry, make_app
from lessor.admission.checks import ClaimChecker, preflight_registry
from lessor.admission.lookup import GatewayLookup
from lessor.admission.registration import until_enforced
from lessor.admission.server import WebhookSettings, webhook
from lessor.tools.bench.common import add_cluster_arguments, cluster, machine, percentile, say
from lessor.gateway import Gateway
from lessor.gateway.resources import API_VERSION, CLAIM, LEASE, NAMESPACE, POOL, PROVIDER

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
    parser.add_argument("--hostile", type=int, default=200,
                        help="reviews of the hostile mix, 50 at a time; 0 skips it (default: %(default)s)")
    parser.add_argument("--hostile-only", action="store_true", help="only the hostile mix")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    async with cluster(args) as gateway:
        figures = {} if args.hostile_only else await measure(gateway, requests=args.requests)
        if args.hostile:
            figures["hostile"] = await hostile(gateway, reviews=args.hostile)
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


# --- the hostile mix ---------------------------------------------------------------------------------

HOSTILE_CONCURRENCY = 50
SPIN = "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"
#: A check that runs until the template time limit (about 4 s of work on a quiet core).
SPIN_CHECK = " + ".join(["(range(99999) | map('string') | map('length') | sum)"] * 40) + " > 0"


async def hostile(gateway: Gateway, *, reviews: int, concurrency: int = HOSTILE_CONCURRENCY) -> dict[str, Any]:
    """The webhook application under a mix of hostile reviews: its answers and latencies against the deadline."""
    scope = uuid.uuid4().hex[:8]
    plain, spinning, defaulted = f"bench-{scope}-plain", f"bench-{scope}-spin", f"bench-{scope}-spin-default"
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": OPERATOR_NAMESPACE}}
    providers = {
        plain: {"override": configmap},
        spinning: {"override": configmap, "validation": {"checks": [{"name": "spins", "check": SPIN_CHECK}]}},
        defaulted: {"template": {"enable": True}, "override": configmap, "default": {"data": {"spin": SPIN}}},
    }
    for name, spec in providers.items():
        await gateway.create(PROVIDER, OPERATOR_NAMESPACE, {"apiVersion": API_VERSION, "kind": "ResourceProvider",
                                                            "metadata": {"name": name}, "spec": spec})
    deadline = Deadline()
    mix = _hostile_mix(plain, spinning, defaulted)
    runner = web.AppRunner(make_app(preflight_registry(OPERATOR_NAMESPACE), GatewayLookup(gateway),
                                    deadline=deadline))
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    outcomes: dict[str, list[tuple[float, str]]] = {name: [] for name in mix}
    order = iter(range(reviews))
    try:
        async with ClientSession(timeout=ClientTimeout(total=60)) as session:
            async def worker() -> None:
                for i in order:
                    name, body = list(mix.items())[i % len(mix)]
                    began = time.perf_counter()
                    async with session.post(f"http://127.0.0.1:{port}/validate", data=body,
                                            headers={"Content-Type": "application/json"}) as answer:
                        text = await answer.text()
                    took = time.perf_counter() - began
                    outcomes[name].append((took, _outcome(answer.status, text)))

            say(f"hostile mix: {reviews} reviews, {concurrency} at a time")
            await asyncio.gather(*(worker() for _ in range(concurrency)))
    finally:
        await runner.cleanup()
        for name in providers:
            await gateway.delete(PROVIDER, OPERATOR_NAMESPACE, name)
    everything = [took for found in outcomes.values() for took, _ in found]
    bad = [f"{name}: {outcome}" for name, found in outcomes.items() for _, outcome in found
           if outcome.startswith(("http", "500"))]
    return {
        "reviews": reviews,
        "concurrency": concurrency,
        "deadline_seconds": deadline.webhook_timeout,
        "checks_deadline_seconds": deadline.seconds,
        "not_200_or_500_answers": len(bad),
        "bad_answers": sorted(set(bad))[:10],
        "latency_ms": {"p50": round(percentile(everything, 50) * 1000), "p99": round(percentile(everything, 99) * 1000),
                       "max": round(max(everything) * 1000)},
        "p99_under_deadline": percentile(everything, 99) < deadline.webhook_timeout,
        "by_body": {name: {"p99_ms": round(percentile([t for t, _ in found], 99) * 1000),
                           "outcomes": dict(collections.Counter(o for _, o in found))}
                    for name, found in outcomes.items()},
    }


def _outcome(status: int, text: str) -> str:
    """`allowed`, `allowed+warnings`, `denied 422`, `500 ...` (the AdmissionReview's), or `http N` (the server's)."""
    if status != 200:
        return f"http {status}"
    response = json.loads(text).get("response") or {}
    if response.get("allowed"):
        return "allowed+warnings" if response.get("warnings") else "allowed"
    code = (response.get("status") or {}).get("code")
    return f"500 {response['status'].get('message', '')[:120]}" if code == 500 else f"denied {code}"


def _hostile_mix(plain: str, spinning: str, defaulted: str) -> dict[str, bytes]:
    """Each body of the mix, by what it is (every one a valid AdmissionReview, as the API server would send)."""
    def review(kind: str, namespace: str, spec: dict[str, Any]) -> bytes:
        return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
            "uid": str(uuid.uuid4()), "kind": {"group": CLAIM.group, "version": "v1alpha1", "kind": kind},
            "operation": "CREATE", "name": "x", "namespace": namespace,
            "object": {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": "x", "namespace": namespace},
                       "spec": spec}}}).encode()

    def resources(count: int, provider: Any) -> list[Any]:
        return [{"provider": {"name": provider(i)}, "template": {"data": {"n": str(i)}}} for i in range(count)]

    nested: Any = {"leaf": True}
    for _ in range(97):
        nested = {"n": nested}
    pool, tenant, canary = POOL.kind, "bench-attacker", "bench-canary"
    return {
        "pool-2000-same-provider": review(pool, OPERATOR_NAMESPACE, {"resources": resources(2000, lambda i: plain)}),
        "pool-2000-providers": review(pool, OPERATOR_NAMESPACE, {"resources": resources(2000, lambda i: f"p{i}")}),
        "pool-2000-nulls": review(pool, OPERATOR_NAMESPACE, {"resources": [None] * 2000}),
        "pool-2000-match": review(pool, OPERATOR_NAMESPACE, {"resources": [{"template": {"n": i}} for i in range(2000)]}),
        "claim-spinning-checks": review(CLAIM.kind, tenant, {"resources": resources(1, lambda i: spinning)}),
        "claim-spinning-default": review(CLAIM.kind, tenant, {"resources": resources(1, lambda i: defaulted)}),
        "claim-nested-99": review(CLAIM.kind, tenant, {"resources": [
            {"provider": {"name": plain}, "template": {"data": nested}}]}),
        "lease-1mib-selector": review(LEASE.kind, tenant, {"clientRef": {"name": "c"}, "selector": {
            "matchLabels": {f"k{i}": "v" * 60 for i in range(15_000)}}}),
        "claim-plain-canary": review(CLAIM.kind, canary, {"resources": resources(1, lambda i: plain)}),
    }
