"""`loops.new_event_loop`: the fast lane where this Python has every asyncio internal it needs, else asyncio's own
loop with one warning naming what is missing; the actors work in either. Run on every Python the machine has
(.ci/run runs tests/mailbox on each)."""

from __future__ import annotations

import ast
import asyncio
import contextlib
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem, lanes
from lessor.mailbox.lanes import LaneLoop
from lessor.mailbox.loops import EVENT_LOOPS, HANDLE_NAMES, LOOP_NAMES, TIMER_NAMES, missing, new_event_loop

SPINS = 50
STEP = 0.0005  # seconds of work per step: two tenants' busy actors contend, so their steps take turns


class Spinner(Actor):
    """A step of work, a yield, `SPINS` times; then it answers, and a timer of its own sets `ticked`."""

    def __init__(self, ticked: asyncio.Event) -> None:
        self.ticked = ticked

    async def receive(self, message: Any) -> Any:
        if message == "tick":
            self.ticked.set()
            return None
        for _ in range(SPINS):
            busy_until = time.perf_counter() + STEP
            while time.perf_counter() < busy_until:
                pass
            await asyncio.sleep(0)
        self.schedule("tick", "tick", delay=0.01)
        return message


async def two_busy_tenants() -> int:
    """Busy tenants' actors answer, and their timers come; returns the steps that waited for their tenant's turn."""
    ticked = {tenant: asyncio.Event() for tenant in ("a", "b", "c")}
    async with ActorSystem(registry=None) as system:
        system.register("spin", lambda address: Spinner(ticked[address.split("/")[1]]),
                        tenant=lambda address: address.split("/")[1])
        answers = await asyncio.gather(*(system.ask(f"spin/{tenant}", tenant) for tenant in ticked))
        assert answers == list(ticked)
        await asyncio.gather(*(event.wait() for event in ticked.values()))
        return system._turns.parked


def test_this_python_has_what_the_lane_needs_and_gets_the_lane(caplog: pytest.LogCaptureFixture) -> None:
    """On 3.11, 3.12 and 3.13 (.ci/run): nothing missing, no warning, the lane."""
    assert missing() == []
    with caplog.at_level(logging.WARNING, logger="lessor.mailbox.loops"):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            assert isinstance(runner.get_loop(), LaneLoop)
            assert runner.run(two_busy_tenants()) > 0  # the turns held steps back, in the lane's loop
    assert caplog.records == []


@pytest.fixture
def renamed_add_callback(monkeypatch: pytest.MonkeyPatch) -> None:
    """A Python whose loop calls `_add_callback` by another name: asyncio itself still works, the lane could not."""
    from asyncio import base_events, selector_events

    add = base_events.BaseEventLoop._add_callback  # type: ignore[attr-defined]
    monkeypatch.delattr(base_events.BaseEventLoop, "_add_callback")
    process_events = selector_events.BaseSelectorEventLoop._process_events  # type: ignore[attr-defined]

    def renamed(self: Any, event_list: Any) -> None:
        self.__dict__.setdefault("_add_callback", add.__get__(self))  # the new name, as this loop's own calls it
        process_events(self, event_list)

    monkeypatch.setattr(selector_events.BaseSelectorEventLoop, "_process_events", renamed)


@pytest.mark.usefixtures("renamed_add_callback")
def test_without_an_internal_the_lane_needs_the_app_runs_plain_asyncio_with_one_warning(
        caplog: pytest.LogCaptureFixture) -> None:
    assert missing() == ["SelectorEventLoop._add_callback"]
    with caplog.at_level(logging.WARNING, logger="lessor.mailbox.loops"):
        with asyncio.Runner(loop_factory=new_event_loop) as runner:
            loop = runner.get_loop()
            assert not isinstance(loop, LaneLoop)
            assert runner.run(two_busy_tenants()) > 0  # the actors work, and take turns, in asyncio's own loop
    [warning] = caplog.records
    assert "SelectorEventLoop._add_callback" in warning.getMessage()
    assert "plain asyncio" in warning.getMessage()


def test_event_loop_asyncio_is_asyncios_own_loop_without_a_word(caplog: pytest.LogCaptureFixture) -> None:
    """`lessor run --event-loop asyncio`."""
    assert EVENT_LOOPS == ("lane", "asyncio")
    with caplog.at_level(logging.WARNING, logger="lessor.mailbox.loops"):
        with asyncio.Runner(loop_factory=lambda: new_event_loop("asyncio")) as runner:
            assert not isinstance(runner.get_loop(), LaneLoop)
            assert runner.run(two_busy_tenants()) > 0
    assert caplog.records == []


def asyncios_private_names() -> set[str]:
    """The single-underscore names asyncio's loop, handles, futures and tasks have on this Python."""
    with contextlib.closing(asyncio.SelectorEventLoop()) as loop:
        names = set(vars(loop)).union(*(dir(owner) for owner in (
            loop, asyncio.Handle, asyncio.TimerHandle, asyncio.Future, asyncio.Task)))
    return {name for name in names if name.startswith("_") and not name.startswith("__")}


def test_every_asyncio_internal_the_lane_touches_is_one_the_check_looks_for() -> None:
    """A change to lanes.py that reads or overrides another of asyncio's private names must add it to the check
    (`loops.LOOP_NAMES`, `HANDLE_NAMES`, `TIMER_NAMES`), or a Python without it would break the lane silently."""
    tree = ast.parse(Path(lanes.__file__).read_text(encoding="utf-8"))
    touched = {node.attr for node in ast.walk(tree) if isinstance(node, ast.Attribute)} | {
        node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    used = touched & asyncios_private_names()
    assert {"_ready", "_process_events", "_add_callback", "_when"} <= used  # the walk sees them
    assert used - {*LOOP_NAMES, *HANDLE_NAMES, *TIMER_NAMES} == set()
