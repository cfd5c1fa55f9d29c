"""Time in mailbox (`lessor_mailbox_queue_duration_seconds`), like controller-runtime's
workqueue_queue_duration_seconds: from `tell` to the moment the actor begins handling it."""

from __future__ import annotations

import asyncio
from typing import Any

from prometheus_client import CollectorRegistry

from lessor.mailbox import Actor, ActorSystem


class Slow(Actor):
    def __init__(self, gate: asyncio.Event) -> None:
        self.gate = gate

    async def receive(self, message: Any) -> None:
        if message == "hold":
            await self.gate.wait()


async def test_a_message_behind_a_slow_one_is_counted_with_its_wait() -> None:
    registry = CollectorRegistry()
    gate = asyncio.Event()
    async with ActorSystem(registry=registry) as system:
        system.register("slow", lambda _: Slow(gate))
        system.tell("slow/1", "hold")
        system.tell("slow/1", "next")  # waits behind "hold" until the gate opens
        await asyncio.sleep(0.2)
        gate.set()
        await system.ask("slow/1", "last")

        def sample(name: str, **labels: str) -> float:
            return registry.get_sample_value(name, {"kind": "slow", **labels}) or 0.0

        assert sample("lessor_mailbox_queue_duration_seconds_count") == 3
        assert sample("lessor_mailbox_queue_duration_seconds_sum") >= 0.2  # "next" waited at least that long
        assert sample("lessor_mailbox_queue_duration_seconds_bucket", le="0.1") <= 2  # not "next"
        assert sample("lessor_mailbox_queue_duration_seconds_bucket", le="+Inf") == 3
