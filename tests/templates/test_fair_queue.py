"""The render threads are shared fairly between keys (issue 23): `FairQueue`, without Kubernetes."""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Callable

import pytest

from lessor.templates.budget import RENDERING, FairQueue, offload, rendering


def _holding(gate: threading.Event, started: list[str], name: str) -> Callable[[], str]:
    def work() -> str:
        started.append(name)
        gate.wait(10)
        return name
    return work


async def test_a_key_waits_behind_its_own_work_not_in_front_of_another_keys() -> None:
    queue, gate, started = FairQueue(threads=4, share=2), threading.Event(), list[str]()
    flood = [asyncio.ensure_future(queue.run("busy", _holding(gate, started, f"busy-{i}"))) for i in range(10)]
    await asyncio.sleep(0.1)
    canary = asyncio.ensure_future(queue.run("canary", _holding(gate, started, "canary")))
    await asyncio.sleep(0.1)

    assert sorted(started[:2]) == ["busy-0", "busy-1"] and started[2:] == ["canary"]  # busy holds its share only
    assert queue.waiting() == {"busy": 8}
    gate.set()
    assert await canary == "canary"
    assert await asyncio.gather(*flood) == [f"busy-{i}" for i in range(10)]  # in its own order


async def test_the_keys_that_wait_take_turns() -> None:
    queue, gate, started = FairQueue(threads=1, share=1), threading.Event(), list[str]()
    first = asyncio.ensure_future(queue.run("a", _holding(gate, started, "a-0")))
    await asyncio.sleep(0.05)
    rest = [asyncio.ensure_future(queue.run(key, _holding(gate, started, f"{key}-{i}")))
            for key, i in (("a", 1), ("a", 2), ("b", 0), ("b", 1), ("c", 0))]
    await asyncio.sleep(0.05)
    gate.set()
    await asyncio.gather(first, *rest)

    assert started == ["a-0", "a-1", "b-0", "c-0", "a-2", "b-1"]


async def test_work_cancelled_while_waiting_never_runs() -> None:
    queue, gate, started = FairQueue(threads=1, share=1), threading.Event(), list[str]()
    holding = asyncio.ensure_future(queue.run("a", _holding(gate, started, "first")))
    await asyncio.sleep(0.05)
    dropped = asyncio.ensure_future(queue.run("a", _holding(gate, started, "dropped")))
    await asyncio.sleep(0.05)
    dropped.cancel()
    gate.set()
    await holding
    await asyncio.sleep(0.1)

    assert started == ["first"]


async def test_a_key_whose_work_runs_out_of_time_gets_one_thread() -> None:
    queue = FairQueue(threads=4, share=2, slow_seconds=60)

    def spin() -> None:
        from lessor.templates import TemplateError, render_string
        try:
            render_string("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", {})
        except TemplateError:
            pass

    assert queue.limit("spinner") == 2
    began = time.monotonic()
    await queue.run("spinner", spin)

    assert time.monotonic() - began >= 2.0  # it ran to the template time limit
    assert queue.slow("spinner") and queue.limit("spinner") == 1
    assert queue.limit("other") == 2


async def test_queue_time_is_exported_by_namespace_and_the_label_stays_bounded() -> None:
    from prometheus_client import CollectorRegistry

    from lessor.metrics.render import MAX_NAMESPACES, OTHER, RenderQueueMetrics

    queue, registry = FairQueue(), CollectorRegistry()
    metrics = RenderQueueMetrics(registry, queue)
    try:
        await asyncio.gather(*(queue.run(f"ns-{i}", lambda: None) for i in range(MAX_NAMESPACES + 5)))
    finally:
        metrics.close()
    await queue.run("ns-late", lambda: None)  # closed: no longer observed

    def count(namespace: str) -> float | None:
        return registry.get_sample_value("lessor_render_queue_seconds_count", {"namespace": namespace})

    assert count("ns-0") == 1
    assert count(OTHER) == 5  # a forged review may name any namespace: past the cap they share one label
    assert count("ns-late") is None


async def test_each_operators_work_runs_in_its_own_queue_which_closes_with_it() -> None:
    """Two operators in one process (the tests run several) share no render threads: work offloaded with a
    queue, or within `rendering(queue)` (the webhook's), is that queue's; a closed queue takes no more."""
    mine, theirs = FairQueue(threads=1), FairQueue(threads=1)
    seen: dict[str, list[str]] = {"mine": [], "theirs": [], "process": []}
    mine.observers.append(lambda key, _: seen["mine"].append(key))
    theirs.observers.append(lambda key, _: seen["theirs"].append(key))
    RENDERING.observers.append(observe := lambda key, _: seen["process"].append(key))
    try:
        assert await offload(str.upper, "a", key="actor", queue=mine) == "A"
        with rendering(theirs):
            assert await offload(str.upper, "b", key="webhook") == "B"
    finally:
        RENDERING.observers.remove(observe)
    assert seen == {"mine": ["actor"], "theirs": ["webhook"], "process": []}

    mine.close()
    with pytest.raises(RuntimeError, match="closed"):
        await offload(str.upper, "c", key="actor", queue=mine)
    assert await offload(str.upper, "d", key="other", queue=theirs) == "D"
    theirs.close()
