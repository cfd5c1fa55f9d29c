"""Hostile objects of all nine kinds through the real API server, with and without the webhook.

`lessor run` runs as a process of its own (a user's object that blocks its
event loop then shows as a probe that stops answering, not as a fuzzer
that hangs). Every body from `fuzz_bodies` is created, and its fate
counted by the layer that refused it: the CRD's schema (the API server's
422/400/413), the webhook (a denial), or the operator (accepted, then given
a condition that says it is invalid). Meanwhile the operator must stay
ready; afterwards its log must hold no traceback, its actors no crash
restart, every accepted object of a kind that reports its validity a
verdict (naming the field when invalid), and no object lessor did not create
be changed.

Shared by tests/app/test_fuzz.py (a bounded run per CI job) and
`lessor bench fuzz --count N` (a longer one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import copy
import datetime as dt
import random
import re
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from lessor.admission.registration import NAME as WEBHOOK_REGISTRATION
from lessor.admission.registration import until_enforced
from lessor.tools.bench.common import machine, say, wait_http
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import (
    CLAIM,
    CLIENT,
    CONFIGMAP,
    EXPORTER,
    HANDLE,
    LEASE,
    NAMESPACE,
    POLICY,
    POOL,
    PROVIDER,
    SCALING,
    VALIDATING_WEBHOOK,
)
from lessor.model.labels import HANDLE_NAME

RESOURCES: dict[str, Resource] = {r.kind: r for r in (EXPORTER, CLIENT, POLICY, PROVIDER, POOL, SCALING, LEASE, HANDLE,
                                                      CLAIM)}
IN_OPERATOR_NAMESPACE = frozenset({"ResourceProvider", "ResourcePool", "ResourcePoolScaling", "ResourceHandle"})
"""Where the operator looks for them; the other kinds go to the lab namespace."""
BOTH_LABS = frozenset({"Exporter", "Client"})
"""Created in the lab and in a second lab without policies, where three leases in four go, to be granted."""

SEED_VARIABLE = "LESSOR_FUZZ_SEED"


@dataclass(frozen=True)
class Verdict:
    """How an object of a kind says what the operator made of it."""

    types: tuple[str, ...]
    """The condition types of which one must appear."""
    invalid: Callable[[Mapping[str, Any]], bool]
    """Whether a condition says the object is invalid (its message must then name a field)."""


def _false(kind: str) -> Callable[[Mapping[str, Any]], bool]:
    return lambda c: c.get("type") == kind and c.get("status") == "False"


VALID = Verdict(("Valid",), _false("Valid"))

VERDICTS: dict[str, Verdict] = {
    "Lease": Verdict(("Invalid", "Unsatisfiable", "Pending", "Ready"),
                     lambda c: c.get("type") == "Invalid" and c.get("status") == "True"),
    "ResourceClaim": VALID,
    "ResourcePool": VALID,
    "ResourceHandle": Verdict(("Rendered",), _false("Rendered")),
    "ExporterAccessPolicy": VALID,
    "Client": VALID,
    "ResourceProvider": VALID,
    # Exporter: its Online condition follows its agent's heartbeat, not its spec. ResourcePoolScaling: no
    # conditions (its status.state says what its pool did, and one naming no pool waits for it, unwritten).
}
"""Kind → the conditions that tell its user whether the operator accepted it."""

_FIELD = re.compile(r"\b(spec|metadata)(\.[A-Za-z_]|\[)")
_OUR_NAME = re.compile(r"\b(?:(?:e|c|ap|p|pool|rps|l|h|rc)-[a-z0-9]+|victim)\b")
_INDEX = re.compile(r"\[\d+\]")
_BYSTANDER_NAMESPACES = ("default", "kube-system", "kube-public")


@dataclass
class Report:
    seed: int
    webhook: bool
    tried: int = 0
    accepted: int = 0
    refused: Counter[str] = field(default_factory=Counter)
    """By layer: crd, webhook, operator."""
    refused_fields: Counter[str] = field(default_factory=Counter)
    """The fields named by the CRD's and the webhook's refusals: what the bodies exercised."""
    errors: list[str] = field(default_factory=list)
    """Creates answered with a server error (a webhook that failed or timed out, a 5xx)."""
    tracebacks: list[str] = field(default_factory=list)
    restarts: dict[str, float] = field(default_factory=dict)
    """Actor restarts after a crash, by actor kind."""
    unready: list[str] = field(default_factory=list)
    silent: list[str] = field(default_factory=list)
    """Accepted objects that never got a verdict, or an invalid one that names no field."""
    touched: list[str] = field(default_factory=list)
    """Objects lessor did not create that were changed or deleted."""
    suspects: dict[str, Any] = field(default_factory=dict)
    """The bodies of the objects named in tracebacks, errors and restarts: what to replay."""
    seconds: float = 0.0

    def problems(self) -> list[str]:
        return [*(f"server error: {e}" for e in self.errors), *(f"traceback: {t}" for t in self.tracebacks),
                *(f"{count:g} crash restarts of {kind} actors" for kind, count in self.restarts.items()),
                *self.unready, *self.silent, *self.touched]

    def summary(self) -> dict[str, Any]:
        return {"seed": self.seed, "webhook": self.webhook, "bodies_tried": self.tried, "accepted": self.accepted,
                "refused_by_layer": {layer: self.refused[layer] for layer in ("crd", "webhook", "operator")},
                "server_errors": len(self.errors), "tracebacks": len(self.tracebacks),
                "crash_restarts": sum(self.restarts.values()), "unready": len(self.unready),
                "silent": len(self.silent), "touched": len(self.touched), "seconds": round(self.seconds, 1),
                "most_refused_fields": dict(self.refused_fields.most_common(15)),
                "problems": [p[:2000] for p in self.problems()], "suspects": self.suspects}


HYPOTHESIS_MISSING = ("lessor bench fuzz draws its bodies with Hypothesis, which is not installed: "
                      "pip install 'lessor[bench]' (the test extra has it too; make install installs it)")


def require_hypothesis() -> None:
    """Hypothesis is an extra (`bench`, or `test`), not a dependency of the operator: without it, say so at once,
    before a control plane is started. Only `fuzz_bodies` imports it, and only when a fuzz run begins."""
    try:
        import hypothesis  # noqa: F401
    except ModuleNotFoundError:
        raise RuntimeError(HYPOTHESIS_MISSING) from None


def fresh_seed() -> int:
    """The seed in $LESSOR_FUZZ_SEED (to replay a run), else a new one."""
    import os

    return int(os.environ[SEED_VARIABLE]) if os.environ.get(SEED_VARIABLE) else random.SystemRandom().randrange(2**32)


async def fuzz(gateway: Gateway, kubeconfig: Path, *, count: int, seed: int, webhook: bool,
               settle: float = 30.0, linger: float = 5.0, concurrency: int = 8, known: bool = True,
               log_dir: Path | None = None) -> Report:
    """Create ``count`` bodies of each kind under a `lessor run` of its own, and judge what happened."""
    require_hypothesis()
    from lessor.tools.bench.fuzz_bodies import KINDS, LAST, VICTIM, bodies

    started = time.monotonic()
    report = Report(seed=seed, webhook=webhook)
    drawn = bodies(count, seed, known=known)
    last = [body["metadata"]["name"] for bodies_of_kind in LAST.values() for body in bodies_of_kind]
    scope = uuid.uuid4().hex[:8]
    lab, open_lab, ops = f"fuzz-{scope}", f"fuzz-{scope}-open", f"fuzz-{scope}-ops"
    namespaces = (lab, open_lab, ops)
    for namespace in namespaces:
        await gateway.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": namespace}})
    for namespace in namespaces:
        await gateway.create(CONFIGMAP, namespace, {"apiVersion": "v1", "kind": "ConfigMap",
                                                    "metadata": {"name": VICTIM}, "data": {"x": "mine"}})
    bystanders = await _bystanders(gateway, (*namespaces, *_BYSTANDER_NAMESPACES))
    with contextlib.ExitStack() as stack:
        folder = log_dir or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="lessor-fuzz-")))
        log = folder / f"operator-{scope}.log"
        health, metrics = free_port(), free_port()
        proc = _start(kubeconfig, ops, health, metrics, log, webhook)
        try:
            await wait_http(f"http://127.0.0.1:{health}/readyz", proc, timeout=60)
            if webhook:
                await until_enforced(gateway, LEASE, lab, {"apiVersion": "lessor.dev/v1alpha1", "kind": "Lease",
                                                           "metadata": {"name": "probe"}, "spec": {"clientRef": {"name": "probe"}}})
            accepted = await _send(gateway, drawn, KINDS, namespaces, report, health, metrics, concurrency)
            if not report.unready:
                await asyncio.sleep(linger)  # what the operator does with them, granting leases, takes a moment
                await _settle(gateway, accepted, report, settle, health)
            if known and not report.unready:
                await _send(gateway, LAST, KINDS, namespaces, report, health, metrics, concurrency)
                await asyncio.sleep(linger)
                if not await _ready(health):
                    report.unready.append(f"the operator stopped answering /readyz after {', '.join(last)}")
            if await _ready(health):
                report.restarts = await asyncio.to_thread(_crash_restarts, metrics) or report.restarts
            else:
                report.unready.append("the operator was not ready at the end")
        finally:
            await _stop(proc)
            if webhook:
                await _unregister(gateway)
            report.tracebacks, logged_restarts = _read_log(log)
            for kind, logged in logged_restarts.items():  # the metrics stop answering when the loop blocks
                report.restarts[kind] = max(report.restarts.get(kind, 0.0), logged)
        report.touched = await _touched(gateway, bystanders)
    for namespace in namespaces:
        with contextlib.suppress(ApiError):
            await gateway.delete(NAMESPACE, None, namespace)
    named = {n for text in (*report.tracebacks, *report.errors, *report.silent) for n in _OUR_NAME.findall(text)}
    by_name = {b["metadata"]["name"]: b for kind in KINDS for b in (*drawn[kind], *LAST.get(kind, ()))}
    report.suspects = {name: _shortened(by_name[name]) for name in sorted(named) if name in by_name}
    report.seconds = time.monotonic() - started
    return report


def _start(kubeconfig: Path, ops: str, health: int, metrics: int, log: Path, webhook: bool) -> subprocess.Popen[bytes]:
    hook = ["--webhook-port", "0"] if webhook else ["--no-webhook"]
    return subprocess.Popen(
        [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(kubeconfig), "--operator-namespace", ops, *hook,
         "--bind-address", "127.0.0.1", "--health-port", str(health), "--metrics-port", str(metrics)],
        cwd=log.parent, stdout=subprocess.DEVNULL, stderr=open(log, "wb"))  # not a source tree: the installed lessor


async def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.to_thread(proc.wait, 20)
        except subprocess.TimeoutExpired:
            proc.kill()
            await asyncio.to_thread(proc.wait)


async def _unregister(gateway: Gateway) -> None:
    """A `lessor run` that had to be killed leaves its registration, which would refuse every later create."""
    with contextlib.suppress(ApiError):
        await gateway.delete(VALIDATING_WEBHOOK, None, WEBHOOK_REGISTRATION)


async def _ready(health: int) -> bool:
    try:
        await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{health}/readyz", None, 3)
        return True
    except OSError:
        return False


async def _send(gateway: Gateway, drawn: dict[str, list[dict[str, Any]]], kinds: tuple[str, ...],
                namespaces: tuple[str, str, str], report: Report, health: int, metrics: int,
                concurrency: int) -> list[tuple[str, str, str]]:
    """Create every body, kind after kind; stops early when the operator stops answering its probe."""
    accepted: list[tuple[str, str, str]] = []
    gate = asyncio.Semaphore(concurrency)
    stop = asyncio.Event()

    lab, open_lab, ops = namespaces

    async def create(kind: str, body: dict[str, Any], namespace: str) -> None:
        async with gate:
            if stop.is_set():
                return
            report.tried += 1
            try:
                await gateway.create(RESOURCES[kind], namespace, body)
            except ApiError as err:
                layer = _layer(err)
                if layer == "error":
                    report.errors.append(f"{kind} {body['metadata']['name']}: {err.status} {err.message[:500]}")
                else:
                    report.refused[layer] += 1
                    report.refused_fields.update(f"{layer} {kind} {_INDEX.sub('[]', str(c.get('field', '')))}"
                                                 for c in err.causes)
                return
            except Exception as err:  # the client could not even send it (e.g. a timeout)
                report.errors.append(f"{kind} {body['metadata']['name']}: {type(err).__name__}: {err}")
                return
            report.accepted += 1
            accepted.append((kind, namespace, body["metadata"]["name"]))
            if kind == "Exporter":  # online and available, so that leases are granted and their times used
                now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
                with contextlib.suppress(ApiError):
                    await gateway.patch_status(EXPORTER, namespace, body["metadata"]["name"],
                                               {"lastSeen": now, "exporterStatus": "Available"})

    async def watch_probe() -> None:
        unready_since: float | None = None
        while not stop.is_set():
            if await _ready(health):
                unready_since = None
                report.restarts = await asyncio.to_thread(_crash_restarts, metrics) or report.restarts
            elif unready_since is None:
                unready_since = time.monotonic()
            elif time.monotonic() - unready_since > 5:
                report.unready.append(f"the operator stopped answering /readyz after {report.tried} bodies: "
                                      "its event loop is blocked or it died; the rest were not sent")
                stop.set()
            await asyncio.sleep(1)

    probe = asyncio.create_task(watch_probe())
    try:
        for kind in kinds:
            sends = []
            for body in drawn.get(kind, ()):
                suffix = body["metadata"]["name"].rsplit("-", 1)[-1]
                index = int(suffix) if suffix.isdigit() else 1  # the KNOWN ones go to the open lab
                if kind in IN_OPERATOR_NAMESPACE:
                    sends.append(create(kind, body, ops))
                elif kind in BOTH_LABS:
                    sends += [create(kind, body, lab), create(kind, copy.deepcopy(body), open_lab)]
                else:
                    sends.append(create(kind, body, open_lab if kind == "Lease" and index % 4 else lab))
            await asyncio.gather(*sends)
            if stop.is_set():
                break
    finally:
        stop.set()
        await probe
    return accepted


def _layer(err: ApiError) -> str:
    if " denied the request" in err.message and err.status < 500:
        return "webhook"
    if err.status >= 500 or "failed calling webhook" in err.message:
        return "error"
    return "crd"


async def _settle(gateway: Gateway, accepted: list[tuple[str, str, str]], report: Report, seconds: float,
                  health: int) -> None:
    """Wait until every accepted object of a kind in VERDICTS has one; then judge them."""
    judged = [(kind, namespace, name) for kind, namespace, name in accepted if kind in VERDICTS]
    deadline = time.monotonic() + seconds
    while True:
        pending: dict[tuple[str, str, str], str] = {}
        invalid = 0
        for kind, namespace in sorted({(kind, namespace) for kind, namespace, _ in judged}):
            items, _ = await gateway.list(RESOURCES[kind], namespace)
            live = {item["metadata"]["name"]: item for item in items}
            for name in (n for k, ns, n in judged if (k, ns) == (kind, namespace)):
                problem, said_invalid = _judge(VERDICTS[kind], live.get(name))
                invalid += said_invalid
                if problem:
                    pending[(kind, namespace, name)] = problem
        if not pending or time.monotonic() > deadline:
            break
        if not await _ready(health):
            report.unready.append("the operator stopped answering /readyz while objects settled")
            break
        await asyncio.sleep(1)
    report.refused["operator"] = invalid
    report.silent = [f"{kind} {namespace}/{name}: {problem}" for (kind, namespace, name), problem in pending.items()]


def _judge(verdict: Verdict, obj: Mapping[str, Any] | None) -> tuple[str, bool]:
    """(what is missing, or "" when the object has its verdict, naming a field if invalid; whether invalid)."""
    if obj is None:
        return "", False  # deleted meanwhile (a claim's handle may go with it): nothing left to tell
    conditions = [c for c in (obj.get("status") or {}).get("conditions") or () if isinstance(c, Mapping)]
    shown = [c for c in conditions if c.get("type") in verdict.types]
    if not shown:
        return f"no condition among {', '.join(verdict.types)}", False
    said_invalid = False
    for condition in shown:
        if verdict.invalid(condition):
            said_invalid = True
            if not _FIELD.search(str(condition.get("message", ""))):
                return (f"condition {condition.get('type')} {condition.get('reason')} names no field: "
                        f"{str(condition.get('message'))[:300]!r}"), True
    return "", said_invalid


async def _bystanders(gateway: Gateway, namespaces: tuple[str, ...]) -> dict[tuple[str, str], str]:
    """(namespace, name) → resourceVersion of the ConfigMaps there that lessor did not create."""
    found = {}
    for namespace in namespaces:
        for item in (await gateway.list(CONFIGMAP, namespace))[0]:
            if HANDLE_NAME not in (item["metadata"].get("labels") or {}):
                found[(namespace, item["metadata"]["name"])] = item["metadata"]["resourceVersion"]
    return found


async def _touched(gateway: Gateway, before: dict[tuple[str, str], str]) -> list[str]:
    touched = []
    for (namespace, name), version in before.items():
        try:
            now = await gateway.get(CONFIGMAP, namespace, name)
        except ApiError as err:
            if err.not_found:
                touched.append(f"ConfigMap {namespace}/{name}, not lessor's, was deleted")
                continue
            raise
        if now["metadata"]["resourceVersion"] != version:
            labels = now["metadata"].get("labels") or {}
            touched.append(f"ConfigMap {namespace}/{name}, not lessor's, was changed: labels {labels}, "
                           f"data {str(now.get('data'))[:200]}")
    return touched


def _crash_restarts(metrics: int) -> dict[str, float]:
    """Actor restarts after a crash, by actor kind, from the operator's /metrics (nothing when unreachable)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics}/metrics", timeout=5) as resp:
            text = resp.read().decode()
    except OSError:
        return {}
    found: dict[str, float] = {}
    for labels, value in re.findall(r"^lessor_actor_restarts_total\{([^}]*)\} (\S+)$", text, re.MULTILINE):
        pairs = dict(re.findall(r'(\w+)="([^"]*)"', labels))
        if pairs.get("reason") == "crash" and float(value):
            found[pairs.get("kind", "?")] = found.get(pairs.get("kind", "?"), 0) + float(value)
    return found


_RESTARTING = re.compile(r" ERROR lessor\.mailbox\.cell: ([^/\s]+)/\S* failed; restarting")


_MAX_TRACEBACKS = 50
_MAX_TRACEBACK_LINES = 200


def _read_log(path: Path) -> tuple[list[str], dict[str, float]]:
    """The log's tracebacks (each with the line that introduced it; the first 50) and its crash restarts by
    actor kind, in one pass over its lines: a log grown large must not cost the harness its memory."""
    tracebacks: list[str] = []
    restarts: Counter[str] = Counter()
    previous = ""
    current: list[str] | None = None
    with path.open(errors="replace") as lines:
        for line in lines:
            line = line.rstrip("\n")
            if current is not None:
                if line.startswith((" ", "\t")) or not line.strip():
                    if len(current) < _MAX_TRACEBACK_LINES:
                        current.append(line)
                    continue
                current.append(line)  # the exception's own line ends it
                tracebacks.append("\n".join(current))
                current = None
            elif line.startswith("Traceback (most recent call last):") and len(tracebacks) < _MAX_TRACEBACKS:
                current = [previous, line] if previous else [line]
            restarts.update(_RESTARTING.findall(line))
            previous = line
    if current is not None:
        tracebacks.append("\n".join(current))
    return tracebacks, {kind: float(count) for kind, count in restarts.items()}


def _shortened(body: Any, limit: int = 2000) -> Any:
    import orjson

    text = orjson.dumps(body).decode()
    return body if len(text) <= limit else text[:limit] + f"... ({len(text)} characters)"


# --- `lessor bench fuzz` ---------------------------------------------------------------------


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", help="fuzz this cluster instead of starting a local control plane "
                        "(lessor run is started against it, with the webhook on 127.0.0.1)")
    parser.add_argument("--count", type=int, default=200, help="bodies per kind, per run (default: %(default)s)")
    parser.add_argument("--seed", type=int, help=f"replay a run (default: ${SEED_VARIABLE}, else a fresh one)")
    parser.add_argument("--webhook", choices=("both", "on", "off"), default="both",
                        help="run with the webhook, without it, or both (default: %(default)s)")
    parser.add_argument("--random-only", action="store_true",
                        help="leave out the bodies of issue 10's findings that every run sends otherwise")
    parser.add_argument("--settle", type=float, default=60.0,
                        help="seconds accepted objects get to reach their verdict (default: %(default)s)")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    require_hypothesis()
    from lessor.tools.controlplane import ControlPlane, ensure_binaries
    from lessor.app.install import install

    seed = args.seed if args.seed is not None else fresh_seed()
    say(f"seed {seed} (replay with --seed {seed})")
    modes = {"both": (True, False), "on": (True,), "off": (False,)}[args.webhook]
    runs = []
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as tmp:
        async with contextlib.AsyncExitStack() as stack:
            if args.kubeconfig:
                kubeconfig = Path(args.kubeconfig)
            else:
                cp = await stack.enter_async_context(ControlPlane(Path(tmp) / "cp", ensure_binaries(say), progress=say))
                kubeconfig = cp.kubeconfig
            gateway = await stack.enter_async_context(await Gateway.connect(str(kubeconfig)))
            await install(gateway, "lessor-system", progress=say)
            for webhook in modes:
                say(f"fuzzing {args.count} bodies per kind {'with' if webhook else 'without'} the webhook")
                report = await fuzz(gateway, kubeconfig, count=args.count, seed=seed, webhook=webhook,
                                    settle=args.settle, known=not args.random_only, log_dir=Path(tmp))
                runs.append(report.summary())
    return {"benchmark": "fuzz", "machine": machine(), "seed": seed, "count_per_kind": args.count, "runs": runs}
