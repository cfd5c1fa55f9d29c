"""The operator settles its memory again once start-up's work is over: it waits for no actor to be at work."""

from __future__ import annotations

import asyncio
from typing import Any

from lessor.mailbox import ActorSystem
from lessor.app.operator import _quiet
from tests.mailbox.test_start_slots import SlowStart
from tests.slowness import scaled


async def test_busy_counts_the_actors_at_work_and_the_operator_waits_for_none() -> None:
    gate = asyncio.Event()
    handled: list[tuple[str, Any]] = []
    async with ActorSystem(registry=None) as system:
        system.register("slow", lambda _: SlowStart(gate, handled), max_starting=2)
        for i in range(5):
            system.tell(f"slow/{i}", "first")
        await asyncio.sleep(0.02)
        assert system.busy() == 5, "two starting, three waiting for a slot: all at work"
        waiting = asyncio.create_task(_quiet(system, seconds=0.1, every=0.02))
        await asyncio.sleep(0.2)
        assert not waiting.done(), "start-up is not over while starts are under way"
        gate.set()
        await asyncio.wait_for(waiting, scaled(2))
        assert system.busy() == 0 and len(handled) == 5
