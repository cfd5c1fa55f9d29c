"""The gateway against the real API server: ordered events, 410 Gone, silent watches, writes."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from lessor.gateway import ApiError, Gateway, Informer, WatchEvent
from lessor.gateway.resources import CONFIGMAP, EXPORTER
from tests.slowness import scaled
from tests.tasks import cancelled


def configmap(namespace: str, name: str, **data: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, "namespace": namespace}, "data": data}


class Recorder:
    """Collects events and lets a test wait for a condition on them."""

    def __init__(self) -> None:
        self.events: list[WatchEvent] = []
        self.changed = asyncio.Condition()

    async def __call__(self, event: WatchEvent) -> None:
        async with self.changed:
            self.events.append(event)
            self.changed.notify_all()

    async def wait_for(self, predicate: Any, timeout: float = 20.0) -> None:
        async with self.changed:
            await asyncio.wait_for(self.changed.wait_for(lambda: predicate(self.events)), scaled(timeout))

    def of(self, name: str) -> list[tuple[str, str]]:
        return [(e.type, e.object.get("data", {}).get("v", "")) for e in self.events if e.key[1] == name]


@contextlib.asynccontextmanager
async def running(informer: Informer) -> AsyncIterator[asyncio.Task[None]]:
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), scaled(20))
        yield task
    finally:
        await cancelled(task)


async def test_create_update_delete_arrive_in_order(kube: Gateway, namespace: str) -> None:
    rec = Recorder()
    informer = Informer(kube, CONFIGMAP, rec, namespace=namespace)
    async with running(informer):
        await kube.create(CONFIGMAP, namespace, configmap(namespace, "a", v="1"))
        for v in ("2", "3"):
            await kube.merge_patch(CONFIGMAP, namespace, "a", {"data": {"v": v}})
        await kube.delete(CONFIGMAP, namespace, "a")
        await rec.wait_for(lambda evs: any(e.type == "DELETED" for e in evs))
    assert rec.of("a") == [("ADDED", "1"), ("MODIFIED", "2"), ("MODIFIED", "3"), ("DELETED", "3")]
    assert "a" not in {k[1] for k in informer.store}


async def test_initial_list_delivers_existing_objects_then_syncs(kube: Gateway, namespace: str) -> None:
    for i in range(3):
        await kube.create(CONFIGMAP, namespace, configmap(namespace, f"pre-{i}", v=str(i)))
    rec = Recorder()
    informer = Informer(kube, CONFIGMAP, rec, namespace=namespace)
    async with running(informer):
        assert sorted(e.key[1] for e in rec.events if e.key[1].startswith("pre-")) == ["pre-0", "pre-1", "pre-2"]
        assert all(e.type == "ADDED" for e in rec.events)


def podtemplate(namespace: str, name: str, v: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "PodTemplate", "metadata": {"name": name, "namespace": namespace,
            "labels": {"v": v}}, "template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}


async def test_410_gone_relists_and_reports_what_changed_meanwhile(
    kube: Gateway, namespace: str, controlplane: Any
) -> None:
    """After a long disconnect the server answers 410 Gone; the relist must deliver a DELETED
    for what vanished, the final state of what changed, and what was born meanwhile."""
    templates = await kube.resolve("v1", "PodTemplate")  # served without watch cache in the tests
    rec = Recorder()
    informer = Informer(kube, templates, rec, namespace=namespace)
    await kube.create(templates, namespace, podtemplate(namespace, "stays", "1"))
    await kube.create(templates, namespace, podtemplate(namespace, "goes", "1"))
    async with running(informer):
        await rec.wait_for(lambda evs: {e.key[1] for e in evs} >= {"stays", "goes"})
    await kube.merge_patch(templates, namespace, "stays", {"metadata": {"labels": {"v": "final"}}})
    await kube.delete(templates, namespace, "goes")
    await kube.create(templates, namespace, podtemplate(namespace, "new", "1"))
    await controlplane.compact()  # the informer's resourceVersion is gone from etcd
    before = len(rec.events)
    async with running(informer):
        await rec.wait_for(lambda evs: {e.key[1] for e in evs[before:]} >= {"stays", "goes", "new"})
    assert informer.expirations >= 1, "the server did not answer 410 Gone for a compacted resourceVersion"
    tail = [(e.type, e.key[1], e.object["metadata"]["labels"]["v"]) for e in rec.events[before:]]
    assert sorted(tail) == [("ADDED", "new", "1"), ("DELETED", "goes", "1"), ("MODIFIED", "stays", "final")]
    assert sorted(k[1] for k in informer.store) == ["new", "stays"]


class StallingProxy:
    """A TCP proxy whose established connections can be frozen, like a half-dead load balancer."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self.upstream = upstream
        self.frozen = asyncio.Event()
        self.connections = 0
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        return self.server.sockets[0].getsockname()[1]

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        generation_frozen = self.frozen.is_set()
        up_reader, up_writer = await asyncio.open_connection(*self.upstream)

        async def pump(src: asyncio.StreamReader, dst: asyncio.StreamWriter) -> None:
            with contextlib.suppress(ConnectionError, asyncio.CancelledError):
                while data := await src.read(65536):
                    if self.frozen.is_set() and not generation_frozen:
                        await asyncio.Event().wait()  # swallow: the stream goes silent, never closes
                    dst.write(data)
                    await dst.drain()

        await asyncio.gather(pump(reader, up_writer), pump(up_reader, writer))

    async def close(self) -> None:
        if self.server:
            self.server.close()


async def test_silent_watch_is_reconnected_without_losing_events(
    kube: Gateway, namespace: str, kubeconfig: Any, tmp_path: Any
) -> None:
    import yaml

    config = yaml.safe_load(kubeconfig.read_text())
    server = config["clusters"][0]["cluster"]["server"]
    host, port = server.removeprefix("https://").split(":")
    proxy = StallingProxy((host, int(port)))
    proxy_port = await proxy.start()
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{proxy_port}"
    proxied = tmp_path / "kubeconfig"
    proxied.write_text(yaml.safe_dump(config))
    rec = Recorder()
    async with await Gateway.connect(str(proxied)) as gw:
        informer = Informer(gw, CONFIGMAP, rec, namespace=namespace, inactivity_timeout=1.0)
        try:
            async with running(informer):
                proxy.frozen.set()  # the open watch goes silent; new connections still pass
                await kube.create(CONFIGMAP, namespace, configmap(namespace, "during-silence", v="1"))
                await rec.wait_for(lambda evs: any(e.key[1] == "during-silence" for e in evs))
        finally:
            await proxy.close()
    assert informer.reconnects >= 1
    assert rec.of("during-silence") == [("ADDED", "1")]


async def test_json_patch_test_op_is_a_compare_and_set(kube: Gateway, namespace: str) -> None:
    await kube.create(CONFIGMAP, namespace, configmap(namespace, "cas", v="free"))
    claim = [{"op": "test", "path": "/data/v", "value": "free"}, {"op": "replace", "path": "/data/v", "value": "mine"}]
    await kube.json_patch(CONFIGMAP, namespace, "cas", claim)
    with pytest.raises(ApiError) as err:
        await kube.json_patch(CONFIGMAP, namespace, "cas", claim)
    assert err.value.invalid
    assert (await kube.get(CONFIGMAP, namespace, "cas"))["data"]["v"] == "mine"


async def test_a_stale_write_is_a_conflict_and_a_fresh_one_lands(kube: Gateway, namespace: str) -> None:
    """What every commit point relies on: a write carrying a resourceVersion fails with 409 once another
    write landed since that read, and succeeds after reading again."""
    await kube.create(CONFIGMAP, namespace, configmap(namespace, "counter", n="0"))
    first, second = [await kube.get(CONFIGMAP, namespace, "counter") for _ in range(2)]
    first["data"]["n"] = "1"
    await kube.replace(CONFIGMAP, namespace, "counter", first)
    second["data"]["n"] = "1"
    with pytest.raises(ApiError) as err:
        await kube.replace(CONFIGMAP, namespace, "counter", second)
    assert err.value.conflict
    fresh = await kube.get(CONFIGMAP, namespace, "counter")
    fresh["data"]["n"] = str(int(fresh["data"]["n"]) + 1)
    await kube.replace(CONFIGMAP, namespace, "counter", fresh)
    assert (await kube.get(CONFIGMAP, namespace, "counter"))["data"]["n"] == "2"


async def test_status_patch_and_counting_by_verb_and_kind(kube: Gateway, namespace: str) -> None:
    await kube.create(EXPORTER, namespace, {
        "apiVersion": "lessor.dev/v1alpha1", "kind": "Exporter", "metadata": {"name": "e1", "labels": {"board": "x"}},
    })
    before = kube.requests[("patch", "Exporter")]
    out = await kube.patch_status(EXPORTER, namespace, "e1", {"exporterStatus": "Available"})
    assert out["status"]["exporterStatus"] == "Available"
    assert out["spec"]["enabled"] is True, "the CRD defaults spec.enabled to true"
    assert kube.requests[("patch", "Exporter")] == before + 1


async def test_errors_carry_the_servers_reason(kube: Gateway, namespace: str) -> None:
    with pytest.raises(ApiError) as err:
        await kube.get(CONFIGMAP, namespace, "missing")
    assert err.value.not_found and "missing" in err.value.message


async def test_api_calls_are_client_spans(kubeconfig: Any, namespace: str) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    from lessor.gateway.client import load_configuration

    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    async with Gateway(await load_configuration(str(kubeconfig)), tracer_provider=provider) as gw:
        await gw.create(CONFIGMAP, namespace, configmap(namespace, "traced", v="1"))
        with pytest.raises(ApiError):
            await gw.get(CONFIGMAP, namespace, "absent")
    (create, get) = spans.get_finished_spans()
    assert create.name == "create ConfigMap" and create.kind is SpanKind.CLIENT
    assert create.attributes["http.request.method"] == "POST"
    assert get.attributes["http.response.status_code"] == 404


async def test_a_handler_that_fails_on_one_object_does_not_hold_back_the_others(
    kube: Gateway, namespace: str, caplog: pytest.LogCaptureFixture
) -> None:
    """One object whose content makes the handler raise used to make the informer relist, fail again, forever."""
    rec = Recorder()

    async def fussy(event: WatchEvent) -> None:
        if event.object.get("data", {}).get("v") == "poison":
            raise ValueError("cannot handle this one")
        await rec(event)

    informer = Informer(kube, CONFIGMAP, fussy, namespace=namespace, retry_delay=0.01)
    await kube.create(CONFIGMAP, namespace, configmap(namespace, "before", v="poison"))
    async with running(informer):
        await kube.create(CONFIGMAP, namespace, configmap(namespace, "pill", v="poison"))
        await kube.create(CONFIGMAP, namespace, configmap(namespace, "after", v="1"))
        await kube.merge_patch(CONFIGMAP, namespace, "after", {"data": {"v": "2"}})
        await rec.wait_for(lambda evs: ("MODIFIED", "2") in rec.of("after"))

    assert rec.of("after") == [("ADDED", "1"), ("MODIFIED", "2")]
    assert (informer.relists, informer.handler_failures) == (1, 2)
    assert {"before", "pill", "after"} <= {name for _, name in informer.store}
    assert "handling ADDED" in caplog.text and "cannot handle this one" in caplog.text


async def test_refresh_lists_afresh_then_watches_on(kube: Gateway, namespace: str) -> None:
    """What a new leader asks of the ResourceHandles' informer: a consistent listing, delivered before `refresh`
    returns, and the watch going on after it (nothing lost, nothing delivered twice)."""
    rec = Recorder()
    informer = Informer(kube, CONFIGMAP, rec, namespace=namespace)
    async with running(informer):
        await kube.create(CONFIGMAP, namespace, configmap(namespace, "a", v="1"))
        await rec.wait_for(lambda evs: any(e.key[1] == "a" for e in evs))
        relists = informer.relists
        await asyncio.wait_for(informer.refresh(), scaled(20))
        assert informer.relists == relists + 1
        assert rec.of("a") == [("ADDED", "1")]  # unchanged since: the listing delivers nothing again
        await kube.merge_patch(CONFIGMAP, namespace, "a", {"data": {"v": "2"}})
        await kube.create(CONFIGMAP, namespace, configmap(namespace, "b", v="1"))
        await rec.wait_for(lambda evs: any(e.key[1] == "b" for e in evs))
        await rec.wait_for(lambda evs: ("MODIFIED", "2") in [(e.type, e.object.get("data", {}).get("v")) for e in evs
                                                              if e.key[1] == "a"])
        assert rec.of("a") == [("ADDED", "1"), ("MODIFIED", "2")] and rec.of("b") == [("ADDED", "1")]
