"""`lanes.LaneLoop` at the level of the loop's passes: what runs first in a pass, and in what order."""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import socket
import time
from collections.abc import Callable

from lessor.mailbox.lanes import LOOK_AGAIN, READING, SLICE, LaneLoop, tenant_context
from lessor.mailbox.loops import new_event_loop

LINE = 50  # steps in the loop's line: each one queues itself again, as a busy actor's task does
STEP = 0.001  # seconds each step of a long pass takes (at least: a busy machine only makes it longer)
AT_MOST = round(LOOK_AGAIN / STEP) + 1  # steps the loop runs, at most, before it looks at its events again
Arm = Callable[[asyncio.AbstractEventLoop, Callable[[], None]], None]


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def steps_before(arm: Arm, loop: asyncio.AbstractEventLoop, *, at: int, seconds: float = 0.0) -> int:
    """Fill the loop's line with `LINE` steps of `seconds` each; step number `at` calls `arm(loop, event)`.
    Returns how many steps ran after the arming and before `event()` was called."""
    steps = 0
    armed_at: int | None = None
    done: asyncio.Future[int] = loop.create_future()

    def event() -> None:
        assert armed_at is not None
        if not done.done():
            done.set_result(steps - armed_at)

    def step() -> None:
        nonlocal steps, armed_at
        steps += 1
        busy(seconds)
        if steps == at:
            armed_at = steps
            arm(loop, event)
        if not done.done():
            loop.call_soon(step)

    for _ in range(LINE):
        loop.call_soon(step)
    return loop.run_until_complete(done)


def in_loop(factory: Callable[[], asyncio.AbstractEventLoop], arm: Arm, *, at: int, seconds: float = 0.0) -> int:
    with contextlib.closing(factory()) as loop:
        return steps_before(arm, loop, at=at, seconds=seconds)


LAST_OF_THIRD_PASS = 3 * LINE
IN_A_LONG_PASS = 2 * LINE + 5  # the fifth step of the third pass, of 50 ms


def due_timers(fired: list[int], count: int = 1) -> Arm:
    """Arms `count` timers due at once, in this order (the next pass moves them to its line); the last calls
    `event`."""
    def arm(loop: asyncio.AbstractEventLoop, event: Callable[[], None]) -> None:
        def fire(n: int) -> None:
            fired.append(n)
            if n == count - 1:
                event()

        now = loop.time()
        for n in range(count):
            loop.call_at(now + n * 1e-9, fire, n)

    return arm


def test_a_timer_come_due_runs_before_the_steps_the_last_pass_left() -> None:
    """A light tenant's timer (an exporter's decision window, a lease's choice window) posts its message as soon
    as the pass it comes due in begins, not behind every step that pass took over: in a storm those are
    10-50 ms of other tenants' work, and the canary's lease paid them once per timer on its way."""
    assert in_loop(new_event_loop, due_timers([]), at=LAST_OF_THIRD_PASS) == 0
    # asyncio's own loop puts it behind the whole line
    assert in_loop(asyncio.SelectorEventLoop, due_timers([]), at=LAST_OF_THIRD_PASS) == LINE


def test_timers_come_due_together_still_run_in_the_order_they_came_due() -> None:
    fired: list[int] = []
    in_loop(new_event_loop, due_timers(fired, 5), at=LAST_OF_THIRD_PASS)
    assert fired == [0, 1, 2, 3, 4]


def steps_before_a_reader(context: contextvars.Context) -> int:
    """The last step of a pass hands a reader task (waiting in `context`) what it waits for, as a socket's
    callback does when a watch event came: how many steps ran before the reader went on."""
    with contextlib.closing(new_event_loop()) as loop:
        came: asyncio.Future[None] = loop.create_future()
        woken: list[Callable[[], None]] = []

        async def reader() -> None:
            await came
            woken[0]()

        def hand(loop: asyncio.AbstractEventLoop, event: Callable[[], None]) -> None:
            woken.append(event)
            came.set_result(None)

        task = loop.create_task(reader(), context=context)
        waited = steps_before(hand, loop, at=LAST_OF_THIRD_PASS)
        loop.run_until_complete(task)
    return waited


def test_a_reader_of_the_watch_streams_goes_on_before_the_line() -> None:
    """`lanes.Reading` (the informers): what a watch brought is read at once and handed to the fair inbox, where
    each tenant's work takes its turn, not behind every other task's step in the pass's line."""
    assert steps_before_a_reader(tenant_context(READING)) == 0
    # Any other task waits its place: the whole next pass, but for the handing step itself, queued behind it.
    assert steps_before_a_reader(contextvars.Context()) == LINE - 1


def test_a_timer_come_due_in_a_long_pass_runs_within_a_look_not_after_the_pass() -> None:
    assert in_loop(new_event_loop, due_timers([]), at=IN_A_LONG_PASS, seconds=STEP) <= AT_MOST
    # the rest of it, and the next
    assert in_loop(asyncio.SelectorEventLoop, due_timers([]), at=IN_A_LONG_PASS, seconds=STEP) >= LINE


def test_a_socket_ready_in_a_long_pass_is_read_within_a_look_not_after_the_pass() -> None:
    """An API answer or a watch event that comes while the loop works through a long pass: asyncio notices it
    only when the pass ends. The lane loop looks again every `LOOK_AGAIN` seconds of the pass."""
    pairs: list[tuple[socket.socket, socket.socket]] = []

    def data_comes(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        ours, theirs = socket.socketpair()
        pairs.append((ours, theirs))
        ours.setblocking(False)

        def read() -> None:
            if ours.recv(16):
                loop.remove_reader(ours)
                callback()

        loop.add_reader(ours, read)
        theirs.send(b"event")

    try:
        assert in_loop(new_event_loop, data_comes, at=IN_A_LONG_PASS, seconds=STEP) <= AT_MOST
        assert in_loop(asyncio.SelectorEventLoop, data_comes, at=IN_A_LONG_PASS, seconds=STEP) >= LINE - 5
    finally:
        for pair in pairs:
            for sock in pair:
                sock.close()


def test_a_full_lane_and_the_line_take_turns_by_the_look_neither_waits_a_whole_pass() -> None:
    """More light work than a slice: the lane's rest runs at the loop's next look, not behind the whole line; and
    the line still gets its share between the lane's slices."""
    loop = new_event_loop()
    order: list[str] = []
    stop = False

    async def reader() -> None:  # always in the lane (`Reading`)
        while not stop:
            order.append("lane")
            busy(STEP)
            await asyncio.sleep(0)

    def step() -> None:
        order.append("line")
        busy(STEP)
        if not stop:
            loop.call_soon(step)

    async def run() -> None:
        nonlocal stop
        readers = [loop.create_task(reader(), context=tenant_context(READING)) for _ in range(2 * LINE)]
        for _ in range(LINE):
            loop.call_soon(step)
        await asyncio.sleep(1.0)
        stop = True
        await asyncio.gather(*readers)

    try:
        loop.run_until_complete(run())
    finally:
        loop.close()
    runs: dict[str, list[int]] = {"lane": [], "line": []}
    for i, kind in enumerate(order):
        if i == 0 or order[i - 1] != kind:
            runs[kind].append(0)
        runs[kind][-1] += 1
    # The line runs at most about a look's worth of steps between the lane's slices (not the whole pass of
    # `LINE`), and the lane a slice's worth at a time, two when its rest comes at a pass's start (that is a look
    # too) right after a slice at the pass's end; so each gets a fair part of the loop.
    assert max(runs["line"][1:-1]) <= AT_MOST + 2, runs["line"]
    assert max(runs["lane"][1:-1]) <= 2 * round(SLICE / STEP) + 2, runs["lane"]
    assert order.count("line") >= len(order) // 4, (order.count("line"), len(order))


def test_the_lessor_loop_is_the_one_with_the_front() -> None:
    loop = new_event_loop()
    try:
        assert isinstance(loop, LaneLoop)
    finally:
        loop.close()


def test_a_timer_cancelled_before_it_comes_due_in_a_long_pass_never_runs_and_is_not_counted_twice() -> None:
    cancelled_ran: list[int] = []

    def arm(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        now = loop.time()
        loop.call_at(now, cancelled_ran.append, 1).cancel()
        loop.call_at(now, callback)

    with contextlib.closing(new_event_loop()) as loop:
        assert isinstance(loop, LaneLoop)
        assert steps_before(arm, loop, at=IN_A_LONG_PASS, seconds=STEP) <= AT_MOST
        assert not cancelled_ran and loop.looked > 0
        assert loop._timer_cancelled_count == 0  # type: ignore[attr-defined]
