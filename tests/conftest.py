"""Shared fixtures: one real control plane per test session, a fresh namespace per test; the run's slowness
factor (tests/slowness.py) in pytest's header, and a time limit per test that scales with it."""

from __future__ import annotations

import asyncio
import os
import random
import signal
import ssl
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.gateway import Gateway
from lessor.gateway.resources import NAMESPACE
from lessor.app.install import install
from lessor.mailbox.loops import new_event_loop
from tests.slowness import described, scaled, slowness
from tests.tasks import cancelled

OPERATOR_NAMESPACE = "lessor-system"
#: Each test's time limit (setup and teardown included) on a quiet machine, as a guard against a hang;
#: scaled by the run's slowness. `pytest --timeout=S` (or PYTEST_TIMEOUT) sets another, 0 none.
TEST_TIMEOUT = 600.0


def pytest_configure(config: pytest.Config) -> None:
    slowness()  # measured now, before anything else runs in this process
    # `lessor dev` run by a test gives its children (operator, Prometheus, Zipkin) as much longer to start
    os.environ.setdefault("LESSOR_DEV_READY_TIMEOUT", str(scaled(60)))


def pytest_asyncio_loop_factories(config: pytest.Config, item: pytest.Item) -> Mapping[str, Callable[[], asyncio.AbstractEventLoop]]:
    """Every async test runs in the loop `lessor` runs in (the mailbox's fast lane, `lessor.mailbox.loops`)."""
    return {"lanes": new_event_loop}


def pytest_report_header(config: pytest.Config) -> list[str]:
    measured = slowness()
    lines = [f"slowness: {measured.factor:.2f} ({measured.how}); every time limit in the tests is multiplied by it"]
    if _default_timeout(config):
        lines.append(f"time limit per test: {described(TEST_TIMEOUT)}")
    return lines


def _default_timeout(config: pytest.Config) -> bool:
    """Whether the tests get TEST_TIMEOUT: pytest-timeout is there and nobody set a timeout of their own."""
    return (config.pluginmanager.hasplugin("timeout") and config.getoption("timeout", None) is None
            and "PYTEST_TIMEOUT" not in os.environ and not config.getini("timeout"))


def say(config: pytest.Config, line: str) -> None:
    """A line on the terminal now, past pytest's capture: progress of a fixture that may take minutes."""
    reporter = config.pluginmanager.getplugin("terminalreporter")
    capture = config.pluginmanager.getplugin("capturemanager")
    if reporter is None or capture is None:
        print(line, file=sys.__stderr__, flush=True)
        return
    with capture.global_and_fixture_disabled():
        reporter.ensure_newline()
        reporter.write_line(line)
        reporter.flush()


# Fixtures that bring up a control plane: a test using one (directly or through another fixture) is an
# `apiserver` test. Tests that start their own `ControlPlane` say so with `@pytest.mark.apiserver`.
CONTROL_PLANE_FIXTURES = frozenset({"controlplane", "killed_operator", "operator_process", "operator_pod",
                                    "dev_metrics", "dev_traces"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    default_timeout = _default_timeout(config)
    for item in items:
        if CONTROL_PLANE_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.apiserver)
        if default_timeout and item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(scaled(TEST_TIMEOUT)))


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_timeout_set_timer(item: pytest.Item, settings: Any) -> bool | None:
    """pytest-timeout's signal method, with a failure that names the test and its limit."""
    if settings.method != "signal" or threading.current_thread() is not threading.main_thread():
        return None  # pytest-timeout's own (the thread method ends the whole run, after naming the test's thread)
    from pytest_timeout import dump_stacks, is_debugging

    def handler(signum: int, frame: object) -> None:
        __tracebackhide__ = True
        if not settings.disable_debugger_detection and is_debugging():
            return
        terminal = item.config.get_terminal_writer()
        terminal.sep("+", title=f"Timeout: {item.nodeid}")
        dump_stacks(terminal)
        terminal.sep("+", title="Timeout")
        how = f" ({described(TEST_TIMEOUT)})" if settings.timeout == scaled(TEST_TIMEOUT) else ""
        pytest.fail(f"{item.nodeid} ran past its time limit of {settings.timeout:g} s{how}")

    def cancel() -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)

    item.cancel_timeout = cancel  # type: ignore[attr-defined]  # what pytest-timeout's cancel hook calls
    signal.signal(signal.SIGALRM, handler)
    signal.setitimer(signal.ITIMER_REAL, settings.timeout)
    return True


_SSL_CONTEXT = ssl.SSLContext


@pytest.hookimpl(trylast=True)
def pytest_runtest_teardown(item: pytest.Item) -> None:
    """A test must leave `ssl.SSLContext` as it found it: a library that swaps it process-wide (truststore's
    `inject_into_ssl`, which importing `jumpstarter_cli` calls) makes aiohttp treat every context made before as
    none, so the session's gateways connect unverified and without their client certificate, anonymous to the
    API server, from then on. Run such a library in a process of its own."""
    swapped = ssl.SSLContext
    if swapped is not _SSL_CONTEXT:
        ssl.SSLContext = _SSL_CONTEXT  # type: ignore[misc]  # the tests after it run as they should
        pytest.fail(f"{item.nodeid} replaced ssl.SSLContext (with {swapped!r}); run what did it in a subprocess",
                    pytrace=False)


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> None:
    """Build (or wait for) the control plane before the first test that needs one, outside any test's time
    limit, with its progress on the terminal: the first build takes minutes, more on a busy machine."""
    if session.config.option.collectonly or not any(item.get_closest_marker("apiserver") for item in session.items):
        return
    try:
        ensure_binaries(lambda line: say(session.config, f"lessor: {line}"))
    except Exception as error:  # each test that needs it reports it
        say(session.config, f"lessor: the control plane could not be built: {error}")


@pytest.fixture(scope="session")
async def controlplane(tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest) -> AsyncIterator[ControlPlane]:
    """The real etcd + kube-apiserver (+ controller manager), built from Go modules once per machine."""
    binaries = ensure_binaries(lambda line: say(request.config, f"lessor: {line}"))
    # PodTemplates bypass the watch cache, so a test can force a real 410 Gone by compacting etcd.
    async with ControlPlane(tmp_path_factory.mktemp("controlplane"), binaries,
                            apiserver_args=("--watch-cache-sizes=podtemplates#0",)) as cp:
        yield cp


@pytest.fixture(scope="session")
async def kube(controlplane: ControlPlane) -> AsyncIterator[Gateway]:
    """A gateway to the shared control plane with the CRDs installed."""
    async with await Gateway.connect(str(controlplane.kubeconfig)) as gateway:
        await install(gateway, OPERATOR_NAMESPACE, progress=lambda _: None)
        yield gateway


@pytest.fixture
async def namespace(kube: Gateway) -> AsyncIterator[str]:
    name = f"t-{uuid.uuid4().hex[:10]}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
    yield name
    await kube.delete(NAMESPACE, None, name)


@pytest.fixture
def kubeconfig(controlplane: ControlPlane) -> Path:
    return controlplane.kubeconfig


@pytest.fixture(scope="session")
async def operator(kube: Gateway, controlplane: ControlPlane) -> AsyncIterator[object]:
    """The operator, in this process: its actors, topology and chaos monkey are reachable by tests."""
    import asyncio

    from prometheus_client import CollectorRegistry

    from lessor.tools.controlplane.processes import free_port
    from lessor.app.operator import Operator, OperatorConfig

    # One operator serves the whole session, and every test's handles share the operator namespace: without a
    # budget that the session never spends, a test's handle Events would depend on the tests before it (the
    # budget itself is tested on a recorder of its own, tests/app/test_events.py).
    config = OperatorConfig(operator_namespace=OPERATOR_NAMESPACE, bind_address="127.0.0.1",
                            health_port=free_port(), metrics_port=free_port(), exporter_heartbeat_timeout=30.0,
                            events_namespace_burst=100_000)
    registry = CollectorRegistry()
    # Its own connection, as a separate `lessor run` would have: its requests are counted apart.
    async with await Gateway.connect(str(controlplane.kubeconfig), registry=registry) as gateway:
        op = Operator(config, gateway, registry)
        task = asyncio.create_task(op.run())
        while not op.ready()[0]:
            assert not task.done(), task.exception()
            await asyncio.sleep(0.05)
        yield op
        await cancelled(task)


Violations = Callable[[], Awaitable[list[str]]]


@pytest.fixture
def until(kube: Gateway) -> Callable[..., Awaitable[Mapping[str, Any]]]:
    """`await until(resource, namespace, name, check, timeout=30)`: poll the object until `check(obj)`
    holds and return it; fail with its last status otherwise (a missing object counts as not yet).
    The timeout is scaled by the run's slowness (tests/polling.py)."""
    from tests.polling import until as poll

    return lambda res, namespace, name, check, timeout=30: poll(kube, res, namespace, name, check, timeout)


@pytest.fixture
def chaos_seed() -> int:
    """A fresh seed per run, printed (pytest shows it with a failure); LESSOR_CHAOS_SEED=N replays run N."""
    given = os.environ.get("LESSOR_CHAOS_SEED")
    seed = int(given) if given else random.SystemRandom().randrange(2**31)
    print(f"chaos seed {seed} (LESSOR_CHAOS_SEED={seed} replays it)", flush=True)
    return seed


class Sampler:
    """Checks invariants every `every` seconds while a storm runs (`async with`). A violation that one
    sample shows and the next ones still show for longer than `grace` seconds fails the test; with
    grace 0, one sample is enough. Grace is for what a write in flight may show for a moment."""

    def __init__(self, violations: Violations, *, grace: float, every: float = 0.5, seed: int | None = None) -> None:
        self.violations, self.grace, self.every, self.seed = violations, grace, every, seed
        self.samples = 0
        self.found: list[str] = []
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Sampler:
        self._task = asyncio.create_task(self._run())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        await cancelled(self._task)
        if self.found and exc[0] is None:
            pytest.fail(f"invariants broken during the storm (chaos seed {self.seed}):\n" + "\n".join(self.found))
        assert self.samples > 1, "the storm ended before the invariants were sampled twice"

    async def _run(self) -> None:
        since: dict[str, float] = {}
        while True:
            now = time.monotonic()
            current = set(await self.violations())
            self.samples += 1
            since = {v: since.get(v, now) for v in current}
            for violation, first in since.items():
                if now - first >= self.grace and violation not in self.found:
                    self.found.append(f"{violation} (seen for {now - first:.1f}s)")
            await asyncio.sleep(self.every)


@pytest.fixture
def sampled(chaos_seed: int) -> Callable[..., Sampler]:
    """`async with sampled(violations, grace=s):` samples `violations` during the block (see `Sampler`)."""
    return lambda violations, *, grace: Sampler(violations, grace=grace, seed=chaos_seed)


@pytest.fixture
def settles() -> Callable[[Violations, float], Awaitable[None]]:
    """`await settles(violations, timeout)`: poll until the invariant checker finds nothing,
    else fail with what it still finds (the chaos tests' "afterwards"); the timeout is scaled."""
    import asyncio
    import time

    async def wait(violations: Violations, timeout: float) -> None:
        deadline = time.monotonic() + scaled(timeout)
        found: list[str] = []
        while time.monotonic() < deadline:
            found = await violations()
            if not found:
                return
            await asyncio.sleep(0.5)
        pytest.fail(f"invariants still broken {described(timeout)} after the storm:\n" + "\n".join(found))

    return wait


# Short terms of leadership, so that the process started after a SIGKILL takes over within seconds.
FAST_ELECTION = ("--leader-elect-lease-duration", "2s", "--leader-elect-renew-deadline", "1500ms",
                 "--leader-elect-retry-period", "300ms")


class OperatorProcess:
    """`lessor run` against one control plane as its own process, which a test starts, SIGKILLs and starts
    again (each start a new process, as a restarted pod, logging to `run-N/operator.log` in `directory`)."""

    def __init__(self, kubeconfig: Path, directory: Path) -> None:
        self.kubeconfig, self.directory = kubeconfig, directory
        self.process: subprocess.Popen[bytes] | None = None
        self.starts = 0
        self.metrics_port = 0  # the running process's /metrics

    def start(self, *extra: str) -> None:
        """`extra`: more arguments of `lessor run`."""
        from lessor.tools.bench.common import start_operator
        from lessor.tools.controlplane.processes import free_port

        assert self.process is None or self.process.poll() is not None, "already running"
        self.starts += 1
        folder = self.directory / f"run-{self.starts}"
        folder.mkdir(parents=True, exist_ok=True)
        self.metrics_port = free_port()
        self.process = start_operator(self.kubeconfig, folder, free_port(), self.metrics_port, *FAST_ELECTION, *extra)

    def kill(self) -> None:
        """SIGKILL: no last words, as when a node dies."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
        if self.process is not None:
            self.process.wait()

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(scaled(30))
            except subprocess.TimeoutExpired:
                self.kill()


@pytest.fixture
def operator_process(tmp_path: Path) -> Iterator[Callable[[ControlPlane], OperatorProcess]]:
    """`operator_process(cp)`: an `OperatorProcess` for `cp` (not started); stopped after the test."""
    made: list[OperatorProcess] = []

    def make(cp: ControlPlane) -> OperatorProcess:
        made.append(OperatorProcess(cp.kubeconfig, tmp_path))
        return made[-1]

    yield make
    for process in made:
        process.stop()


@pytest.fixture
def killed_operator(operator_process: Callable[[ControlPlane], OperatorProcess]) -> Callable[..., Awaitable[int]]:
    """`await killed_operator(cp, storm, then=checks)`: run `lessor run` against `cp` as its own
    process, SIGKILL and restart it `kills` times while `storm` runs (`every` seconds, or at random
    around that with `rng`), then await `then()` with the last operator still up. Returns how many
    kills happened."""
    import asyncio

    async def run(cp: ControlPlane, storm: Awaitable[None], *, then: Callable[[], Awaitable[None]],
                  kills: int = 3, every: float = 2.5, rng: random.Random | None = None) -> int:
        process = operator_process(cp)
        process.start()
        done = 0

        async def killer() -> None:
            nonlocal done
            for _ in range(kills):
                await asyncio.sleep(rng.uniform(0.5 * every, 1.5 * every) if rng else every)
                process.kill()
                done += 1
                process.start()

        try:
            await asyncio.gather(storm, killer())
            await then()
        finally:
            process.stop()  # before the test's control plane goes
        return done

    return run


@pytest.fixture(scope="session")
def read_until() -> Callable[..., Awaitable[str]]:
    """`await read_until(proc, "text", lines)`: read a `lessor` process's stderr into `lines` until a line
    has `text`, as a user watches `lessor dev`; fails with the output so far if it exits or takes longer than
    `timeout` (scaled)."""
    import asyncio
    import time

    async def read(proc: subprocess.Popen[str], text: str, lines: list[str], timeout: float = 120) -> str:
        assert proc.stderr is not None
        deadline = time.monotonic() + scaled(timeout)
        while not any(text in line for line in lines):
            assert time.monotonic() < deadline, f"no {text!r} within {described(timeout)}:\n" + "".join(lines)
            line = await asyncio.to_thread(proc.stderr.readline)
            assert line or proc.poll() is None, "".join(lines)
            lines.append(line)
        return "".join(lines)

    return read


# --- the operator as a pod (tests/deploy/test_pod.py, tests/deploy/test_rbac.py) -----------------------------------

OPERATOR_USER = "system:serviceaccount:lessor-system:lessor"


@pytest.fixture(scope="session")
async def operator_pod(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[object]:
    """deploy/ applied to its own API server (audit log on, the operator's user recorded), and
    deployment.yaml's container run in a pod sandbox as the ServiceAccount; see tests/pod_run.py."""
    from tests.deploy.pod import PodSandbox

    if reason := PodSandbox.available():
        pytest.skip(f"no pod sandbox on this machine: {reason}")
    import importlib.util
    import sys

    spec = importlib.util.spec_from_file_location("pod_run", Path(__file__).parent / "deploy" / "pod_run.py")
    assert spec is not None and spec.loader is not None
    module = sys.modules["pod_run"] = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    async with module.operator_pod(tmp_path_factory.mktemp("pod"), OPERATOR_USER) as pod:
        yield pod
