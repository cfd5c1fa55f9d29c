"""What `lessor bench failover` sets up around the replicas: a ServiceAccount and kubeconfig per replica
bound to deploy/rbac.yaml's roles, the lab (exporters in groups, gold/silver/spot clients), the lease
storm with churn, the exporters' heartbeats, the watch history the invariants are read from, and the
CPU hogs that make writes slow (the races of issue 27 need a busy node)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import random
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

import orjson
import yaml

from lessor.shipped import manifests
from lessor.tools.bench.common import available_exporters, say
from lessor.tools.bench.failover_check import GROUP_LABEL, PRIORITY_LABEL, SPOT_LABEL, Observed, slim_exporter, slim_lease
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, POLICY, Resource

API = "lessor.dev/v1alpha1"
NS = "failover"
OPS = "lessor-system"
TIERS = (("gold", 30, False), ("silver", 20, False), ("spot", 10, True))


# --- a ServiceAccount per replica ------------------------------------------------------------------


@dataclass(frozen=True)
class Account:
    name: str
    kubeconfig: Path

    @property
    def username(self) -> str:
        return f"system:serviceaccount:{OPS}:{self.name}"


def account_names(count: int) -> list[str]:
    """Known before the API server starts: its audit policy names the users it records."""
    return [f"lessor-r{i + 1}" for i in range(count)]


async def replica_accounts(admin: Gateway, server: str, ca: Path, folder: Path, count: int,
                           seconds: int) -> list[Account]:
    """ServiceAccounts bound to every role deploy/rbac.yaml binds to the operator's own (the bindings
    applied with these accounts as their subjects), each with a token from the TokenRequest API valid for
    `seconds`, in a kubeconfig of its own: each replica is its own user in the audit log."""
    names = account_names(count)
    docs = list(manifests.load_documents([resources.files("lessor.deploy").joinpath("rbac.yaml").read_text()]))
    for doc in docs:
        if doc["kind"] in ("RoleBinding", "ClusterRoleBinding"):
            doc["subjects"] = [{"kind": "ServiceAccount", "name": n, "namespace": OPS} for n in names]
    accounts = [{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": n, "namespace": OPS}}
                for n in names]
    await manifests.apply_all(admin, accounts + docs)
    folder.mkdir(parents=True, exist_ok=True)  # noqa: ASYNC240 (once, at set-up)
    found = []
    for name in names:
        answer = await admin.request(
            "create", "TokenRequest", "POST", f"/api/v1/namespaces/{OPS}/serviceaccounts/{name}/token",
            body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                  "spec": {"expirationSeconds": max(600, seconds)}})
        path = folder / f"{name}.kubeconfig"
        path.write_text(yaml.safe_dump({
            "apiVersion": "v1", "kind": "Config", "current-context": name,
            "clusters": [{"name": "lessor", "cluster": {"server": server, "certificate-authority": str(ca)}}],
            "users": [{"name": name, "user": {"token": answer["status"]["token"]}}],
            "contexts": [{"name": name, "context": {"cluster": "lessor", "user": name}}]}))
        path.chmod(0o600)
        found.append(Account(name, path))
    return found


# --- the lab and its workload ----------------------------------------------------------------------


@dataclass(frozen=True)
class Sizes:
    exporters: int = 300
    groups: int = 30
    clients: int = 12
    leases: int = 600
    rate: float = 10.0
    churn: float = 2.0
    warmup: float = 30.0
    heartbeat: float = 15.0


def _stamp() -> str:
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _exporter_name(i: int) -> str:
    return f"e{i:04d}"


async def lab(kube: Gateway, sizes: Sizes) -> None:
    """Exporters in `groups` groups (available, beating), clients of the three tiers in turn, and one
    policy: gold priority 30, silver 20, spot 10 with spotAccess."""
    await available_exporters(kube, NS, {_exporter_name(i): {"board": "rpi", GROUP_LABEL: f"g{i % sizes.groups:02d}"}
                                         for i in range(sizes.exporters)})
    for i in range(sizes.clients):
        tier = TIERS[i % len(TIERS)][0]
        await kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client",
                                       "metadata": {"name": f"c{i:02d}", "labels": {"tier": tier}}})
    await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "lab"},
                                   "spec": {"exporterSelector": {"matchLabels": {"board": "rpi"}}, "policies": [
                                       {"description": tier, "priority": priority, "spotAccess": spot,
                                        "from": [{"clientSelector": {"matchLabels": {"tier": tier}}}]}
                                       for tier, priority, spot in TIERS]}})


def lease_body(n: int, sizes: Sizes, rng: random.Random) -> dict[str, Any]:
    """A lease of a random client for a random group, held until deleted; its group, priority and spot
    are labels too, so the invariants know them before the operator writes its status."""
    client = rng.randrange(sizes.clients)
    _, priority, spot = TIERS[client % len(TIERS)]
    group = f"g{rng.randrange(sizes.groups):02d}"
    return {"apiVersion": API, "kind": "Lease", "metadata": {
        "name": f"l{n:05d}", "labels": {GROUP_LABEL: group, PRIORITY_LABEL: str(priority),
                                        SPOT_LABEL: "true" if spot else "false"}},
        "spec": {"clientRef": {"name": f"c{client:02d}"}, "selector": {"matchLabels": {GROUP_LABEL: group}}}}


async def storm(kube: Gateway, sizes: Sizes, rng: random.Random, stop: asyncio.Event) -> int:
    """`sizes.leases` leases at `sizes.rate` per second, on a schedule (a slow create does not slow the
    rate: up to 16 in flight). Returns how many were created."""
    gate = asyncio.Semaphore(16)
    created = 0
    began = time.monotonic()

    async def one(body: dict[str, Any]) -> None:
        nonlocal created
        async with gate:
            with contextlib.suppress(ApiError):
                await kube.create(LEASE, NS, body)
                created += 1

    tasks = []
    for n in range(sizes.leases):
        if stop.is_set():
            break
        tasks.append(asyncio.create_task(one(lease_body(n, sizes, rng))))
        await asyncio.sleep(max(0.0, began + (n + 1) / sizes.rate - time.monotonic()))
    await asyncio.gather(*tasks)
    return created


async def churn(kube: Gateway, history: History, sizes: Sizes, rng: random.Random, stop: asyncio.Event) -> int:
    """After the warm-up, delete a Ready lease `sizes.churn` times a second until `stop`; returns the
    deletes. Bounded: at most as many as there are leases."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), sizes.warmup)
    deleted = 0
    began = time.monotonic()
    while not stop.is_set() and deleted < sizes.leases:
        ready = sorted(n for n, x in history.leases.items() if x["ready"] and not x["ended"])
        if ready:
            with contextlib.suppress(ApiError):
                await kube.delete(LEASE, NS, rng.choice(ready))
                deleted += 1
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), max(0.05, began + (deleted + 1) / sizes.churn - time.monotonic()))
    return deleted


async def heartbeats(kube: Gateway, sizes: Sizes, stop: asyncio.Event) -> None:
    """Each exporter's agent writes status.lastSeen every `sizes.heartbeat` seconds, spread evenly, until
    `stop`: on a schedule, up to 16 in flight, as the agents are many processes. One write after another, a
    slow API server made every later beat late by the sum of the waits, lastSeen aged past the operator's
    heartbeat timeout, and the operator rightly wrote those exporters Offline, then Online again: two or three
    status writes per exporter at start-up that were the driver's doing."""
    every = sizes.heartbeat / max(1, sizes.exporters)
    gate = asyncio.Semaphore(16)
    beating: set[asyncio.Task[None]] = set()

    async def beat(name: str) -> None:
        async with gate:
            with contextlib.suppress(ApiError):
                await kube.patch_status(EXPORTER, NS, name, {"lastSeen": _stamp(), "exporterStatus": "Available"})

    n = 0
    began = time.monotonic()
    try:
        while not stop.is_set():
            task = asyncio.create_task(beat(_exporter_name(n % sizes.exporters)))
            beating.add(task)
            task.add_done_callback(beating.discard)
            n += 1
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), max(0.0, began + n * every - time.monotonic()))
    finally:
        for task in beating:
            task.cancel()
        await asyncio.gather(*beating, return_exceptions=True)


# --- the watch history ---------------------------------------------------------------------------


@dataclass
class History:
    """Every watch event of the lab's Exporters and Leases, slimmed, with the current state of each."""

    kube: Gateway
    events: list[Observed] = field(default_factory=list)
    exporters: dict[str, dict[str, Any]] = field(default_factory=dict)
    leases: dict[str, dict[str, Any]] = field(default_factory=dict)
    relists: int = 0

    async def run(self, stop: asyncio.Event) -> None:
        await asyncio.gather(self._follow(EXPORTER, self.exporters, slim_exporter, stop),
                             self._follow(LEASE, self.leases, slim_lease, stop))

    def _record(self, rv: int, kind: str, type_: str, obj: dict[str, Any], state: dict[str, dict[str, Any]]) -> None:
        self.events.append(Observed(rv, time.monotonic(), kind, type_, obj))
        if type_ == "DELETED":
            state.pop(obj["name"], None)
        else:
            state[obj["name"]] = obj

    async def _list(self, res: Resource, state: dict[str, dict[str, Any]], slim: Any) -> str:
        """(Re)list: what changed since the state we hold becomes events at the list's resourceVersion."""
        items, version = await self.kube.list(res, NS)
        seen = {}
        for item in items:
            obj = slim(item)
            seen[obj["name"]] = obj
            if state.get(obj["name"]) != obj:
                self._record(int(item["metadata"]["resourceVersion"]), res.kind,
                             "MODIFIED" if obj["name"] in state else "ADDED", obj, state)
        for name in list(state.keys() - seen.keys()):
            self._record(int(version), res.kind, "DELETED", state[name], state)
        return version

    async def _follow(self, res: Resource, state: dict[str, dict[str, Any]], slim: Any, stop: asyncio.Event) -> None:
        """List, then watch from there until `stop` (each watch ends within 60 s by itself; 410 relists)."""
        version = await self._list(res, state, slim)
        while not stop.is_set():
            try:
                resp = await self.kube.stream(res.kind, res.path(NS), {
                    "watch": "true", "resourceVersion": version, "allowWatchBookmarks": "true",
                    "timeoutSeconds": 60})
            except (ApiError, OSError) as err:
                say(f"watch of {res.kind}: {err}; relisting")
                self.relists += 1
                await asyncio.sleep(0.5)
                version = await self._list(res, state, slim)
                continue
            try:
                while line := await resp.content.readline():
                    event = orjson.loads(line)
                    obj = event["object"]
                    if event["type"] == "ERROR":
                        self.relists += 1
                        version = await self._list(res, state, slim)
                        break
                    version = obj["metadata"]["resourceVersion"]
                    if event["type"] != "BOOKMARK":
                        self._record(int(version), res.kind, event["type"], slim(obj), state)
                    if stop.is_set():
                        break
            finally:
                resp.close()


# --- CPU hogs --------------------------------------------------------------------------------------

_HOG = "import sys, time\nend = time.monotonic() + float(sys.argv[1])\nwhile time.monotonic() < end:\n    pass\n"


@dataclass
class Hogs:
    """Busy loops beside the replicas, each ending by itself after `seconds` (and with the bench: it
    stops them, and they get SIGKILL if the bench dies first)."""

    count: int
    seconds: float
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def __enter__(self) -> Hogs:
        death = [shutil.which("setpriv") or "", "--pdeathsig", "KILL", "--"] if shutil.which("setpriv") else []
        for _ in range(self.count):
            self.procs.append(subprocess.Popen([*death, sys.executable, "-c", _HOG, str(self.seconds)],
                                               stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL))
        if self.count:
            say(f"{self.count} CPU hogs for at most {self.seconds:.0f}s")
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
            proc.wait()
        self.procs.clear()
