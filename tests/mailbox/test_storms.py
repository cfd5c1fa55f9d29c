"""A storm of identical failures is one traceback and counted lines, not a traceback per actor."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, DeadLetter, DeadLetters, Expected, Supervision
from lessor.mailbox.storms import FailureLog
from tests.slowness import scaled


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    return [r for r in caplog.records if r.name == "storms"]


def test_first_failure_has_the_traceback_and_the_rest_are_counted(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("storms"), interval=10.0, clock=clock)
    caplog.set_level(logging.ERROR, logger="storms")
    logged = [failures.failed("exporter", f"exporter/ns/e{i}", TimeoutError(), "failed") for i in range(1000)]
    assert logged == [True] + [False] * 999
    (first,) = records(caplog)
    assert first.exc_info is not None and "exporter/ns/e0" in first.getMessage()
    failures.flush()
    summary = records(caplog)[-1]
    assert summary.exc_info is None
    assert "999 more exporter actors failed with TimeoutError" in summary.getMessage()
    assert "exporter/ns/e999" in summary.getMessage()


def test_a_long_storm_logs_one_count_per_interval_and_a_new_storm_a_new_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("storms"), interval=10.0, clock=clock)
    caplog.set_level(logging.ERROR, logger="storms")
    for _ in range(300):  # 30 s of failures every 0.1 s: one storm
        failures.failed("lease", "lease/ns/l", ValueError("boom"), "failed")
        clock.now += 0.1
    lines = records(caplog)
    assert [r.exc_info is not None for r in lines] == [True, False, False]
    assert all("more lease actors failed with ValueError: boom" in r.getMessage() for r in lines[1:])
    # A different message is a different storm; the same one after a quiet spell starts over.
    failures.failed("lease", "lease/ns/l", ValueError("other"), "failed")
    clock.now += 60
    failures.failed("lease", "lease/ns/l", ValueError("boom"), "failed")
    tracebacks = [r for r in records(caplog) if r.exc_info is not None]
    assert len(tracebacks) == 3
    assert "more lease actors" in records(caplog)[-2].getMessage()  # the tail of the first storm, counted


class Fragile(Actor):
    async def receive(self, message: Any) -> None:
        raise ConnectionResetError("the API server went away")


async def test_a_thousand_actors_crashing_alike_log_one_traceback(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, logger="lessor.mailbox")
    async with ActorSystem(registry=None) as system:
        system.register("fragile", lambda a: Fragile(), supervision=Supervision(max_restarts=100, backoff=0.001,
                                                                                 max_backoff=0.002))
        for i in range(1000):
            system.tell(f"fragile/{i}", "go")
        await asyncio.sleep(0.2)
    lines = [r for r in caplog.records if "fragile" in r.getMessage()]
    assert sum(r.exc_info is not None for r in lines) == 1
    counted = [r.getMessage() for r in lines if r.exc_info is None]
    assert counted and "999 more fragile actors failed with ConnectionResetError" in counted[-1]


class SlowStart(Actor):
    """Its start waits for something that will not come (an API server at the end of a long queue)."""

    def __init__(self, cancelled: list[str]) -> None:
        self.cancelled = cancelled

    async def started(self) -> None:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.cancelled.append(self.address)
            raise

    async def receive(self, message: Any) -> None:
        raise AssertionError("never started, never handles")


async def test_shutdown_cancels_actors_still_starting_instead_of_waiting_for_them(
        caplog: pytest.LogCaptureFixture) -> None:
    cancelled: list[str] = []
    caplog.set_level(logging.WARNING, logger="lessor.mailbox")
    async with asyncio.timeout(scaled(60)):  # a guard against a hang, not a measurement
        async with ActorSystem(registry=None, shutdown_timeout=3600) as system:
            system.register("slow", lambda a: SlowStart(cancelled))
            for i in range(100):
                system.tell(f"slow/{i}", "go")
            await asyncio.sleep(0.05)
    assert sorted(cancelled) == sorted(f"slow/{i}" for i in range(100))
    assert not [r for r in caplog.records if "did not stop" in r.getMessage()]
    assert system.dead_letters.by_reason["shutdown"] == 100, "each waiting message is accounted for"


def test_dead_letters_are_all_counted_and_logged_once_per_reason_per_interval(
        caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    letters = DeadLetters(log_every=10.0, clock=clock)
    caplog.set_level(logging.WARNING, logger="lessor.mailbox.dead_letters")
    for i in range(1000):
        letters.add(DeadLetter(f"exporter/ns/e{i}", "Observed(...)", "shutdown", "topology"))
    letters.add(DeadLetter("lease/ns/l", "Tick()", "stopped", None))
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 2 and "exporter/ns/e0 (shutdown)" in lines[0] and "(stopped)" in lines[1]
    assert letters.total == 1001 and letters.by_reason["shutdown"] == 1000
    clock.now += 10
    letters.add(DeadLetter("exporter/ns/late", "Observed(...)", "shutdown", "topology"))
    assert "999 more shutdown dead letters before it not logged" in caplog.records[-1].getMessage()
    letters.add(DeadLetter("exporter/ns/later", "Observed(...)", "shutdown", "topology"))
    letters.flush()
    assert "1 more dead letters (shutdown) not logged" in caplog.records[-1].getMessage()


def test_the_same_failure_naming_each_actors_object_is_one_storm(caplog: pytest.LogCaptureFixture) -> None:
    clock = Clock()
    failures = FailureLog(logging.getLogger("storms"), interval=10.0, clock=clock)
    caplog.set_level(logging.ERROR, logger="storms")
    for i in range(3000):
        address = f"exporter/lab/e{i:05d}"
        failures.failed("exporter", address, RuntimeError(f"GET /namespaces/lab/exporters/e{i:05d}: 504 Timeout"),
                        "failed")
    failures.flush()
    (first, summary) = records(caplog)
    assert "exporter/lab/e00000" in first.getMessage() and first.exc_info is not None
    assert "2999 more exporter actors failed with RuntimeError" in summary.getMessage()
    assert "exporter/lab/e02999" in summary.getMessage()


class Deposed(Expected):
    """What the app's `NotLeader` is to the mailbox: a failure that is how the system runs."""


class Stepping(Actor):
    async def receive(self, message: Any) -> None:
        raise Deposed("not the leader: patch Lease ns/x refused")


async def test_actors_stopped_by_an_expected_failure_log_one_line_each_storm_without_a_traceback(
        caplog: pytest.LogCaptureFixture) -> None:
    """A step-down refuses the writes of dozens of actors at once: routine, so no ERROR and no traceback, but
    still said (at INFO) and counted; the actors restart as after any failure."""
    caplog.set_level(logging.INFO, logger="lessor.mailbox")
    async with ActorSystem(registry=None) as system:
        system.register("stepping", lambda a: Stepping(), supervision=Supervision(max_restarts=100, backoff=0.001,
                                                                                   max_backoff=0.002))
        for i in range(50):
            system.tell(f"stepping/{i}", "go")
        await asyncio.sleep(0.2)
    lines = [r for r in caplog.records if "stepping" in r.getMessage()]
    assert lines and all(r.exc_info is None and r.levelno == logging.INFO for r in lines), lines
    assert "stopped by not the leader" in lines[0].getMessage()
    assert any("49 more stepping actors failed with Deposed" in r.getMessage() for r in lines)
