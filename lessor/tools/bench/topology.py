"""Benchmark of the topology: selector queries at 100k exporters, policy lookups, routing, build time, memory.

The lab is synthetic but shaped like a real one: exporters carry a board, a
site, a rack, an arch, a tier and a unique serial, some a gpu; policies and
queries select with matchLabels of 1-3 keys, some with matchExpressions.
"""

from __future__ import annotations

import argparse
import gc
import random
import time
import tracemalloc
from collections.abc import Callable, Iterator, Sized
from typing import Any

from lessor.tools.bench.common import machine, percentile
from lessor.model.selectors import Selector, parse_selector
from lessor.topology import ADDED, MODIFIED, Change, Topology
from lessor.model.labels import HANDLE_NAME

API = "lessor.dev/v1alpha1"
OPERATOR_NAMESPACE = "lessor-system"
JSON = dict[str, Any]
VALUES = {
    "board": [f"board-{i}" for i in range(50)],
    "site": [f"site-{i}" for i in range(10)],
    "rack": [f"rack-{i}" for i in range(500)],
    "arch": ["arm64", "amd64", "riscv64"],
    "tier": ["prod", "staging", "dev"],
}
TEAMS = [f"team-{i}" for i in range(20)]
NARROW = 1_000


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--exporters", type=int, default=100_000, help="exporters for the query figures")
    parser.add_argument("--policies", type=int, default=1_000, help="access policies for the query figures")
    parser.add_argument("--leases", type=int, default=10_000, help="live leases for the routing figure")
    parser.add_argument("--namespaces", type=int, default=1, help="labs the exporters are spread over")
    parser.add_argument("--queries", type=int, default=2_000, help="samples per timed query")
    parser.add_argument("--build-objects", type=int, default=50_000, help="objects of mixed kinds for the build figure")
    parser.add_argument("--scans", type=int, default=50, help="queries answered by a scan, for comparison")
    parser.add_argument("--seed", type=int, default=1)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    namespaces = [f"lab-{i}" for i in range(args.namespaces)]
    lab = list(_lab(rng, namespaces, args.exporters, args.policies, args.leases))
    topology, lab_bytes = _measured_build(lab)
    exporters = [obj for obj in lab if obj["kind"] == "Exporter"]
    queries = [(rng.choice(namespaces), parse_selector(_selector(rng))) for _ in range(args.queries)]
    probes = [rng.choice(exporters) for _ in range(args.queries)]

    select = _timed(queries, lambda q: topology.exporters(*q))
    narrow = [q for q in queries if len(topology.exporters(*q)) <= NARROW]
    select_narrow = _timed(narrow, lambda q: topology.exporters(*q))
    scan = _timed(queries[: args.scans], lambda q: _scan(exporters, *q))
    policies = _timed(probes, lambda e: topology.policies_for_exporter(_ns(e), e["metadata"]["labels"]))
    heartbeat = _timed(probes, lambda e: topology.route(_heartbeat(topology, e)))

    mixed = list(_mixed(rng, args.build_objects))
    gc.collect()
    started = time.perf_counter()
    _build(mixed)
    build_seconds = time.perf_counter() - started
    _, mixed_bytes = _measured_build(mixed)
    return {
        "machine": machine(),
        "lab": {
            "exporters": args.exporters,
            "policies": args.policies,
            "live_leases": args.leases,
            "namespaces": args.namespaces,
        },
        "select_exporters_us": select,
        f"select_exporters_at_most_{NARROW}_matches_us": select_narrow | {"queries": len(narrow)},
        "select_exporters_by_scan_us": scan | {"queries": len(queries[: args.scans])},
        "policies_for_exporter_us": policies,
        "route_exporter_heartbeat_us": heartbeat,
        "build": {
            "objects": len(mixed),
            "seconds": round(build_seconds, 3),
            "objects_per_second": round(len(mixed) / build_seconds),
        },
        "memory": {
            "lab_topology_bytes": lab_bytes,
            "lab_topology_bytes_per_object": round(lab_bytes / len(lab)),
            "build_topology_bytes": mixed_bytes,
        },
    }


def _timed(samples: list[Any], call: Callable[[Any], Sized]) -> dict[str, float]:
    """Percentiles of `call` over `samples`, in microseconds, and the mean size of its answers."""
    gc.collect()
    durations, sizes = [], 0
    for sample in samples:
        started = time.perf_counter_ns()
        answer = call(sample)
        durations.append((time.perf_counter_ns() - started) / 1000)
        sizes += len(answer)
    return {
        "p50": round(percentile(durations, 50), 1),
        "p99": round(percentile(durations, 99), 1),
        "mean_answer_size": round(sizes / len(samples), 1),
    }


def _build(objects: list[JSON]) -> Topology:
    topology = Topology(OPERATOR_NAMESPACE)
    for obj in objects:
        topology.apply(ADDED, obj)
    return topology


def _measured_build(objects: list[JSON]) -> tuple[Topology, int]:
    """Build under tracemalloc: the bytes the topology adds to the objects it is given."""
    gc.collect()
    tracemalloc.start()
    topology = _build(objects)
    gc.collect()
    size = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    return topology, size


def _heartbeat(topology: Topology, exporter: JSON) -> Change:
    beat = exporter | {"status": {"lastSeen": time.time()}}
    change = topology.apply(MODIFIED, beat)
    assert change is not None
    return change


def _scan(exporters: list[JSON], namespace: str, selector: Selector) -> set[str]:
    """What the index saves: testing every exporter."""
    return {
        obj["metadata"]["name"]
        for obj in exporters
        if obj["metadata"]["namespace"] == namespace and selector.matches(obj["metadata"]["labels"])
    }


def _ns(obj: JSON) -> str:
    namespace: str = obj["metadata"]["namespace"]
    return namespace


def _obj(kind: str, name: str, ns: str, labels: dict[str, str] | None = None, **parts: Any) -> JSON:
    return {
        "apiVersion": API,
        "kind": kind,
        "metadata": {"name": name, "namespace": ns, "labels": labels or {}},
    } | parts


def _exporter_labels(rng: random.Random, serial: int) -> dict[str, str]:
    labels = {key: rng.choice(values) for key, values in VALUES.items()}
    labels["serial"] = f"s{serial}"
    if rng.random() < 0.1:
        labels["gpu"] = "true"
    return labels


def _selector(rng: random.Random) -> JSON:
    """matchLabels of 1-3 keys; a third also carry an expression."""
    keys = rng.sample(sorted(VALUES), rng.randint(1, 3))
    selector: JSON = {"matchLabels": {key: rng.choice(VALUES[key]) for key in keys}}
    if rng.random() < 0.33:
        selector["matchExpressions"] = [
            rng.choice(
                [
                    {"key": "tier", "operator": "NotIn", "values": ["dev"]},
                    {"key": "gpu", "operator": "Exists"},
                    {"key": "gpu", "operator": "DoesNotExist"},
                    {"key": "site", "operator": "In", "values": rng.sample(VALUES["site"], 2)},
                ]
            )
        ]
    return selector


def _policy(rng: random.Random, name: str, ns: str) -> JSON:
    rules = [
        {"priority": rng.randint(0, 100), "from": [{"clientSelector": {"matchLabels": {"team": rng.choice(TEAMS)}}}]}
        for _ in range(rng.randint(1, 3))
    ]
    return _obj("ExporterAccessPolicy", name, ns, spec={"exporterSelector": _selector(rng), "policies": rules})


def _lease(rng: random.Random, name: str, ns: str, ended: bool) -> JSON:
    spec = {"clientRef": {"name": f"client-{rng.randrange(500)}"}, "selector": _selector(rng)}
    return _obj("Lease", name, ns, spec=spec, status={"ended": ended})


def _lab(rng: random.Random, namespaces: list[str], exporters: int, policies: int, leases: int) -> Iterator[JSON]:
    for i in range(exporters):
        yield _obj("Exporter", f"exporter-{i}", namespaces[i % len(namespaces)], _exporter_labels(rng, i))
    for i in range(policies):
        yield _policy(rng, f"policy-{i}", namespaces[i % len(namespaces)])
    for i in range(leases):
        yield _lease(rng, f"lease-{i}", namespaces[i % len(namespaces)], ended=False)


def _mixed(rng: random.Random, total: int) -> Iterator[JSON]:
    """A cluster's worth of every kind: mostly exporters and leases (half of them ended)."""
    share = {
        "Exporter": 0.5,
        "Lease": 0.3,
        "Client": 0.02,
        "ExporterAccessPolicy": 0.01,
        "ResourceHandle": 0.07,
        "ResourceClaim": 0.05,
        "ConfigMap": 0.05,
    }
    counts = {kind: int(total * part) for kind, part in share.items()}
    counts["Exporter"] += total - sum(counts.values())
    namespaces = [f"lab-{i}" for i in range(10)]
    for i in range(counts["Exporter"]):
        yield _obj("Exporter", f"exporter-{i}", namespaces[i % 10], _exporter_labels(rng, i))
    for i in range(counts["Client"]):
        yield _obj("Client", f"client-{i}", namespaces[i % 10], {"team": rng.choice(TEAMS)})
    for i in range(counts["ExporterAccessPolicy"]):
        yield _policy(rng, f"policy-{i}", namespaces[i % 10])
    for i in range(counts["Lease"]):
        yield _lease(rng, f"lease-{i}", namespaces[i % 10], ended=i % 2 == 0)
    yield _obj("ResourceProvider", "base", OPERATOR_NAMESPACE)
    yield _obj("ResourcePool", "pool", OPERATOR_NAMESPACE, spec={"resources": [{"provider": {"name": "base"}}]})
    for i in range(counts["ResourceHandle"]):
        spec: JSON = {"resourcePool": {"name": "pool"}, "resources": [{"provider": {"name": "base"}}]}
        if i < counts["ResourceClaim"]:
            spec["resourceClaim"] = {"name": f"claim-{i}", "namespace": f"user-{i % 100}"}
        yield _obj("ResourceHandle", f"guid-{i:05x}", OPERATOR_NAMESPACE, spec=spec)
    for i in range(counts["ResourceClaim"]):
        status = {"resourceHandle": {"name": f"guid-{i:05x}"}}
        yield _obj("ResourceClaim", f"claim-{i}", f"user-{i % 100}", status=status)
    for i in range(counts["ConfigMap"]):
        labels = {HANDLE_NAME: f"guid-{i % max(counts['ResourceHandle'], 1):05x}"}
        yield {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": f"cm-{i}", "namespace": "env", "labels": labels},
        }
