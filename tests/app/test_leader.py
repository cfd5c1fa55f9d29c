"""Leader election against the real API server: one leader, fencing by time, hand-over on release;
and the probes telling the truth (a blocked event loop, a stopped API server, failed watches)."""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import signal
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from prometheus_client import CollectorRegistry

from lessor.actors.api import CLIENT
from lessor.gateway.client import WRITE_CONCURRENCY, load_configuration
from lessor.app.api_adapter import GatewayApi
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import ApiError, Gateway, Informer, Resource
from lessor.gateway.resources import LEASE, NAMESPACE
from lessor.app.install import install
from lessor.leadership.election import COORDINATION_LEASE, COUNTED_AS, ElectionSettings, LeaderElector, NotLeader
from lessor.app.operator import Operator, OperatorConfig
from tests.cli.test_cli import _get, _poll
from tests.slowness import scaled
from tests.tasks import cancelled, running

OPS = "lessor-system"
CLIENTS = Resource("lessor.dev", "v1alpha1", "Client", "clients")


def _settings(**overrides: Any) -> ElectionSettings:
    values: dict[str, Any] = {"lease_duration": 3.0, "renew_deadline": 2.0, "retry_period": 0.3,
                              "name": f"t-{uuid.uuid4().hex[:8]}"}
    return ElectionSettings(**{**values, **overrides})


async def _holder(kube: Gateway, name: str) -> dict[str, Any]:
    return dict((await kube.get(COORDINATION_LEASE, OPS, name))["spec"])



async def test_one_leader_at_a_time_and_release_hands_over_at_once(kube: Gateway) -> None:
    # A lease duration far longer than the wait below: only the release can explain the hand-over.
    settings = _settings(lease_duration=120.0, renew_deadline=3.0)
    first, second = (LeaderElector(kube, OPS, settings, identity=who) for who in ("first", "second"))
    async with running(first.run()) as leading:
        await asyncio.wait_for(first.wait_leading(), scaled(10))
        async with running(second.run()):
            await asyncio.sleep(4 * settings.retry_period + settings.renew_deadline)
            assert first.leading() and not second.leading()
            assert (await _holder(kube, settings.name))["holderIdentity"] == "first"

            await cancelled(leading)  # SIGTERM: stop renewing; the actors stop; release closes the fence and hands over
            await first.release()
            assert not first.leading()
            await asyncio.wait_for(second.wait_leading(), scaled(30, at_most=100))  # within the 120 s lease
            spec = await _holder(kube, settings.name)
            assert (spec["holderIdentity"], spec["leaseTransitions"]) == ("second", 1)


async def test_a_release_answered_late_still_hands_over(
    kube: Gateway, kubeconfig: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a loaded machine the release's write took longer than one retry period; given up on, it left the
    followers waiting out the whole lease (CI saw a follower wait 20 s for a 30 s lease)."""
    settings = _settings(lease_duration=120.0, renew_deadline=3.0)
    async with await Gateway.connect(str(kubeconfig)) as slow:
        request = slow.request

        async def late(verb: str, kind: str, method: str, path: str, **kwargs: Any) -> Any:
            if kind == COUNTED_AS and verb == "update" and not first.leading():  # the release, nothing else
                await asyncio.sleep(5 * settings.retry_period)
            return await request(verb, kind, method, path, **kwargs)

        monkeypatch.setattr(slow, "request", late)
        first = LeaderElector(slow, OPS, settings, identity="first")
        second = LeaderElector(kube, OPS, settings, identity="second")
        async with running(first.run()) as leading:
            await asyncio.wait_for(first.wait_leading(), scaled(10))
            async with running(second.run()):
                await cancelled(leading)
                await first.release()
                await asyncio.wait_for(second.wait_leading(), scaled(30, at_most=100))  # within the 120 s lease
                assert (await _holder(kube, settings.name))["holderIdentity"] == "second"


async def test_a_release_after_a_renewal_it_did_not_hear_back_from_still_hands_over(kube: Gateway) -> None:
    """A renewal cancelled in flight (SIGTERM) may be written without the leader learning its version; its
    release then met a 409 and the followers waited out the whole lease (CI: a follower waited 25 s)."""
    settings = _settings(lease_duration=120.0, renew_deadline=3.0)
    first, second = (LeaderElector(kube, OPS, settings, identity=who) for who in ("first", "second"))
    async with running(first.run()) as leading:
        await asyncio.wait_for(first.wait_leading(), scaled(10))
        async with running(second.run()):
            await cancelled(leading)
            # What the cancelled renewal did: the Lease written, still ours, under a version first never saw.
            lease = await kube.get(COORDINATION_LEASE, OPS, settings.name)
            await kube.request("update", COUNTED_AS, "PUT", COORDINATION_LEASE.path(OPS, settings.name), body={
                **lease, "spec": {**lease["spec"], "renewTime": dt.datetime.now(dt.UTC).strftime(
                    "%Y-%m-%dT%H:%M:%S.%fZ")}})
            await first.release()
            await asyncio.wait_for(second.wait_leading(), scaled(30, at_most=100))  # within the 120 s lease
            assert (await _holder(kube, settings.name))["holderIdentity"] == "second"


async def test_a_leader_renews_in_one_round_trip(kube: Gateway, monkeypatch: pytest.MonkeyPatch) -> None:
    """A read and a write per renewal took long enough on a loaded API server to miss the renew deadline
    (leaders stepped down by themselves under `bench failover`'s CPU hogs): a renewal is the write alone."""
    verbs: list[str] = []
    request = kube.request

    async def counted(verb: str, kind: str, method: str, path: str, **kwargs: Any) -> Any:
        if kind == COUNTED_AS:
            verbs.append(verb)
        return await request(verb, kind, method, path, **kwargs)

    monkeypatch.setattr(kube, "request", counted)
    settings = _settings(lease_duration=120.0, renew_deadline=3.0, retry_period=0.2)
    elector = LeaderElector(kube, OPS, settings, identity="one")
    async with running(elector.run()):
        await asyncio.wait_for(elector.wait_leading(), scaled(10))
        deadline = time.monotonic() + scaled(30)
        while verbs.count("update") < 5:
            assert time.monotonic() < deadline, verbs
            await asyncio.sleep(0.1)
        assert elector.leading()
    assert verbs.count("get") == 1, verbs  # the campaign's read of a Lease that did not exist yet
    assert (await _holder(kube, settings.name))["holderIdentity"] == "one"


async def test_a_leader_that_cannot_renew_stops_writing_before_another_takes_over(
    kube: Gateway, kubeconfig: Path, namespace: str
) -> None:
    settings = _settings()
    async with await Gateway.connect(str(kubeconfig)) as partitioned:
        first = LeaderElector(partitioned, OPS, settings, identity="first")
        second = LeaderElector(kube, OPS, settings, identity="second")
        api = GatewayApi(partitioned, fence=first.fence)
        samples: list[tuple[float, bool, bool]] = []

        async def sample() -> None:
            while True:
                samples.append((time.monotonic(), first.leading(), second.leading()))
                await asyncio.sleep(0.005)

        async def unreachable(*args: Any, **kwargs: Any) -> Any:
            await asyncio.sleep(3600)

        async with running(first.run()):
            await asyncio.wait_for(first.wait_leading(), scaled(10))
            async with running(second.run()):
                sampler = asyncio.create_task(sample())
                await api.create(CLIENT, namespace, {"apiVersion": CLIENT.api_version, "kind": "Client",
                                                     "metadata": {"name": "before"}})
                partitioned.request = unreachable  # type: ignore[method-assign]  # the first leader is cut off
                await asyncio.wait_for(second.wait_leading(), scaled(30))
                await asyncio.sleep(0.1)
                sampler.cancel()

    assert not any(a and b for _, a, b in samples), "two leaders at one moment"
    last_first = max(t for t, a, _ in samples if a)
    first_second = min(t for t, _, b in samples if b)
    assert last_first < first_second
    with pytest.raises(NotLeader):
        await api.create(CLIENT, namespace, {"apiVersion": CLIENT.api_version, "kind": "Client",
                                             "metadata": {"name": "after"}})
    with pytest.raises(ApiError) as gone:
        await kube.get(Resource("lessor.dev", "v1alpha1", "Client", "clients"), namespace, "after")
    assert gone.value.not_found


class StallingProxy:
    """A TCP proxy in front of the API server that can stop forwarding what its clients send: a partition
    that keeps connections open. What it held goes on once it flows again."""

    def __init__(self, upstream: str) -> None:
        split = urlsplit(upstream)
        self._upstream = (split.hostname or "127.0.0.1", split.port or 443)
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.url = ""
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()

    async def __aenter__(self) -> StallingProxy:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        self.url = f"https://127.0.0.1:{self._server.sockets[0].getsockname()[1]}"
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._server is not None
        self._server.close()
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _serve(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        task = asyncio.create_task(self._forward(client_r, client_w))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _forward(self, client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(*self._upstream)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter, held: bool) -> None:
            try:
                while data := await src.read(65536):
                    if held:
                        await self.flowing.wait()
                    dst.write(data)
                    await dst.drain()
            finally:
                dst.close()

        await asyncio.gather(pump(client_r, server_w, True), pump(server_r, client_w, False),
                             return_exceptions=True)


@contextlib.asynccontextmanager
async def _behind_proxy(kube: Gateway, kubeconfig: Path) -> AsyncIterator[tuple[StallingProxy, Gateway]]:
    """A gateway that reaches the API server through a `StallingProxy`: a partition the test turns on and off."""
    async with StallingProxy(kube.host) as proxy:
        cfg = await load_configuration(str(kubeconfig))
        cfg.host = proxy.url
        async with Gateway(cfg) as gateway:
            yield proxy, gateway


async def _until_leading(elector: LeaderElector, leading: bool) -> None:
    async with asyncio.timeout(scaled(30)):
        while elector.leading() != leading:
            await asyncio.sleep(0.01)


async def _clients(kube: Gateway, namespace: str) -> list[str]:
    names = [f"c{i}" for i in range(WRITE_CONCURRENCY + 6)]
    for name in names:
        await kube.create(CLIENTS, namespace, {"apiVersion": CLIENT.api_version, "kind": "Client",
                                               "metadata": {"name": name}})
    return names


async def _written_by(kube: Gateway, namespace: str, names: list[str], writer: str = "partitioned") -> set[str]:
    """The clients whose label says `writer`'s write landed."""
    return {name for name in names if ((await kube.get(CLIENTS, namespace, name))["metadata"].get("labels") or {})
            .get("written-by") == writer}


async def test_a_partitioned_leader_sends_no_write_after_its_deadline_and_none_once_another_took_over(
    kube: Gateway, kubeconfig: Path, namespace: str
) -> None:
    """The leader's connection to the API server stalls: its renewals fail, and the writes it made just
    before wait for a slot or a connection. At its renew deadline its fence closes: a write still waiting is
    not sent. Another replica takes the Lease once it ran out; when the connection flows again, the first
    finds the Lease written by another, its term ends, and every write that waited is refused, never sent:
    only the writes that were already on the wire land (what the resourceVersion preconditions are for)."""
    names = await _clients(kube, namespace)
    settings = _settings()
    async with _behind_proxy(kube, kubeconfig) as (proxy, partitioned):
        elector = LeaderElector(partitioned, OPS, settings, identity="partitioned")
        second = LeaderElector(kube, OPS, settings, identity="second")
        api = GatewayApi(partitioned, fence=elector.fence)
        async with running(elector.run()):
            term = await asyncio.wait_for(elector.wait_leading(), scaled(10))
            proxy.flowing.clear()
            writes = {name: asyncio.create_task(api.merge_patch(CLIENT, namespace, name, {
                "metadata": {"labels": {"written-by": "partitioned"}}})) for name in names}
            async with running(second.run()):
                await asyncio.wait_for(second.wait_leading(), scaled(30))
                assert not elector.leading()
                proxy.flowing.set()
                await asyncio.wait_for(elector.wait_lost(term), scaled(30))
                results = dict(zip(writes, await asyncio.gather(*writes.values(), return_exceptions=True),
                                   strict=True))

    landed = {n for n, r in results.items() if isinstance(r, dict)}
    refused = {n for n, r in results.items() if isinstance(r, NotLeader)}
    assert landed | refused == set(names) and len(refused) >= len(names) - WRITE_CONCURRENCY, results
    assert await _written_by(kube, namespace, names) == landed  # a write refused by the fence was never sent


async def test_a_leader_cut_off_past_its_deadline_resumes_its_term_when_nobody_else_took_the_lease(
    kube: Gateway, kubeconfig: Path, namespace: str
) -> None:
    """The same partition with no other replica: past its renew deadline the leader sends nothing, but its
    term does not end (its actors would all restart). Once the connection flows, a renewal under its last
    write's resourceVersion proves that nobody wrote the Lease meanwhile: the same term goes on, and the
    writes that waited are sent then."""
    names = await _clients(kube, namespace)
    settings = _settings()
    async with _behind_proxy(kube, kubeconfig) as (proxy, partitioned):
        elector = LeaderElector(partitioned, OPS, settings, identity="partitioned")
        api = GatewayApi(partitioned, fence=elector.fence)
        async with running(elector.run()):
            term = await asyncio.wait_for(elector.wait_leading(), scaled(10))
            lost = asyncio.create_task(elector.wait_lost(term))
            proxy.flowing.clear()
            writes = [asyncio.create_task(api.merge_patch(CLIENT, namespace, name, {
                "metadata": {"labels": {"written-by": "partitioned"}}})) for name in names]
            await _until_leading(elector, False)
            await asyncio.sleep(settings.lease_duration)  # past the deadline and the lease itself
            assert not any(w.done() for w in writes)
            proxy.flowing.set()
            await _until_leading(elector, True)
            await asyncio.wait_for(asyncio.gather(*writes), scaled(30))
            assert not lost.done() and await elector.wait_leading() == term
            lost.cancel()

    assert await _written_by(kube, namespace, names) == set(names)
    assert (await _holder(kube, settings.name))["holderIdentity"] == "partitioned"


async def test_a_leader_paused_past_its_deadline_sends_the_writes_asked_as_it_resumes_in_the_same_term(
    kube: Gateway, namespace: str
) -> None:
    """The whole process paused (the event loop blocked, as SIGSTOP or a long collection looks) past its renew
    deadline, within its lease, with no other replica. The writes its actors ask for as it resumes, before
    the election's own task got to run, wait for the renewal that resumes the term and are sent then: none is
    refused as if the term had ended (an actor stopped, and restarted, for a pause the term survived)."""
    names = await _clients(kube, namespace)
    settings = _settings()
    elector = LeaderElector(kube, OPS, settings, identity="paused")
    api = GatewayApi(kube, fence=elector.fence)
    async with running(elector.run()):
        term = await asyncio.wait_for(elector.wait_leading(), scaled(10))
        lost = asyncio.create_task(elector.wait_lost(term))
        time.sleep(settings.renew_deadline + 0.3)  # paused: no task runs, the clocks go on
        assert not elector.leading()
        writes = [asyncio.create_task(api.merge_patch(CLIENT, namespace, name, {
            "metadata": {"labels": {"written-by": "paused"}}})) for name in names]  # first to run on resuming
        await asyncio.wait_for(asyncio.gather(*writes), scaled(30))
        assert not lost.done() and await elector.wait_leading() == term
        lost.cancel()
    assert await _written_by(kube, namespace, names, "paused") == set(names)


async def test_a_leader_cut_off_while_its_lease_was_deleted_ends_its_term_and_leads_again(
    kube: Gateway, kubeconfig: Path
) -> None:
    """Past its renew deadline the leader waits for a renewal under its last write's resourceVersion; if the
    Lease is gone meanwhile (deleted), no renewal can succeed: the term ends, and a campaign creates the Lease
    again, rather than the only replica waiting for ever with its writes held."""
    settings = _settings()
    async with _behind_proxy(kube, kubeconfig) as (proxy, partitioned):
        elector = LeaderElector(partitioned, OPS, settings, identity="cut-off")
        async with running(elector.run()):
            term = await asyncio.wait_for(elector.wait_leading(), scaled(10))
            proxy.flowing.clear()
            await _until_leading(elector, False)
            await kube.delete(COORDINATION_LEASE, OPS, settings.name)
            proxy.flowing.set()
            await asyncio.wait_for(elector.wait_lost(term), scaled(30))
            elector.stood_down()  # as the operator does once the term's actors stopped
            assert await asyncio.wait_for(elector.wait_leading(), scaled(30)) == term + 1
    assert (await _holder(kube, settings.name))["holderIdentity"] == "cut-off"


def test_settings_refuse_a_renew_deadline_that_does_not_fence() -> None:
    with pytest.raises(ValueError, match="lease-duration"):
        ElectionSettings(lease_duration=10, renew_deadline=10)
    with pytest.raises(ValueError, match="retry-period"):
        ElectionSettings(renew_deadline=2, retry_period=2)


# --- the probes ----------------------------------------------------------------------------------


@contextlib.asynccontextmanager
async def _operator(kubeconfig: Path, **config: Any) -> AsyncIterator[tuple[Operator, CollectorRegistry]]:
    """An in-process operator with a connection and metrics of its own, as `lessor run` has;
    `_stop(op)` stops it early, as SIGTERM does."""
    registry = CollectorRegistry()
    async with await Gateway.connect(str(kubeconfig), registry=registry) as gateway:
        op = Operator(OperatorConfig(operator_namespace=OPS, bind_address="127.0.0.1", health_port=free_port(),
                                     metrics_port=free_port(), **config), gateway, registry)
        _RUNNING[id(op)] = asyncio.create_task(op.run())
        try:
            yield op, registry
        finally:
            await _stop(op)


_RUNNING: dict[int, asyncio.Task[None]] = {}


async def _stop(op: Operator) -> None:
    task = _RUNNING.pop(id(op), None)
    if task is not None:
        await cancelled(task)


async def _held_elsewhere(kube: Gateway) -> ElectionSettings:
    """Election settings whose Lease another holder keeps for an hour: the operator under test only
    follows, so it never writes to the shared control plane."""
    settings = _settings()
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    await kube.create(COORDINATION_LEASE, OPS, {
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease", "metadata": {"name": settings.name},
        "spec": {"holderIdentity": "somebody-else", "leaseDurationSeconds": 3600, "renewTime": now}})
    return settings


async def test_while_the_event_loop_is_blocked_healthz_fails_and_readyz_holds_both_answered_at_once(
    kube: Gateway, kubeconfig: Path
) -> None:
    settings = await _held_elsewhere(kube)
    async with _operator(kubeconfig, leader_election=settings, max_loop_lag=0.5) as (op, registry):
        url = f"http://127.0.0.1:{op.config.health_port}"
        assert await _poll(f"{url}/healthz", 200) == "ok\n"
        assert "(follower)" in await _poll(f"{url}/readyz", 200)

        def probe_at(delay: float, path: str) -> tuple[int, str, float]:
            time.sleep(delay)  # the kubelet's probe arrives while the loop is blocked
            status, body = _get(f"{url}{path}")
            return status, body, time.monotonic()

        loop = asyncio.get_running_loop()
        ready = loop.run_in_executor(None, probe_at, 0.3, "/readyz")
        live = loop.run_in_executor(None, probe_at, 1.2, "/healthz")  # past --max-loop-lag 0.5 s into the block
        time.sleep(2.0)  # what a catastrophic regex (or a CPU starved of cores) does to the loop
        unblocked = time.monotonic()
        (ready_status, ready_body, ready_at), (status, body, live_at) = await ready, await live
        # Answered by the probes' own thread while the loop was still blocked: the API server answers, the
        # caches are synced, so the replica stays ready; liveness tells the blocked loop by its lag.
        assert ready_status == 200 and "caches synced" in ready_body and ready_at < unblocked, ready_body
        assert status == 503 and "event loop lag" in body and live_at < unblocked, body
        assert await _poll(f"{url}/healthz", 200) == "ok\n"
        assert (registry.get_sample_value("lessor_event_loop_lag_seconds_bucket", {"le": "+Inf"}) or 0) > 0
        assert (registry.get_sample_value("lessor_event_loop_lag_seconds_bucket", {"le": "0.5"}) or 0) < \
            (registry.get_sample_value("lessor_event_loop_lag_seconds_bucket", {"le": "2.5"}) or 0)
        assert registry.get_sample_value("lessor_leader") == 0


async def test_failed_watches_are_counted_by_http_code(kube: Gateway, kubeconfig: Path) -> None:
    registry = CollectorRegistry()
    async with await Gateway.connect(str(kubeconfig), registry=registry) as gateway:
        missing = Resource("lessor.dev", "v1alpha1", "Missing", "missings")
        informer = Informer(gateway, missing, lambda _: None, retry_delay=0.05)
        task = asyncio.create_task(informer.run())
        try:
            async with asyncio.timeout(scaled(10)):
                while not registry.get_sample_value("lessor_watch_failures_total",
                                                    {"kind": "Missing", "code": "404"}):
                    await asyncio.sleep(0.05)
        finally:
            await cancelled(task)


@pytest.mark.apiserver
async def test_readyz_fails_while_the_api_server_is_stopped_and_recovers(tmp_path: Path) -> None:
    """SIGSTOP, as a frozen API server or a partition looks: connections stay open, nothing answers."""
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp:
        apiserver = next(c.process for c in cp._children if c.name == "kube-apiserver")
        assert apiserver is not None
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=lambda _: None)
            async with _operator(cp.kubeconfig, api_unreachable_timeout=2.0,
                                 watch_inactivity_timeout=1.0) as (op, registry):
                url = f"http://127.0.0.1:{op.config.health_port}/readyz"
                assert "caches synced (leader)" in await _poll(url, 200)
                apiserver.send_signal(signal.SIGSTOP)
                try:
                    body = await _poll(url, 503, timeout=30)
                    assert "the API server has not answered for" in body, body
                    async with asyncio.timeout(scaled(30)):  # the watches time out, and are counted
                        while not registry.get_sample_value("lessor_watch_failures_total",
                                                            {"kind": "Exporter", "code": "timeout"}):
                            await asyncio.sleep(0.1)
                finally:
                    apiserver.send_signal(signal.SIGCONT)
                assert "caches synced" in await _poll(url, 200, timeout=60)


# --- the command line ------------------------------------------------------------------------------


def test_run_elects_by_default_and_refuses_settings_that_do_not_fence(tmp_path: Path) -> None:
    import subprocess
    import sys

    from lessor.cli import build_parser

    args = build_parser().parse_args(["run"])
    assert (args.leader_elect, args.leader_elect_lease_duration, args.leader_elect_renew_deadline,
            args.leader_elect_retry_period) == (True, 15.0, 10.0, 2.0)
    assert build_parser().parse_args(["run", "--no-leader-elect"]).leader_elect is False
    out = subprocess.run([sys.executable, "-m", "lessor", "run", "--kubeconfig", str(tmp_path / "k"),
                          "--leader-elect-lease-duration", "5s", "--leader-elect-renew-deadline", "5s"],
                         cwd=tmp_path, capture_output=True, text=True, timeout=scaled(60))
    assert out.returncode == 1 and "must be longer than --leader-elect-renew-deadline" in out.stderr, out.stderr
    help_text = subprocess.run([sys.executable, "-m", "lessor", "bench", "failover", "--help"], cwd=tmp_path,
                               capture_output=True, text=True, timeout=scaled(60))
    assert help_text.returncode == 0 and "--kills" in help_text.stdout


# --- replicas in one process: who acts, and what a takeover costs ------------------------------------

WRITES = ("create", "update", "patch", "delete")


def _writes(gateway: Gateway) -> int:
    """Requests that change something, apart from the election's own (its Lease, and the SelfSubjectReview,
    a `create` that stores nothing, by which a candidate learns who it is for the Lease's annotations)."""
    return sum(n for (verb, kind), n in gateway.requests.items()
               if verb in WRITES and kind not in ("Lease.coordination.k8s.io", "SelfSubjectReview"))


async def _ready_lease(kube: Gateway, ns: str, name: str) -> None:
    from tests.leasing.test_chaos import API, _cond

    await kube.create(LEASE, ns, {"apiVersion": API, "kind": "Lease", "metadata": {"name": name}, "spec": {
        "clientRef": {"name": "qa"}, "selector": {"matchLabels": {"board": "rpi"}}}})
    async with asyncio.timeout(scaled(30)):
        while _cond(await kube.get(LEASE, ns, name), "Ready") != ("True", "Ready"):
            await asyncio.sleep(0.1)


@pytest.mark.apiserver
async def test_a_follower_only_watches_and_takes_over_relisting_only_the_commit_points(tmp_path: Path) -> None:
    from tests.leasing.test_chaos import _lab

    settings = _settings(lease_duration=30.0, renew_deadline=3.0)  # only a release explains a quick takeover
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp, \
            await Gateway.connect(str(cp.kubeconfig)) as kube:
        await install(kube, OPS, progress=lambda _: None)
        ns = f"lab-{uuid.uuid4().hex[:6]}"
        await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        await _lab(kube, ns)
        async with _operator(cp.kubeconfig, leader_election=settings) as (first, _):
            await asyncio.wait_for(first.leadership.wait_leading(), scaled(30))
            async with _operator(cp.kubeconfig, leader_election=settings) as (second, registry):
                await _poll(f"http://127.0.0.1:{second.config.health_port}/readyz", 200)
                await _ready_lease(kube, ns, "granted-by-first")
                assert second.system is not None and second.system.live() == ["topology"]
                assert _writes(second.gateway) == 0 and registry.get_sample_value("lessor_leader") == 0
                relists = {i.resource.kind: i.relists for i in second.informers}

                await _stop(first)  # as SIGTERM does: actors stop, then the Lease is released
                await asyncio.wait_for(second.leadership.wait_leading(), scaled(20, at_most=25))  # within the 30 s lease
                await _ready_lease(kube, ns, "granted-by-second")
                assert _writes(second.gateway) > 0 and registry.get_sample_value("lessor_leader") == 1
                # Only the Exporters and ResourceHandles are listed afresh, once: the commit points of
                # leases and claims (`Operator._refresh_commit_points`); every other cache goes on from its watch.
                assert {i.resource.kind: i.relists for i in second.informers} == \
                    {**relists, "Exporter": relists["Exporter"] + 1, "ResourceHandle": relists["ResourceHandle"] + 1}
