"""The timer heap under the keyed timers: one event-loop timer for all, due order, bounded by live timers."""

from __future__ import annotations

import asyncio
import random
from typing import Any

from lessor.mailbox.timers import Timers
from tests.slowness import scaled


class Deliveries:
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []
        self.done = asyncio.Event()

    def __call__(self, address: str, message: Any, context: Any) -> None:
        self.seen.append((address, message))
        if message == "last":
            self.done.set()


async def test_timers_armed_in_any_order_are_delivered_in_the_order_they_are_due() -> None:
    got = Deliveries()
    timers = Timers(got)
    delays = list(range(1, 41))
    random.shuffle(delays)
    loop = asyncio.get_running_loop()
    due: dict[str, float] = {}
    for ms in delays:  # a later arm of an earlier timer moves the one event-loop timer forward
        due[f"a/{ms}"] = loop.time() + ms / 1000  # when it is due: a busy machine may take a while between arms
        timers.schedule(f"a/{ms}", "tick", ms, ms / 1000, None)
    timers.schedule("end", "z", "last", 0.06 + (loop.time() - min(due.values())), None)
    await asyncio.wait_for(got.done.wait(), scaled(5))
    assert [address for address, _ in got.seen] == sorted(due, key=due.__getitem__) + ["end"]


async def test_a_key_rearmed_many_times_leaves_one_timer_and_a_bounded_heap() -> None:
    got = Deliveries()
    timers = Timers(got)
    for i in range(10_000):  # an exporter's heartbeat, re-armed by every lastSeen
        timers.schedule("exporter/lab/e1", "heartbeat", i, 30.0, None)
    assert len(timers._heap) < 1_000
    timers.schedule("exporter/lab/e1", "heartbeat", "last", 0.001, None)
    await asyncio.wait_for(got.done.wait(), scaled(5))
    await asyncio.sleep(0.01)
    assert got.seen == [("exporter/lab/e1", "last")]
    timers.close()


async def test_a_delivery_that_fails_does_not_stop_the_others() -> None:
    got, reported = Deliveries(), []

    def fire(address: str, message: Any, context: Any) -> None:
        if message == "bad":
            raise RuntimeError("boom")
        got(address, message, context)

    asyncio.get_running_loop().set_exception_handler(lambda _, context: reported.append(context["exception"]))
    timers = Timers(fire)
    timers.schedule("a", "k", "bad", 0.0, None)
    timers.schedule("b", "k", "good", 0.0, None)
    timers.schedule("c", "k", "last", 0.002, None)
    await asyncio.wait_for(got.done.wait(), scaled(5))
    assert got.seen == [("b", "good"), ("c", "last")]
    assert [str(error) for error in reported] == ["boom"]
