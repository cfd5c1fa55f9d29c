"""What an operator engineer scrapes: Prometheus conventions, runtime collectors, API requests by code
with latency, time in mailbox, object state, webhook metrics; and a Grafana dashboard whose every
query names a metric lessor really exports."""

from __future__ import annotations

import asyncio
import json
import re
import time
import urllib.request
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from lessor.admission.registration import until_enforced
from lessor.admission.server import WebhookSettings
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway
from lessor.gateway.resources import API_VERSION, CLIENT, EXPORTER, LEASE, NAMESPACE
from lessor.app.operator import Operator, OperatorConfig
from tests.slowness import scaled
from tests.tasks import cancelled

DASHBOARD = Path(__file__).resolve().parents[2] / "deploy" / "monitoring" / "grafana-dashboard.json"


def scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=scaled(5)) as resp:
        return resp.read().decode()


def samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """Sample name -> (labels, value) of every sample of a scrape."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            found.setdefault(s.name, []).append((s.labels, s.value))
    return found


def exported_names(text: str) -> set[str]:
    """Every sample name a scrape can have, including families that have no labelled child yet."""
    names = set()
    suffixes = {"counter": ("_total", "_created"), "histogram": ("_bucket", "_sum", "_count", "_created"),
                "summary": ("_sum", "_count", "_created"), "gauge": ("",), "info": ("_info",)}
    for family in text_string_to_metric_families(text):
        names |= {s.name for s in family.samples}
        names |= {family.name + suffix for suffix in suffixes.get(family.type, ("",))}
    return names


def value(found: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for got, v in found.get(name, ()) if labels.items() <= got.items())


async def test_the_operator_exports_what_an_on_call_engineer_expects(
    operator: Any, kube: Gateway, namespace: str
) -> None:
    api = "lessor.dev/v1alpha1"
    await kube.create(EXPORTER, namespace, {"apiVersion": api, "kind": "Exporter",
                                            "metadata": {"name": "m1", "labels": {"board": "m"}}})
    await kube.patch_status(EXPORTER, namespace, "m1", {"lastSeen": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                                        "exporterStatus": "Available"})
    await kube.create(CLIENT, namespace, {"apiVersion": api, "kind": "Client", "metadata": {"name": "alice"}})
    before = samples(await asyncio.to_thread(scrape, operator.config.metrics_port))
    await kube.create(LEASE, namespace, {"apiVersion": api, "kind": "Lease", "metadata": {"name": "m"},
                                         "spec": {"clientRef": {"name": "alice"}, "duration": "1h",
                                                  "selector": {"matchLabels": {"board": "m"}}}})
    deadline = time.monotonic() + scaled(20)
    while True:
        found = samples(await asyncio.to_thread(scrape, operator.config.metrics_port))
        if value(found, "lessor_lease_grant_seconds_count") > value(before, "lessor_lease_grant_seconds_count"):
            break
        assert time.monotonic() < deadline, "the grant was never observed"
        await asyncio.sleep(0.2)

    # The process and Python runtime, as every Prometheus client exports them by default.
    for name in ("process_resident_memory_bytes", "process_cpu_seconds_total", "process_start_time_seconds",
                 "python_gc_objects_collected_total", "python_info"):
        assert name in found, name
    # API requests by verb, kind and HTTP code; latency by verb and kind.
    assert value(found, "lessor_api_requests_total", code="200", kind="Lease") > 0
    assert all(set(labels) == {"verb", "kind", "code"} for labels, _ in found["lessor_api_requests_total"])
    assert value(found, "lessor_api_request_duration_seconds_count", kind="Lease") > 0
    assert value(found, "lessor_api_requests_total", verb="watch", code="200", kind="Lease") >= 1
    # Time in mailbox, by actor kind (the address prefix).
    assert value(found, "lessor_mailbox_queue_duration_seconds_count", kind="lease") > 0
    assert value(found, "lessor_mailbox_queue_duration_seconds_bucket", kind="lease", le="+Inf") == \
        value(found, "lessor_mailbox_queue_duration_seconds_count", kind="lease")
    # Objects by state, read from the caches.
    assert value(found, "lessor_leases", state="ready", reason="Ready") >= 1
    assert "lessor_resource_claims" in exported_names(await asyncio.to_thread(scrape, operator.config.metrics_port))


def _metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression selects: identifiers that are not functions, keywords,
    label names in matchers or groupings, or Grafana variables."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)  # string literals
    expr = re.sub(r"\{[^}]*\}", "", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "", expr)  # ranges
    expr = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)
    expr = re.sub(r"\$\w+", "", expr)
    names = set()
    for match in re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*", expr):
        rest = expr[match.end():].lstrip()
        if not rest.startswith("(") and match.group() not in {"and", "or", "unless", "bool", "offset"}:
            names.add(match.group())
    return names


def test_metric_names_are_found_in_promql() -> None:
    assert _metric_names('histogram_quantile(0.99, sum by (le, kind) (rate(a_bucket{job=~"$job"}[5m])))') == \
        {"a_bucket"}
    assert _metric_names("max(sum by (instance) (rate(b_total[$__rate_interval]))) / c") == {"b_total", "c"}


async def test_every_dashboard_query_names_a_metric_lessor_exports(operator: Any) -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for panel in dashboard["panels"] for t in panel.get("targets", ())]
    # Grafana's label_values(metric, label): the first argument is a metric
    exprs += [re.sub(r"label_values\((\w+),\s*\w+\)", r"\1", v["query"])
              for v in dashboard["templating"]["list"] if v.get("type") == "query"]
    used = set().union(*map(_metric_names, exprs))
    exported = exported_names(await asyncio.to_thread(scrape, operator.config.metrics_port))
    assert used and not used - exported, f"not exported: {sorted(used - exported)}"
    titles = " ".join(p["title"] for p in dashboard["panels"]).lower()
    for topic in ("leases by state", "grant latency", "claims by state", "pool availability", "mailbox depth",
                  "api requests", "api errors"):
        assert topic in titles, topic


@pytest.fixture
async def scoped(kube: Gateway) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    scope = uuid.uuid4().hex[:10]
    name = f"t-{scope}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name, "labels": {"test.lessor.dev/scope": scope}}})
    yield name, {"matchLabels": {"test.lessor.dev/scope": scope}}
    await kube.delete(NAMESPACE, None, name)


async def test_webhook_requests_latency_and_denials_by_check(
    kube: Gateway, kubeconfig: Path, scoped: tuple[str, dict[str, Any]]
) -> None:
    namespace, selector = scoped
    registry = CollectorRegistry()
    config = OperatorConfig(kubeconfig=str(kubeconfig), bind_address="127.0.0.1", health_port=free_port(),
                            metrics_port=free_port(), leader_election=None,
                            webhook=WebhookSettings(port=0, namespace_selector=selector,
                                                    registration=f"lessor-preflight-{namespace}"))
    operator = asyncio.create_task(Operator(config, kube, registry).run())
    try:
        lease = {"apiVersion": API_VERSION, "kind": "Lease", "metadata": {"name": "no-selector"},
                 "spec": {"clientRef": {"name": "alice"}, "duration": "1h"}}
        await until_enforced(kube, LEASE, namespace, lease, timeout=scaled(20))
        found = samples(generate_latest(registry).decode())
    finally:
        await cancelled(operator)
    assert value(found, "lessor_webhook_requests_total", kind="Lease", result="denied") >= 1
    assert value(found, "lessor_webhook_request_duration_seconds_count", kind="Lease") >= 1
    denials = {labels["check"] for labels, v in found.get("lessor_webhook_denials_total", ()) if v}
    assert any("selector" in check for check in denials), denials
