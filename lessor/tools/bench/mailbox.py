"""Benchmark of the actor runtime: tell throughput against a bare asyncio.Queue hop, ask latency, spawn cost and memory.

Budgets (docs/mailbox.md): tell at least half the Queue hop's throughput
measured in the same run; at most 4 KiB per live idle actor and under 2 s to
spawn 100k.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import os
import platform
import statistics
import time
import tracemalloc
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import TracerProvider

from lessor.mailbox import Actor, ActorSystem


@dataclass(frozen=True, slots=True)
class Hit:
    n: int


class Countdown(Actor):
    """Counts messages and wakes the benchmark when the expected number arrived."""

    def __init__(self, done: asyncio.Event, expected: list[int]) -> None:
        self.done = done
        self.expected = expected

    async def receive(self, message: Any) -> int:
        self.expected[0] -= 1
        if not self.expected[0]:
            self.done.set()
        return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--messages", type=int, default=200_000, help="messages per throughput round")
    parser.add_argument("--batch", type=int, default=100, help="messages sent between two yields to the event loop")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds; the best of each is reported")
    parser.add_argument("--asks", type=int, default=10_000, help="sequential asks for the latency percentiles")
    parser.add_argument("--actors", type=int, default=100_000, help="actors spawned for the spawn and memory figures")


async def run(args: argparse.Namespace) -> dict[str, Any]:
    queue_rates, tell_rates, tenanted_rates = [], [], []
    for _ in range(args.rounds):
        queue_rates.append(await _queue_hop(args.messages, args.batch))
        tell_rates.append(await _tell(args.messages, args.batch, None))
        tenanted_rates.append(await _tell(args.messages, args.batch, None, tenanted=True))
    traced = await _tell(max(args.messages // 10, 1), args.batch, TracerProvider())
    asks = await _ask_latencies(args.asks)
    tenanted_asks = await _ask_latencies(args.asks, tenanted=True)
    spawn = await _spawn(args.actors)
    spawn_tenanted = await _spawn_tenanted(args.actors)
    bare_tasks = await _bare_tasks(args.actors)
    traced_bytes = await _traced_memory(args.actors)
    queue_rate, tell_rate, tenanted_rate = max(queue_rates), max(tell_rates), max(tenanted_rates)
    return {
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "implementation": platform.python_implementation(),
            "arch": platform.machine(),
            "load_average_1m": os.getloadavg()[0],
        },
        "throughput": {
            "messages": args.messages,
            "batch": args.batch,
            "rounds": args.rounds,
            "queue_hop_msgs_per_s": round(queue_rate),
            "tell_msgs_per_s": round(tell_rate),
            "tell_to_queue_ratio": round(tell_rate / queue_rate, 3),
            "tell_traced_msgs_per_s": round(traced),
            "tell_tenanted_msgs_per_s": round(tenanted_rate),
            "tenanted_to_plain_ratio": round(tenanted_rate / tell_rate, 3),
        },
        "ask": {
            "asks": args.asks,
            "p50_us": round(statistics.median(asks), 1),
            "p99_us": round(statistics.quantiles(asks, n=100)[98], 1),
            "tenanted_p50_us": round(statistics.median(tenanted_asks), 1),
            "tenanted_p99_us": round(statistics.quantiles(tenanted_asks, n=100)[98], 1),
        },
        "explained": "tenanted: the actor registered with a tenant, so each of its steps takes a turn "
                     "(mailbox/turns.py), with no other tenant to contend with",
        "spawn": {
            "actors": args.actors,
            **spawn,
            "tenanted_seconds": round(spawn_tenanted, 3),
            "bare_task_seconds": round(bare_tasks, 3),
            "tracemalloc_bytes_per_idle_actor": round(traced_bytes / args.actors),
        },
    }


async def _queue_hop(messages: int, batch: int) -> float:
    """The baseline: one producer, one consumer task parked on an asyncio.Queue."""
    queue: asyncio.Queue[Hit] = asyncio.Queue()
    done = asyncio.Event()

    async def consume() -> None:
        for _ in range(messages):
            await queue.get()
        done.set()

    consumer = asyncio.create_task(consume())
    await asyncio.sleep(0)
    began = time.perf_counter()
    for i in range(messages):
        queue.put_nowait(Hit(i))
        if i % batch == batch - 1:
            await asyncio.sleep(0)
    await done.wait()
    elapsed = time.perf_counter() - began
    await consumer
    return messages / elapsed


def _tenant(address: str) -> str:
    return "bench"


async def _tell(messages: int, batch: int, tracer_provider: TracerProvider | None, tenanted: bool = False) -> float:
    """The same traffic through `tell` to one actor (metrics on, tracing as given, a tenant if `tenanted`)."""
    done, expected = asyncio.Event(), [messages]
    async with ActorSystem(registry=None, tracer_provider=tracer_provider) as system:
        system.register("counter", lambda _: Countdown(done, expected), capacity=messages,
                        tenant=_tenant if tenanted else None)
        began = time.perf_counter()
        for i in range(messages):
            system.tell("counter/1", Hit(i))
            if i % batch == batch - 1:
                await asyncio.sleep(0)
        await done.wait()
        return messages / (time.perf_counter() - began)


async def _ask_latencies(asks: int, tenanted: bool = False) -> list[float]:
    """Round trips in microseconds, one ask at a time to a live actor (of a tenant if `tenanted`)."""
    done, expected = asyncio.Event(), [0]
    latencies = []
    async with ActorSystem(registry=None) as system:
        system.register("counter", lambda _: Countdown(done, expected), tenant=_tenant if tenanted else None)
        await system.ask("counter/1", Hit(0))
        for i in range(asks):
            began = time.perf_counter_ns()
            await system.ask("counter/1", Hit(i))
            latencies.append((time.perf_counter_ns() - began) / 1000)
    return latencies


async def _spawn_all(system: ActorSystem, actors: int, tenanted: bool = False) -> None:
    done, expected = asyncio.Event(), [actors]
    system.register("counter", lambda _: Countdown(done, expected), tenant=_tenant if tenanted else None)
    for i in range(actors):
        system.tell(f"counter/{i}", Hit(i))
        if i % 1000 == 999:
            await asyncio.sleep(0)
    await done.wait()
    # Every drain task has returned by now; one loop turn lets the task group
    # drop them, so what remains is what idle actors hold.
    await asyncio.sleep(0)


async def _spawn(actors: int) -> dict[str, Any]:
    """Time to spawn `actors` actors (each handles one message): wall, CPU (the machine may be shared), and
    the part of it the cyclic garbage collector took; and the resident memory they added."""
    gc_seconds = 0.0
    gc_began = 0.0

    def on_gc(phase: str, info: dict[str, int]) -> None:
        nonlocal gc_seconds, gc_began
        if phase == "start":
            gc_began = time.perf_counter()
        else:
            gc_seconds += time.perf_counter() - gc_began

    gc.collect()
    rss_before = _rss()
    async with ActorSystem(registry=None) as system:
        gc.callbacks.append(on_gc)
        began, cpu_began = time.perf_counter(), time.process_time()
        try:
            await _spawn_all(system, actors)
        finally:
            gc.callbacks.remove(on_gc)
        seconds, cpu_seconds = time.perf_counter() - began, time.process_time() - cpu_began
        gc.collect()
        rss = _rss() - rss_before
    return {
        "seconds": round(seconds, 3),
        "cpu_seconds": round(cpu_seconds, 3),
        "gc_seconds": round(gc_seconds, 3),
        "rss_bytes_per_idle_actor": round(rss / actors),
    }


async def _spawn_tenanted(actors: int) -> float:
    """Seconds to spawn as many actors of one tenant: each one's first step takes a turn."""
    gc.collect()
    async with ActorSystem(registry=None) as system:
        began = time.perf_counter()
        await _spawn_all(system, actors, tenanted=True)
        return time.perf_counter() - began


async def _bare_tasks(tasks: int) -> float:
    """The spawn baseline: as many trivial tasks in an asyncio.TaskGroup, started at the same pace."""
    done, left = asyncio.Event(), [tasks]

    async def trivial() -> None:
        left[0] -= 1
        if not left[0]:
            done.set()

    async with asyncio.TaskGroup() as group:
        began = time.perf_counter()
        for i in range(tasks):
            group.create_task(trivial())
            if i % 1000 == 999:
                await asyncio.sleep(0)
        await done.wait()
        return time.perf_counter() - began


async def _traced_memory(actors: int) -> int:
    """Python heap held by `actors` idle actors (tracemalloc; addresses included)."""
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        async with ActorSystem(registry=None) as system:
            await _spawn_all(system, actors)
            gc.collect()
            return tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()


def _rss() -> int:
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
