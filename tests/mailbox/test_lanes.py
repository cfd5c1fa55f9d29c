"""`lanes.LaneLoop` at the level of the loop's passes: what runs first in a pass, and in what order."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Callable

import contextvars

from lessor.mailbox.lanes import LOOK_AGAIN, READING, SLICE, LaneLoop, new_event_loop, tenant_context

LINE = 50  # steps in the loop's line: each one queues itself again, as a busy actor's task does


def steps_before_a_timer(loop: asyncio.AbstractEventLoop, *, timers: int = 1) -> tuple[int, list[int]]:
    """Fill the loop's line with `LINE` busy steps; the last step of a pass arms `timers` timers already due.
    Returns how many steps ran after the arming and before the first timer's callback, and the order in which
    the timers' callbacks ran."""
    steps = 0
    armed_at: int | None = None
    waited: list[int] = []
    fired: list[int] = []
    done = loop.create_future()

    def fire(i: int) -> None:
        fired.append(i)
        if armed_at is not None and not waited:
            waited.append(steps - armed_at)
        if len(fired) == timers:
            done.set_result(None)

    def step(i: int) -> None:
        nonlocal steps, armed_at
        steps += 1
        if armed_at is None and steps == 3 * LINE and i == LINE - 1:  # the last step of the third pass
            armed_at = steps
            now = loop.time()
            for n in range(timers):  # due at once, in this order: the next pass moves them to its line
                loop.call_at(now + n * 1e-9, fire, n)
        if not done.done():
            loop.call_soon(step, i)

    for i in range(LINE):
        loop.call_soon(step, i)
    loop.run_until_complete(done)
    return waited[0], fired


def in_loop(factory: Callable[[], asyncio.AbstractEventLoop], timers: int = 1) -> tuple[int, list[int]]:
    loop = factory()
    try:
        return steps_before_a_timer(loop, timers=timers)
    finally:
        loop.close()


def test_a_timer_come_due_runs_before_the_steps_the_last_pass_left() -> None:
    """A light tenant's timer (an exporter's decision window, a lease's choice window) posts its message as soon
    as the pass it comes due in begins, not behind every step that pass took over: in a storm those are
    10-50 ms of other tenants' work, and the canary's lease paid them once per timer on its way."""
    waited, _ = in_loop(new_event_loop)
    assert waited == 0
    # asyncio's own loop puts it behind the whole line
    waited, _ = in_loop(asyncio.SelectorEventLoop)
    assert waited == LINE


def test_timers_come_due_together_still_run_in_the_order_they_came_due() -> None:
    _, fired = in_loop(new_event_loop, timers=5)
    assert fired == [0, 1, 2, 3, 4]


def steps_before_a_reader(context: contextvars.Context) -> int:
    """Fill the lane loop's line with `LINE` busy steps; the last step of a pass hands a reader task (waiting in
    `context`) what it waits for. Returns how many steps ran after that and before the reader went on."""
    loop = new_event_loop()
    assert isinstance(loop, LaneLoop)
    steps = 0
    handed_at: int | None = None
    came: asyncio.Future[None] = loop.create_future()
    waited: list[int] = []

    async def reader() -> None:
        await came
        assert handed_at is not None
        waited.append(steps - handed_at)

    def step(i: int) -> None:
        nonlocal steps, handed_at
        steps += 1
        if handed_at is None and steps == 3 * LINE and i == LINE - 1:
            handed_at = steps
            came.set_result(None)  # as a socket's callback does when a watch event came
        if not waited:
            loop.call_soon(step, i)

    try:
        task = loop.create_task(reader(), context=context)
        for i in range(LINE):
            loop.call_soon(step, i)
        loop.run_until_complete(task)
    finally:
        loop.close()
    return waited[0]


def test_a_reader_of_the_watch_streams_goes_on_before_the_line() -> None:
    """`lanes.Reading` (the informers): what a watch brought is read at once and handed to the fair inbox, where
    each tenant's work takes its turn, not behind every other task's step in the pass's line."""
    assert steps_before_a_reader(tenant_context(READING)) == 0
    # Any other task waits its place: the whole next pass, but for the handing step itself, queued behind it.
    assert steps_before_a_reader(contextvars.Context()) == LINE - 1


STEP = 0.001  # seconds each of the long pass's steps takes (at least: a busy machine only makes it longer)
AT_MOST = round(LOOK_AGAIN / STEP) + 1  # steps the loop runs, at most, before it looks at its events again


def busy(seconds: float) -> None:
    until = time.perf_counter() + seconds
    while time.perf_counter() < until:
        pass


def steps_in_a_long_pass_before(arm: Callable[[asyncio.AbstractEventLoop, Callable[[], None]], None],
                                factory: Callable[[], asyncio.AbstractEventLoop]) -> int:
    """`LINE` steps of `STEP` each, a pass of 50 ms; the fifth step of the third pass arms an event (`arm` gets the
    loop and the callback to call). Returns the steps run between the arming and the event's callback."""
    loop = factory()
    steps = 0
    armed_at: int | None = None
    waited: list[int] = []

    def event() -> None:
        assert armed_at is not None
        waited.append(steps - armed_at)

    def step(i: int) -> None:
        nonlocal steps, armed_at
        steps += 1
        busy(STEP)
        if armed_at is None and steps == 2 * LINE + 5:
            armed_at = steps
            arm(loop, event)
        if not waited:
            loop.call_soon(step, i)

    async def until_done() -> None:
        while not waited:
            await asyncio.sleep(0.01)

    try:
        for i in range(LINE):
            loop.call_soon(step, i)
        loop.run_until_complete(until_done())
    finally:
        loop.close()
    return waited[0]


def due_now(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
    loop.call_at(loop.time(), callback)


def test_a_timer_come_due_in_a_long_pass_runs_within_a_look_not_after_the_pass() -> None:
    assert steps_in_a_long_pass_before(due_now, new_event_loop) <= AT_MOST
    assert steps_in_a_long_pass_before(due_now, asyncio.SelectorEventLoop) >= LINE  # the rest of it, and the next


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
        assert steps_in_a_long_pass_before(data_comes, new_event_loop) <= AT_MOST
        assert steps_in_a_long_pass_before(data_comes, asyncio.SelectorEventLoop) >= LINE - 5
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
    loop = new_event_loop()
    assert isinstance(loop, LaneLoop)

    def arm(loop: asyncio.AbstractEventLoop, callback: Callable[[], None]) -> None:
        now = loop.time()
        loop.call_at(now, cancelled_ran.append, 1).cancel()
        loop.call_at(now, callback)

    try:
        assert steps_in_a_long_pass_before(arm, lambda: loop) <= AT_MOST
        assert not cancelled_ran and loop.looked > 0
        assert loop._timer_cancelled_count == 0  # type: ignore[attr-defined]
    finally:
        loop.close()
