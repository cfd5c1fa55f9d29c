"""The command line as a user meets it: help everywhere, clear errors, install, run, dev."""

from __future__ import annotations

import asyncio
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from lessor.tools.controlplane import ControlPlane
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CLIENT, CRD, EXPORTER, LEASE, LESSOR_RESOURCES, VALIDATING_WEBHOOK as WEBHOOKS
from tests.slowness import scaled

COMMANDS = ["controlplane", "install", "run", "dev", "topology", "trace", "convert", "migrate", "bench",
            "bench apiserver", "bench leases"]


def lessor(*args: str, cwd: Path, timeout: float = 60, **kw: object) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("lessor") or str(Path(sys.executable).parent / "lessor")
    return subprocess.run([exe, *args], cwd=cwd, capture_output=True, text=True, timeout=scaled(timeout), **kw)  # type: ignore[call-overload]


# What makes start-up slow (issue #24: `lessor --help` took 1.2 s of CPU, `convert` 1.0 s): the Kubernetes
# client, aiohttp, the OpenTelemetry SDK, Jinja2, jsonschema and the Prometheus client.
HEAVY = ("kubernetes_asyncio", "aiohttp", "opentelemetry", "jinja2", "jsonschema", "prometheus_client")
JUMPSTARTER_LEASE = """apiVersion: jumpstarter.dev/v1alpha1
kind: Lease
metadata: {name: l1, namespace: lab}
spec: {clientRef: {name: alice}, selector: {matchLabels: {board: rpi4}}, duration: 1h}
"""


def _imported(*args: str, cwd: Path, ok: tuple[int, ...] = (0,)) -> set[str]:
    """The top-level packages `lessor ARGS` imports, from `python -X importtime` (no timing is judged)."""
    out = subprocess.run([sys.executable, "-X", "importtime", "-m", "lessor", *args], cwd=cwd, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode in ok, out.stderr[-2000:]
    return {line.split("|")[-1].strip().split(".")[0] for line in out.stderr.splitlines()
            if line.startswith("import time:")}


@pytest.mark.parametrize("args", [("--help",), ("bench", "--help"), ("convert", "--help"), ("convert", "lease.yaml"),
                                  ("trace", "--help")], ids=" ".join)
def test_help_and_convert_start_without_the_heavy_modules(args: tuple[str, ...], tmp_path: Path) -> None:
    """Each subcommand imports its modules when it runs (lessor/cli.py), the benchmarks' only for the one
    named, and `lessor.templates` each of its modules when first used: so `--help` and `convert` cost about
    0.1 s of CPU, not 1 s (docs/cli.md, Start-up cost)."""
    (tmp_path / "lease.yaml").write_text(JUMPSTARTER_LEASE)
    imported = _imported(*args, cwd=tmp_path)
    assert "lessor" in imported
    assert not imported & set(HEAVY), sorted(imported & set(HEAVY))


def test_a_benchmark_s_own_arguments_are_still_known(tmp_path: Path) -> None:
    out = lessor("bench", "scale", "--help", cwd=tmp_path)
    assert out.returncode == 0 and "--sizes" in out.stdout, out.stderr


def test_trace_starts_without_the_operator_s_modules(tmp_path: Path) -> None:
    """`lessor trace` reads a file: the OpenTelemetry SDK (its file format's exporter) but no client, no web."""
    (tmp_path / "t.jsonl").write_text("")
    imported = _imported("trace", "lease", "lab/l1", "--file", str(tmp_path / "t.jsonl"), cwd=tmp_path, ok=(0, 1))
    assert "lessor" in imported
    assert not imported & (set(HEAVY) - {"opentelemetry"}), sorted(imported & set(HEAVY))


@pytest.mark.parametrize("command", COMMANDS)
def test_every_command_has_help(command: str, tmp_path: Path) -> None:
    out = lessor(*command.split(), "--help", cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "usage: lessor" in out.stdout and len(out.stdout.splitlines()) > 4


def test_the_installed_package_works_from_any_folder(tmp_path: Path) -> None:
    code = ("import lessor.mailbox, lessor.actors, lessor.templates; from lessor.shipped import manifests; "
            "print(len(manifests.crds()), len(manifests.samples()) > 0)")
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(len(LESSOR_RESOURCES)), "True"]  # one CRD per kind


def test_a_missing_kubeconfig_is_a_clear_error_not_a_traceback(tmp_path: Path) -> None:
    out = lessor("install", "--kubeconfig", str(tmp_path / "nope"), cwd=tmp_path, env={**os.environ, "KUBERNETES_SERVICE_HOST": ""})
    assert out.returncode == 1
    assert "no kubeconfig at" in out.stderr and "Traceback" not in out.stderr


@pytest.mark.parametrize("command", ["run", "dev"])
def test_leader_election_tracing_is_one_switch_off_by_default(command: str, tmp_path: Path) -> None:
    out = lessor(command, "--help", cwd=tmp_path)
    assert out.returncode == 0 and "--trace-leader-election" in out.stdout, out.stderr
    assert "default: not traced" in " ".join(out.stdout.split()), out.stdout


def test_trace_of_a_file_with_a_malformed_line_names_it_not_a_traceback(tmp_path: Path) -> None:
    (tmp_path / "t.jsonl").write_text('{"trace": "4bf92f3577b34da6a3ce929d0e0e4736", "span": "00f06\n')  # cut short
    out = lessor("trace", "lease", "lab/l1", "--file", "t.jsonl", cwd=tmp_path)
    assert out.returncode == 1 and "Traceback" not in out.stderr, out.stderr
    assert "t.jsonl, line 1: not JSON" in out.stderr and "delete that line" in out.stderr, out.stderr


async def test_install_establishes_every_crd(controlplane: ControlPlane, tmp_path: Path) -> None:
    out = await asyncio.to_thread(lessor, "install", "--kubeconfig", str(controlplane.kubeconfig), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert f"{len(LESSOR_RESOURCES)} CustomResourceDefinitions established" in out.stderr
    assert "applied the leader fence lessor-leader-fence" in out.stderr, out.stderr
    async with await Gateway.connect(str(controlplane.kubeconfig)) as gw:
        for res in LESSOR_RESOURCES:
            crd = await gw.get(CRD, None, f"{res.plural}.{res.group}")
            assert {"type": "Established", "status": "True"}.items() <= crd["status"]["conditions"][0].items() or any(
                c["type"] == "Established" and c["status"] == "True" for c in crd["status"]["conditions"])


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=scaled(2)) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()


async def _poll(url: str, want: int, timeout: float = 30) -> str:
    deadline = time.monotonic() + scaled(timeout)
    last: object = None
    while time.monotonic() < deadline:
        try:
            status, body = await asyncio.to_thread(_get, url)
            if status == want:
                return body
            last = (status, body)
        except OSError as err:
            last = err
        await asyncio.sleep(0.2)
    raise AssertionError(f"{url} did not answer {want} within {scaled(timeout):.0f}s; last: {last}")


async def test_run_serves_health_readiness_and_metrics(kube: Gateway, controlplane: ControlPlane, tmp_path: Path) -> None:
    health, metrics = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(controlplane.kubeconfig),
         "--health-port", str(health), "--metrics-port", str(metrics), "--bind-address", "127.0.0.1", "--no-webhook"],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await _poll(f"http://127.0.0.1:{health}/healthz", 200)
        assert "caches synced" in await _poll(f"http://127.0.0.1:{health}/readyz", 200)
        body = await _poll(f"http://127.0.0.1:{metrics}/metrics", 200)
        assert 'lessor_api_requests_total{code="200",kind="Lease",verb="list"}' in body
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(30))
    assert proc.returncode in (0, 143), out  # 143: stopped by SIGTERM, cleanly


async def test_sigterm_removes_the_development_webhook_registration(
    kube: Gateway, controlplane: ControlPlane, tmp_path: Path
) -> None:
    health = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "run", "--kubeconfig", str(controlplane.kubeconfig), "--no-leader-elect",
         "--health-port", str(health), "--metrics-port", str(free_port()), "--bind-address", "127.0.0.1",
         "--webhook-port", str(free_port())],
        cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        await _poll(f"http://127.0.0.1:{health}/readyz", 200)
        assert (await kube.get(WEBHOOKS, None, "lessor-preflight"))["metadata"]["name"] == "lessor-preflight"
    finally:
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=scaled(30))
    assert proc.returncode == 143, out
    with pytest.raises(ApiError) as gone:
        await kube.get(WEBHOOKS, None, "lessor-preflight")
    assert gone.value.not_found, out


async def test_dev_brings_up_everything_and_ctrl_c_stops_it(
    controlplane: ControlPlane, tmp_path: Path, read_until: Callable[..., Awaitable[str]]
) -> None:
    """The README's first command, end to end (on its own control plane): it takes over a stale
    lock, refuses a second `lessor dev` in the same folder, serves the webhook on --webhook-port,
    and says what it cleaned up on Ctrl-C."""
    kubeconfig, folder, webhook_port = tmp_path / "dev.kubeconfig", tmp_path / "dev", free_port()
    folder.mkdir()
    dead = subprocess.Popen(["true"])
    dead.wait()
    (folder / "lessor.pid").write_text(f"pid={dead.pid}\ncommand=lessor dev\nsince=yesterday\n")  # SIGKILLed
    proc = subprocess.Popen(
        [sys.executable, "-m", "lessor", "dev", "--kubeconfig-out", str(kubeconfig), "--dir", str(folder),
         "--health-port", str(free_port()), "--metrics-port", str(free_port()), "--webhook-port", str(webhook_port)],
        cwd=tmp_path, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )
    lines: list[str] = []
    try:
        output = await read_until(proc, "Ctrl-C stops everything", lines)
        assert f"export KUBECONFIG={kubeconfig}" in output
        assert "was refused" not in output, output
        assert f"stale lock {folder / 'lessor.pid'} (pid {dead.pid}" in output, output
        assert f"admission webhook on https://127.0.0.1:{webhook_port}" in output, output

        second = await asyncio.to_thread(
            lessor, "dev", "--dir", str(folder), "--kubeconfig-out", str(tmp_path / "second.kubeconfig"),
            cwd=tmp_path)
        assert second.returncode == 1, second.stderr
        assert f"lessor dev is already running in {folder} (pid {proc.pid}" in second.stderr, second.stderr
        assert "Traceback" not in second.stderr and not (tmp_path / "second.kubeconfig").exists()

        async with await Gateway.connect(str(kubeconfig)) as gw:  # the first is untouched by the second
            hook = await gw.get(WEBHOOKS, None, "lessor-preflight")
            assert f":{webhook_port}/" in hook["webhooks"][0]["clientConfig"]["url"]
            exporters, _ = await gw.list(EXPORTER, "lab")
            assert len(exporters) >= 2
            deadline = time.monotonic() + scaled(30)
            while not all(e.get("status", {}).get("lastSeen") for e in exporters):
                assert time.monotonic() < deadline, "sample exporters never got a heartbeat"
                await asyncio.sleep(0.5)
                exporters, _ = await gw.list(EXPORTER, "lab")
            # The sample leases show their conditions: the operator is really deciding.
            want = {"alice-rpi4": ("Ready", "True", "Ready"), "bob-invalid": ("Invalid", "True", "InvalidSelector"),
                    "alice-too-long": ("Unsatisfiable", "True", "DurationExceeded")}
            deadline = time.monotonic() + scaled(60)  # a loaded CI machine: the first decisions may take a while
            while True:
                leases = {x["metadata"]["name"]: x for x in (await gw.list(LEASE, "lab"))[0]}
                conditions = {name: (leases.get(name, {}).get("status") or {}).get("conditions") or ()
                              for name in want}
                seen = {name: next(((c["type"], c["status"], c["reason"]) for c in conditions[name]
                                    if c["type"] == want[name][0]), None) for name in want}
                if seen == want:
                    break
                assert time.monotonic() < deadline, f"sample leases: {seen}; all their conditions: {conditions}"
                await asyncio.sleep(0.5)
    finally:
        proc.send_signal(signal.SIGINT)
        rest = await asyncio.to_thread(proc.communicate, timeout=scaled(60))
    said = "".join(lines) + (rest[1] or "")
    assert proc.returncode == 0, said
    for cleanup in ("interrupted: cleaning up", "stopped the operator cleanly", "stopped the control plane",
                    f"removed the lock {folder / 'lessor.pid'}"):
        assert cleanup in rest[1], said
    assert "exit code" not in rest[1], said  # Ctrl-C is not an error
    assert not (folder / "lessor.pid").exists()


def test_dev_says_a_stop_it_asked_for_is_clean_and_an_exit_it_did_not_ask_for_is_news(tmp_path: Path) -> None:
    from lessor.tools.dev.commands import operator_stopped

    log = tmp_path / "operator.log"
    for code in (143, -signal.SIGTERM, 0):  # `lessor run` answers SIGTERM with 143; killed before its handler: -15
        assert operator_stopped(code, asked=True, log=log) == "stopped the operator cleanly"
    assert operator_stopped(-signal.SIGKILL, asked=True, log=log) == (
        f"stopped the operator: it did not stop within 10s of SIGTERM and was killed (log: {log})")
    assert operator_stopped(1, asked=False, log=log) == (
        f"the operator had stopped by itself with exit code 1 (log: {log})")
    assert operator_stopped(143, asked=False, log=log) == (
        f"the operator had stopped by itself with exit code 143 (log: {log})")  # someone else's SIGTERM


def test_dev_refuses_a_busy_port_before_starting_anything(tmp_path: Path) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        out = lessor("dev", "--dir", str(tmp_path / "dev"), "--webhook-port", str(port), cwd=tmp_path)
    assert out.returncode == 1, out.stderr
    assert f"port {port} on 127.0.0.1 is in use" in out.stderr and "--webhook-port N or --no-webhook" in out.stderr
    assert "control plane" not in out.stderr and "Traceback" not in out.stderr
    assert not (tmp_path / "dev" / "lessor.pid").exists() and not (tmp_path / "lessor-dev.kubeconfig").exists()


async def test_topology_prints_the_clusters_graph_as_dot(
    kube: Gateway, namespace: str, kubeconfig: Path, tmp_path: Path
) -> None:
    api = "lessor.dev/v1alpha1"
    await kube.create(EXPORTER, namespace, {"apiVersion": api, "kind": "Exporter",
                                            "metadata": {"name": "dot-e1", "labels": {"board": "dot"}}})
    await kube.create(LEASE, namespace, {"apiVersion": api, "kind": "Lease", "metadata": {"name": "dot-l1"},
                                         "spec": {"clientRef": {"name": "dot-c"},
                                                  "selector": {"matchLabels": {"board": "dot"}}}})
    # A live lease (its exporter is offline, so it waits): ended leases have no edges.
    await kube.create(CLIENT, namespace, {"apiVersion": api, "kind": "Client", "metadata": {"name": "dot-c"}})
    out = await asyncio.to_thread(lessor, "topology", "--dot", "--kubeconfig", str(kubeconfig), cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.lstrip().startswith("digraph")
    edges = [line for line in out.stdout.splitlines() if "->" in line and "dot-l1" in line and "dot-e1" in line]
    assert edges, "the lease's selector edge to the exporter is drawn"


def test_the_operator_runs_in_the_mailboxs_loop_and_quick_commands_in_asyncios() -> None:
    """`lessor run` (and the benches) get the fast lane (`lessor.mailbox.loops`) unless `--event-loop asyncio`;
    `convert` and the like keep asyncio's own loop and never import the runtime (see the start-up tests above)."""
    from lessor.cli import _loop_factory, build_parser
    from lessor.mailbox.lanes import LaneLoop

    def loop_of(*argv: str) -> asyncio.AbstractEventLoop | None:
        factory = _loop_factory(build_parser(list(argv)).parse_args(list(argv)))
        return None if factory is None else factory()

    for argv, lane in ((("run",), True), (("bench", "mailbox"), True), (("run", "--event-loop", "lane"), True),
                       (("run", "--event-loop", "asyncio"), False)):
        loop = loop_of(*argv)
        assert loop is not None
        try:
            assert isinstance(loop, LaneLoop) is lane, argv
        finally:
            loop.close()
    assert loop_of("convert", "lease.yaml") is None and loop_of("install") is None


@pytest.mark.parametrize("command", ["run", "dev"])
def test_the_event_loop_is_a_choice_the_help_explains(command: str, tmp_path: Path) -> None:
    out = lessor(command, "--help", cwd=tmp_path)
    text = " ".join(out.stdout.split())
    assert out.returncode == 0 and "--event-loop {lane,asyncio}" in text, out.stderr
    assert "runs plain asyncio" in text and "default: lane" in text, text
    refused = lessor(command, "--event-loop", "uvloop", cwd=tmp_path)
    assert refused.returncode == 2 and "invalid choice" in refused.stderr
