"""What the gateway keeps and how it talks, for clusters of many objects: no managedFields in the
caches, one HTTP session whose connections are reused, no environment looked up per request."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from lessor.gateway import Gateway, Informer, WatchEvent
from lessor.gateway.client import READ_CONCURRENCY, load_configuration
from lessor.gateway.informer import LAST_APPLIED
from lessor.gateway.resources import CONFIGMAP, EXPORTER
from tests.slowness import scaled
from tests.tasks import cancelled


def annotated(namespace: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace,
                     "annotations": {LAST_APPLIED: '{"a": "copy"}', "example.com/kept": "yes"}},
        "data": {"v": "1"},
    }


async def cached_then_watched(kube: Gateway, namespace: str, watched: dict[str, Any],
                              on_event: Callable[[WatchEvent], Any]) -> Informer:
    """An informer of the namespace's ConfigMaps that listed what is there, then saw `watched` created; stopped."""
    informer = Informer(kube, CONFIGMAP, on_event, namespace=namespace)
    task = asyncio.create_task(informer.run())
    try:
        await asyncio.wait_for(informer.synced.wait(), scaled(20))
        await kube.create(CONFIGMAP, namespace, watched)
        async with asyncio.timeout(scaled(20)):
            while (namespace, watched["metadata"]["name"]) not in informer.store:
                await asyncio.sleep(0.05)
    finally:
        await cancelled(task)
    return informer


async def test_cached_objects_carry_no_managed_fields_on_list_and_watch(kube: Gateway, namespace: str) -> None:
    await kube.create(CONFIGMAP, namespace, annotated(namespace, "listed"))
    seen: list[WatchEvent] = []
    informer = await cached_then_watched(kube, namespace, annotated(namespace, "watched"), seen.append)
    server = await kube.get(CONFIGMAP, namespace, "listed")
    assert server["metadata"]["managedFields"], "the API server keeps its managedFields"
    for name in ("listed", "watched"):
        cached = informer.store[(namespace, name)]
        assert "managedFields" not in cached["metadata"]
        assert cached["metadata"]["annotations"] == {"example.com/kept": "yes"}
        assert cached["data"] == {"v": "1"}
    assert all("managedFields" not in e.object["metadata"] for e in seen)


async def test_one_session_reuses_its_connection_and_uses_no_thread_nor_proxy_variables(
    kubeconfig: Path, namespace: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
) -> None:
    # Were the environment trusted, every request would go to this dead proxy and fail.
    monkeypatch.setenv("HTTPS_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("HTTP_PROXY", "http://127.0.0.1:9")
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    (tmp_path / "netrc").write_text("default login someone password secret\n")
    loop = asyncio.get_running_loop()
    offloaded: list[object] = []  # netrc lookups and DNS resolution go to the loop's thread pool
    run_in_executor = loop.run_in_executor
    monkeypatch.setattr(loop, "run_in_executor", lambda *a: offloaded.append(a[1]) or run_in_executor(*a))
    async with Gateway(await load_configuration(str(kubeconfig))) as gw:
        assert gw.host.startswith("https://127.0.0.1:"), "the local API server is addressed by IP"
        session = gw._http
        assert session.trust_env is False
        for i in range(5):
            await gw.create(CONFIGMAP, namespace, {"metadata": {"name": f"c{i}"}, "data": {"v": str(i)}})
            assert (await gw.get(CONFIGMAP, namespace, f"c{i}"))["data"] == {"v": str(i)}
        assert gw._http is session
        idle = sum(len(conns) for conns in session.connector._conns.values())
        assert idle == 1, f"sequential requests should share one kept-alive connection, found {idle}"
    assert offloaded == [], "no request should need a thread (no netrc, no DNS for an IP address)"


async def test_reads_of_lessors_objects_queue_for_a_slot_and_other_reads_do_not(
        kubeconfig: Path, namespace: str) -> None:
    async with Gateway(await load_configuration(str(kubeconfig))) as gw:
        await gw.create(EXPORTER, namespace, {"apiVersion": EXPORTER.api_version, "kind": "Exporter",
                                              "metadata": {"name": "e"}})
        await gw.create(CONFIGMAP, namespace, {"metadata": {"name": "c"}})
        in_flight: dict[str, int] = {"Exporter": 0, "ConfigMap": 0}
        peak = dict(in_flight)
        send = gw._send

        async def counted(method: str, path: str, *rest: Any) -> Any:
            kind = "Exporter" if "/exporters/" in path else "ConfigMap"
            in_flight[kind] += 1
            peak[kind] = max(peak[kind], in_flight[kind])
            try:
                return await send(method, path, *rest)
            finally:
                in_flight[kind] -= 1

        gw._send = counted  # type: ignore[method-assign]
        await asyncio.gather(*(gw.get(EXPORTER, namespace, "e") for _ in range(READ_CONCURRENCY * 4)),
                             *(gw.get(CONFIGMAP, namespace, "c") for _ in range(READ_CONCURRENCY * 2)))
    assert peak["Exporter"] == READ_CONCURRENCY
    assert peak["ConfigMap"] > READ_CONCURRENCY, "reads of other kinds (the leader's Lease) never wait for a slot"
    assert gw.requests[("get", "Exporter")] == READ_CONCURRENCY * 4


async def test_equal_values_of_cached_objects_are_one_string_and_nothing_else_changes(
        kube: Gateway, namespace: str) -> None:
    """Listed and watched objects share each equal string value (apiVersion, namespace, a label's value, a
    data value); the cache still holds every field the server has but managedFields."""
    def labelled(name: str) -> dict[str, Any]:
        return {"apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": name, "namespace": namespace, "labels": {"board": "rpi-" + namespace}},
                "data": {"v": "a value of " + namespace}}

    for name in ("listed-a", "listed-b"):
        await kube.create(CONFIGMAP, namespace, labelled(name))
    informer = await cached_then_watched(kube, namespace, labelled("watched"), lambda event: None)
    cached = [informer.store[(namespace, name)] for name in ("listed-a", "listed-b", "watched")]
    for read in (lambda o: o["apiVersion"], lambda o: o["metadata"]["namespace"],
                 lambda o: o["metadata"]["labels"]["board"], lambda o: o["data"]["v"]):
        assert len({id(read(obj)) for obj in cached}) == 1
    for obj in cached:
        server = await kube.get(CONFIGMAP, namespace, obj["metadata"]["name"])
        del server["metadata"]["managedFields"]
        assert obj == server
