"""Write and read slots shared by turns between namespaces: one namespace's storm of requests does not hold
another namespace's single request behind all of it."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from lessor.gateway import Gateway
from lessor.gateway.client import WRITE_CONCURRENCY
from lessor.gateway.fair_slots import FairSlots
from lessor.gateway.resources import CLIENT, NAMESPACE
from tests.tasks import cancelled


async def test_a_freed_slot_goes_to_each_waiting_key_in_turn() -> None:
    slots = FairSlots(1)
    order: list[str] = []

    async def use(key: str, label: str) -> None:
        await slots.acquire(key)
        order.append(label)
        await asyncio.sleep(0)
        slots.release(key)

    await slots.acquire("storm")  # held: everything below waits
    tasks = [asyncio.create_task(use("storm", f"s{i}")) for i in range(5)]
    await asyncio.sleep(0)
    tasks.append(asyncio.create_task(use("canary", "c")))
    await asyncio.sleep(0)
    slots.release("storm")
    await asyncio.gather(*tasks)
    assert order[:2] == ["s0", "c"]  # the canary waited for one of the storm's, not for all five
    assert not slots.locked()


async def test_a_waiter_cancelled_in_line_or_as_it_is_handed_the_slot_loses_no_slot() -> None:
    slots = FairSlots(1)
    await slots.acquire("a")
    gone = asyncio.create_task(slots.acquire("b"))
    handed = asyncio.create_task(slots.acquire("c"))
    await asyncio.sleep(0)
    await cancelled(gone)
    slots.release("a")  # to "c", which is cancelled before it runs: the slot must come back
    await cancelled(handed)
    assert not slots.locked()
    await asyncio.wait_for(slots.acquire("d"), 1)


async def test_waiters_cancelled_together_lose_no_slot_and_raise_nothing_in_whoever_frees_one() -> None:
    """A shutdown or a kill cancels many waiting requests at once: each waiter is cancelled before its task runs
    to leave the line. A slot freed then must go past them to a live waiter (it raised InvalidStateError in the
    task that freed it, and that slot was held by nobody for good)."""
    slots = FairSlots(2)
    await slots.acquire("a")
    await slots.acquire("a")
    cancelled = [asyncio.create_task(slots.acquire(key)) for key in ("b", "c", "b")]
    live = asyncio.create_task(slots.acquire("d"))
    await asyncio.sleep(0)
    for task in cancelled:
        task.cancel()  # their waiters are cancelled now; their tasks run later
    slots.release("a")  # passes over the three cancelled waiters, to "d"
    for task in cancelled:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    await asyncio.wait_for(live, 1)
    slots.release("a")
    slots.release("d")
    assert not slots.locked() and slots.waiting() == 0
    await asyncio.wait_for(slots.acquire("w"), 1)  # both slots are free again, and only two
    await asyncio.wait_for(slots.acquire("x"), 1)
    assert slots.locked()


async def test_a_key_with_nothing_in_flight_takes_a_spare_slot_at_once_and_a_busy_key_never_does() -> None:
    slots = FairSlots(1, spare=1)
    await slots.acquire("storm")
    storm_waits = asyncio.create_task(slots.acquire("storm"))  # every regular slot held, and a line
    await asyncio.sleep(0)
    assert slots.locked("storm") and not slots.locked("canary")
    await asyncio.wait_for(slots.acquire("canary"), 0.001)  # sent at once, no slot freed
    second = asyncio.create_task(slots.acquire("canary"))  # the canary is busy now: it waits in line
    await asyncio.sleep(0)
    assert not second.done() and slots.locked("other")  # the one spare is taken: an idle key waits too
    other = asyncio.create_task(slots.acquire("other"))
    await asyncio.sleep(0)
    assert not other.done()
    slots.release("canary")  # the spare comes back to the spares: no waiter takes it
    await asyncio.sleep(0)
    assert not storm_waits.done() and not second.done() and not other.done()
    assert not slots.locked("idle")
    slots.release("storm")  # the regular slot goes in turn: the storm's line came first
    await asyncio.sleep(0)
    assert storm_waits.done() and not second.done()
    for task in (second, other):
        task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await asyncio.gather(second, other)


async def test_a_namespaces_write_storm_does_not_queue_another_namespaces_write_behind_it(
        controlplane: Any, namespace: str) -> None:
    canary_ns = f"{namespace}-canary"
    async with await Gateway.connect(str(controlplane.kubeconfig)) as kube:
        await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": canary_ns}})
        try:
            done: list[str] = []

            async def client(ns: str, name: str) -> None:
                await kube.create(CLIENT, ns, {"apiVersion": "lessor.dev/v1alpha1", "kind": "Client",
                                               "metadata": {"name": name}})
                done.append(name)

            storm = [asyncio.create_task(client(namespace, f"s{i:03d}")) for i in range(20 * WRITE_CONCURRENCY)]
            while not kube._writes.waiting():  # the storm fills every slot and queues the rest
                await asyncio.sleep(0)
            await client(canary_ns, "canary")
            await asyncio.gather(*storm)
        finally:
            await kube.delete(NAMESPACE, None, canary_ns)
    # In turn with the storm's queued writes: after at most the slots' worth in flight and one per turn.
    assert done.index("canary") <= 3 * WRITE_CONCURRENCY, done.index("canary")
