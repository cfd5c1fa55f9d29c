"""The leader's fence is asked when a write is sent, not when it queues: a write that waited for a slot or a
connection while the term ran out is refused unsent, and the step-down drops the writes still queued.

A fake API server records every request it receives and holds its answers until told, so the gateway's
24 write slots (or its connection pool) can be kept full; the fence runs on a fake clock, so "the deadline
passed" and "the process was paused" are one assignment, never a race with the machine's load.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from kubernetes_asyncio.client import Configuration

from lessor.actors.api import CLIENT
from lessor.app.api_adapter import GatewayApi
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import Gateway
from lessor.gateway.client import FIELD_MANAGER, WRITE_CONCURRENCY
from lessor.gateway.resources import CONFIGMAP, LESSOR_RESOURCES
from lessor.leadership.election import NotLeader, TermFence
from tests.slowness import scaled

CLIENTS = next(r for r in LESSOR_RESOURCES if r.kind == "Client")
NS = "lab"


@dataclass
class FakeApiServer:
    """Answers every request with a 200 once `release` is set; `received` is what reached it."""

    url: str = ""
    received: list[tuple[str, str]] = field(default_factory=list)
    release: asyncio.Event = field(default_factory=asyncio.Event)
    # GETs answer at once, with an object whose fields lessor's create owns (the apply's hand-over reads it).
    managed: list[dict[str, Any]] = field(default_factory=lambda: [
        {"manager": FIELD_MANAGER, "operation": "Update", "fieldsV1": {"f:data": {}}}])

    async def handle(self, request: web.Request) -> web.Response:
        if request.method == "GET":
            return web.json_response({"metadata": {"name": "x", "resourceVersion": "1",
                                                   "managedFields": self.managed}})
        self.received.append((request.method, request.path))
        await request.read()
        await self.release.wait()
        return web.json_response({"metadata": {"name": request.path.rsplit("/", 1)[-1], "resourceVersion": "2"}})

    def sent(self, name: str) -> bool:
        return any(path.endswith(f"/{name}") or path.endswith(f"/{name}/status") for _, path in self.received)


@contextlib.asynccontextmanager
async def fake_api(pool: int | None = None) -> AsyncIterator[tuple[FakeApiServer, Gateway]]:
    server = FakeApiServer()
    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", server.handle)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    server.url = f"http://127.0.0.1:{port}"
    cfg = Configuration()
    cfg.host = server.url
    if pool is not None:
        cfg.connection_pool_maxsize = pool
    try:
        async with Gateway(cfg) as gateway:
            yield server, gateway
            server.release.set()
    finally:
        server.release.set()
        await runner.cleanup()


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def _until(check: Callable[[], bool]) -> None:
    """Wait for `check` (a generous bound only turns a hang into a failure)."""
    async with asyncio.timeout(scaled(60)):
        while not check():
            await asyncio.sleep(0.01)


def _patch(name: str) -> dict[str, Any]:
    return {"metadata": {"labels": {"written": name}}}


async def _fill_write_slots(server: FakeApiServer, gateway: Gateway) -> list[asyncio.Task[Any]]:
    """Every write slot held by a request the server has received and not answered."""
    held = [asyncio.create_task(gateway.merge_patch(CLIENTS, NS, f"held-{i}", _patch("held")))
            for i in range(WRITE_CONCURRENCY)]
    await _until(lambda: len(server.received) == WRITE_CONCURRENCY)
    return held


VERBS = ("create", "merge_patch", "json_patch", "patch_status", "delete", "apply")


def _writes(api: GatewayApi) -> dict[str, Callable[[str], Awaitable[Any]]]:
    """Every write verb an actor has, on one object named by the argument."""
    return {
        "create": lambda n: api.create(CLIENT, NS, {"metadata": {"name": n}}),
        "merge_patch": lambda n: api.merge_patch(CLIENT, NS, n, _patch(n)),
        "json_patch": lambda n: api.json_patch(CLIENT, NS, n, [{"op": "test", "path": "/metadata/resourceVersion",
                                                                "value": "1"}]),
        "patch_status": lambda n: api.patch_status(CLIENT, NS, n, {"conditions": []}),
        "delete": lambda n: api.delete(CLIENT, NS, n, resource_version="1"),
        # The apply's field hand-over (a merge patch of managedFields) queues first; neither may go out.
        "apply": lambda n: api.apply(CLIENT, NS, n, {"metadata": {"name": n}}),
    }


@pytest.mark.parametrize("verb", VERBS)
async def test_a_write_queued_for_a_slot_when_the_deadline_passes_is_never_sent(verb: str) -> None:
    clock = FakeClock()
    fence = TermFence(clock)
    fence.open_until(clock.now + 10)
    async with fake_api() as (server, gateway):
        api = GatewayApi(gateway, fence.check)
        held = await _fill_write_slots(server, gateway)
        # The create is named by its body, not its path: give it a name the server's log can show.
        writes = _writes(api)
        assert set(writes) == set(VERBS)
        queued = asyncio.create_task(writes[verb]("queued"))
        await _until(lambda: gateway.queued_writes == 1)  # past the fence's first question, waiting

        clock.now += 11  # the renew deadline passes while it waits
        server.release.set()
        with pytest.raises(NotLeader):
            await queued
        await asyncio.gather(*held)

    assert not server.sent("queued") and not any(m == "POST" for m, _ in server.received), server.received
    assert len(server.received) == WRITE_CONCURRENCY


async def test_a_pause_while_a_write_waits_for_a_connection_refuses_it_unsent() -> None:
    """One pooled connection, held: the write passed every check before the connection, then the process
    "paused" (its clock jumped past the deadline) until the connection came free. The question asked as
    the bytes go out refuses it."""
    clock = FakeClock()
    fence = TermFence(clock)
    fence.open_until(clock.now + 10)
    async with fake_api(pool=1) as (server, gateway):
        holder = asyncio.create_task(gateway.merge_patch(CONFIGMAP, NS, "holder", _patch("holder")))
        await _until(lambda: len(server.received) == 1)
        asked: list[bool] = []

        def recorded() -> None:
            asked.append(fence.is_open())
            fence.check("patch ConfigMap lab/paused")

        paused = asyncio.create_task(gateway.merge_patch(CONFIGMAP, NS, "paused", _patch("paused"), fence=recorded))
        await _until(lambda: asked == [True])  # allowed before the connection, now queued in aiohttp's pool

        clock.now += 30  # SIGSTOP ... SIGCONT: monotonic time went on
        server.release.set()
        await holder
        with pytest.raises(NotLeader):
            await paused
        assert asked == [True, False], "refused by the question asked as the bytes went out"
        # A refused request is not counted as one sent, and the connection still serves what is allowed.
        assert gateway.requests[("patch", "ConfigMap")] == 1
        fence.open_until(clock.now + 10)
        await gateway.merge_patch(CONFIGMAP, NS, "later", _patch("later"),
                                  fence=lambda: fence.check("patch ConfigMap lab/later"))

    assert [p for _, p in server.received] == ["/api/v1/namespaces/lab/configmaps/holder",
                                               "/api/v1/namespaces/lab/configmaps/later"]


async def test_the_step_down_drops_queued_writes_at_once() -> None:
    clock = FakeClock()
    fence = TermFence(clock)
    fence.open_until(clock.now + 10)
    async with fake_api() as (server, gateway):
        api = GatewayApi(gateway, fence.check)
        held = await _fill_write_slots(server, gateway)
        queued = [asyncio.create_task(api.merge_patch(CLIENT, NS, f"queued-{i}", _patch("queued")))
                  for i in range(5)]
        await _until(lambda: gateway.queued_writes == 5)

        fence.close()  # the step-down: the fence closes and the queued writes are dropped
        gateway.drop_queued_writes()
        results = await asyncio.gather(*queued, return_exceptions=True)
        assert all(isinstance(r, NotLeader) for r in results), results
        assert not any(t.done() for t in held), "dropped before any slot came free"
        server.release.set()
        await asyncio.gather(*held)

    assert not any(server.sent(f"queued-{i}") for i in range(5))


async def test_dropping_keeps_the_writes_the_fence_still_allows() -> None:
    """A wake-up is only a question: writes whose fence is open wait on, and go out when a slot frees."""
    clock = FakeClock()
    fence = TermFence(clock)
    fence.open_until(clock.now + 10)
    async with fake_api() as (server, gateway):
        api = GatewayApi(gateway, fence.check)
        held = await _fill_write_slots(server, gateway)
        queued = asyncio.create_task(api.merge_patch(CLIENT, NS, "queued", _patch("queued")))
        await _until(lambda: gateway.queued_writes == 1)

        gateway.drop_queued_writes()
        await _until(lambda: gateway.queued_writes == 1)  # asked, allowed, waiting again
        assert not queued.done()
        server.release.set()
        await asyncio.gather(queued, *held)

    assert server.sent("queued")


async def test_a_write_begun_after_the_fence_closed_never_queues() -> None:
    clock = FakeClock()
    fence = TermFence(clock)
    async with fake_api() as (server, gateway):
        api = GatewayApi(gateway, fence.check)
        with pytest.raises(NotLeader):
            await api.merge_patch(CLIENT, NS, "late", _patch("late"))
        assert gateway.queued_writes == 0 and not gateway.requests
    assert not server.received


async def test_a_suspended_write_waits_unsent_and_goes_only_if_the_fence_is_open_when_asked_again() -> None:
    """A term past its deadline and not ended (suspended): a write waits, unsent, whether it is an actor's
    (asked as it starts) or one already in the gateway (asked as it is sent). A renewal that reopened the
    fence until a deadline already past (the process paused while the renewal was answered) wakes them, and
    each asks again: still closed, it waits on. The term's end refuses them, never sent. In the next term, a
    write that waited goes once a renewal reopens the fence."""
    clock = FakeClock()
    fence = TermFence(clock)
    asked: dict[str, list[bool]] = {}

    def recorded(what: str) -> None:
        asked.setdefault(what.rsplit("/", 1)[-1], []).append(fence.is_open())
        fence.check(what)

    async with fake_api() as (server, gateway):
        server.release.set()
        api = GatewayApi(gateway, recorded)
        fence.open_until(clock.now + 10)
        fence.hold_term()
        clock.now += 11  # the renew deadline passed; the term goes on
        waiting = [asyncio.create_task(api.merge_patch(CLIENT, NS, "actor", _patch("actor"))),
                   asyncio.create_task(gateway.merge_patch(CONFIGMAP, NS, "gateway", _patch("gateway"),
                                                           fence=lambda: recorded("patch ConfigMap lab/gateway")))]
        await _until(lambda: asked == {"actor": [False], "gateway": [False]})
        fence.open_until(clock.now - 1)  # a renewal answered too late to open anything
        await _until(lambda: all(len(a) == 2 for a in asked.values()))
        assert asked == {"actor": [False, False], "gateway": [False, False]}
        assert not any(w.done() for w in waiting)
        fence.close()  # the term ended: a conflict, or the Lease gone
        for write in waiting:
            with pytest.raises(NotLeader):
                await write

        fence.open_until(clock.now + 10)  # the next term
        fence.hold_term()
        clock.now += 11
        resumed = asyncio.create_task(api.merge_patch(CLIENT, NS, "resumed", _patch("resumed")))
        await _until(lambda: "resumed" in asked)
        fence.open_until(clock.now + 10)  # a renewal under the last write's resourceVersion succeeded
        await resumed

    assert not server.sent("actor") and not server.sent("gateway") and server.sent("resumed"), server.received
