"""The budget every template evaluation runs under: size and time.

Size: no string or list a template builds, and no output, may exceed
`MAX_SIZE` (characters or items). The sandbox (`sandbox.py`) checks the
operations that could build more *before* they run (`'{:>999999999}'.format`,
`ljust`, `center`, `zfill`, `expandtabs`, `replace`, `*`, `+`, `~`, `%`,
`join`, the `center`/`indent`/`wordwrap`/`batch` filters...) and every
result after, so an attempt is a TemplateError naming the limit, never a
MemoryError.

Time: work that renders (a claim's or pool's templates and checks, a
handle's resources) runs through `offload`, in a small pool of render
threads, so the event loop only awaits it. The threads are shared fairly
(`FairQueue`): each piece of work names whose it is (`key`: for the operator,
the tenant's namespace), the waiting keys take turns, and no key holds more
than `KEY_SHARE` threads (one while its work keeps running out of time), so
one tenant's slow templates queue behind each other, not in front of
everyone's. Each offloaded call has a
deadline of `MAX_SECONDS`; a watchdog thread enforces it from outside:
once the deadline passes it raises `BudgetExceeded` inside the render
thread, at the next bytecode of whatever template is running (a loop with
an empty body included). The sandbox also checks the deadline on every
call and operator, so a template that is past it stops there. A template
evaluated outside `offload` gets a deadline of its own.

The exception is raised only while a template is being evaluated
(`evaluating`), at most once per budget, and the evaluation's caller turns
it into a TemplateError naming the field: nothing else in the thread ever
sees it.
"""

from __future__ import annotations

import asyncio
import ctypes
import heapq
import itertools
import sys
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, TypeVar

#: Longest string, list or output (characters or items) a template may build.
MAX_SIZE = 1_000_000
#: Wall-clock seconds one offloaded piece of work (or one template outside it) may take.
MAX_SECONDS = 2.0
#: Render threads: enough that one slow template does not hold up the others.
RENDER_THREADS = 4
#: Most render threads one key's work may hold at once: the rest stay for other keys.
KEY_SHARE = 2
#: Seconds after its work last ran out of time during which a key gets one render thread only.
SLOW_KEY_SECONDS = 30.0
#: How long (seconds) a render thread may hold the interpreter while the event loop waits for it:
#: Python's default is 5 ms, and the loop may wait that long at every I/O call it makes.
SWITCH_INTERVAL = 0.001

T = TypeVar("T")


class BudgetExceeded(BaseException):
    """Raised inside a template that ran out of time.

    A BaseException, so no `except Exception` inside Jinja2 or a filter
    swallows it; `render_string` and `check_expression` turn it into a
    TemplateError.
    """


def too_big(what: str) -> str:
    return f"{what} would be longer than the template size limit ({MAX_SIZE:,} characters or items)"


_SCALARS = (int, float, bool, type(None))


def deep_size(value: Any, limit: int = MAX_SIZE) -> int:
    """Characters and items in `value`, counting a shared reference each time it appears (as `str()` or JSON
    writing would); the count stops soon after passing `limit`, so `[x, x]` nested thirty deep costs no more."""
    total, stack = 0, [value]
    while stack and total <= limit:
        item = stack.pop()
        if isinstance(item, str):
            total += len(item)
        elif isinstance(item, (list, tuple)):
            total += len(item)
            stack.extend(item)
        elif isinstance(item, dict) or (not isinstance(item, _SCALARS) and isinstance(item, Mapping)):
            total += len(item)
            for key, entry in item.items():
                stack.append(key)
                stack.append(entry)
    return total


def out_of_time() -> str:
    return f"the template ran out of time (the template time limit is {MAX_SECONDS:g} s)"


class Budget:
    """One deadline, shared by every template evaluated for one piece of work in one thread."""

    __slots__ = ("deadline", "thread_id", "_lock", "_inside", "_fired")

    def __init__(self, seconds: float = MAX_SECONDS) -> None:
        self.deadline = time.monotonic() + seconds
        self.thread_id = threading.get_ident()
        self._lock = threading.Lock()
        self._inside = 0
        self._fired = False

    def check(self) -> None:
        if self._fired or time.monotonic() >= self.deadline:
            raise BudgetExceeded(out_of_time())

    def ran_out(self) -> bool:
        """Whether the work ran past the deadline (interrupted or not): what makes its key slow."""
        return self._fired or time.monotonic() >= self.deadline

    def enter(self) -> None:
        with self._lock:
            self._inside += 1

    def leave(self) -> None:
        with self._lock:
            self._inside -= 1
            if self._inside == 0 and self._fired:
                _set_async_exc(self.thread_id, None)  # an interruption that came too late: drop it

    def interrupt(self) -> None:
        """The watchdog's move: raise BudgetExceeded in the thread if it is still inside a template."""
        with self._lock:
            if self._inside and not self._fired:
                self._fired = True
                _set_async_exc(self.thread_id, BudgetExceeded)


def _set_async_exc(thread_id: int, exception: type[BaseException] | None) -> None:
    ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread_id),
                                               ctypes.py_object(exception) if exception else None)


class _Watchdog:
    """One thread that interrupts templates past their deadline."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Budget]] = []
        self._order = itertools.count()
        self._wake = threading.Condition()
        self._thread: threading.Thread | None = None

    def watch(self, budget: Budget) -> None:
        with self._wake:
            earliest = not self._heap or budget.deadline < self._heap[0][0]
            heapq.heappush(self._heap, (budget.deadline, next(self._order), budget))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="lessor-template-watchdog", daemon=True)
                self._thread.start()
            if earliest:  # otherwise the watchdog already wakes up earlier than this deadline
                self._wake.notify()

    def _run(self) -> None:
        while True:
            with self._wake:
                while not self._heap:
                    self._wake.wait()
                deadline = self._heap[0][0]
                delay = deadline - time.monotonic()
                if delay > 0:
                    self._wake.wait(delay)
                    continue
                budget = heapq.heappop(self._heap)[2]
            budget.interrupt()


_WATCHDOG = _Watchdog()
_CURRENT = threading.local()


def current() -> Budget | None:
    """The budget of the work this thread is doing, if any."""
    return getattr(_CURRENT, "budget", None)


def current_check() -> None:
    """The sandbox's cooperative check, on every call and operator: fail at once past the deadline."""
    budget = current()
    if budget is not None:
        budget.check()


@contextmanager
def evaluating() -> Iterator[Budget]:
    """Around one template evaluation: the thread's budget (offload's), or a new one for this evaluation."""
    budget = current()
    own = budget is None
    if budget is None:
        budget = Budget()
        _WATCHDOG.watch(budget)
        _CURRENT.budget = budget
    try:
        budget.check()
        budget.enter()
        try:
            yield budget
        finally:
            budget.leave()
    finally:
        if own:
            _CURRENT.budget = None


@dataclass(eq=False)
class _Work:
    key: str
    call: Callable[[], Any]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[Any]
    queued: float = field(default_factory=time.monotonic)


class FairQueue:
    """The render threads, shared fairly between keys.

    Work waits in one line per key; whenever a thread is free, the keys that
    wait take turns (round robin), each key in its own line's order. A key
    holds at most `share` threads, and one only for `slow_seconds` after its
    work last ran out of time: a tenant whose templates spin keeps one
    thread busy, not all of them, and its other work waits behind it.

    Thread-safe and not bound to an event loop: callers on any loop await it.
    """

    def __init__(self, threads: int = RENDER_THREADS, share: int = KEY_SHARE,
                 slow_seconds: float = SLOW_KEY_SECONDS) -> None:
        self.threads, self.share, self.slow_seconds = threads, share, slow_seconds
        self._executor = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="lessor-render")
        self._closed = False
        self._lock = threading.Lock()
        self._lines: dict[str, deque[_Work]] = {}  # insertion order is the turn order
        self._running: dict[str, int] = {}
        self._slow_until: dict[str, float] = {}
        self._busy = 0
        self.observers: list[Callable[[str, float], None]] = []
        """Called with (key, seconds waited) as each piece of work starts, in the render thread."""

    def close(self) -> None:
        """Stop the render threads once their work is done (the operator's stop); later work is refused."""
        with self._lock:
            self._closed = True
        self._executor.shutdown(wait=False, cancel_futures=True)

    def limit(self, key: str) -> int:
        """How many threads `key` may hold now."""
        return 1 if self._slow_until.get(key, 0.0) > time.monotonic() else self.share

    def slow(self, key: str) -> bool:
        """Whether `key`'s work ran out of time lately (so it gets one thread)."""
        return self.limit(key) == 1

    def waiting(self) -> dict[str, int]:
        """Work waiting per key, for metrics and tests."""
        with self._lock:
            return {key: len(line) for key, line in self._lines.items()}

    async def run(self, key: str, call: Callable[[], T]) -> T:
        loop = asyncio.get_running_loop()
        work = _Work(key, call, loop, loop.create_future())
        with self._lock:
            if self._closed:
                raise RuntimeError("the render queue is closed (its operator has stopped)")
            self._lines.setdefault(key, deque()).append(work)
            self._dispatch()
        result: T = await work.future  # cancelled while waiting: `_dispatch` skips it
        return result

    def _dispatch(self) -> None:
        """Start waiting work on free threads, the keys taking turns (called with the lock held)."""
        while self._busy < self.threads:
            chosen = None
            for key in list(self._lines):
                line = self._lines[key]
                while line and line[0].future.done():  # cancelled before it started
                    line.popleft()
                if not line:
                    del self._lines[key]
                    continue
                if self._running.get(key, 0) < self.limit(key):
                    chosen = line.popleft()
                    del self._lines[key]
                    if line:
                        self._lines[key] = line  # to the back of the turn order
                    break
            if chosen is None:
                return
            self._running[chosen.key] = self._running.get(chosen.key, 0) + 1
            self._busy += 1
            self._executor.submit(self._execute, chosen)

    def _execute(self, work: _Work) -> None:
        waited = time.monotonic() - work.queued
        for observe in self.observers:
            observe(work.key, waited)
        outcome: tuple[bool, Any] = (False, None)
        budget: Budget | None = None
        try:
            budget = Budget()
            _CURRENT.budget = budget
            _WATCHDOG.watch(budget)
            outcome = (True, work.call())
        except BaseException as error:  # noqa: BLE001 - handed to the awaiting caller
            outcome = (False, error)
        finally:
            _CURRENT.budget = None
            with self._lock:
                self._running[work.key] -= 1
                if not self._running[work.key]:
                    del self._running[work.key]
                if budget is not None and budget.ran_out():
                    now = time.monotonic()
                    if len(self._slow_until) > 1000:  # keys are whatever callers name: forget the expired
                        self._slow_until = {k: t for k, t in self._slow_until.items() if t > now}
                    self._slow_until[work.key] = now + self.slow_seconds
                self._busy -= 1
                self._dispatch()
        try:
            work.loop.call_soon_threadsafe(_settle, work.future, outcome)
        except RuntimeError:  # the caller's loop is closed: nobody waits any more
            pass


def _settle(future: asyncio.Future[Any], outcome: tuple[bool, Any]) -> None:
    if future.done():
        return
    ok, value = outcome
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value)


RENDERING = FairQueue()
"""The render threads of callers outside an operator (the porting tools, the benches, unit tests): an operator
makes its own at start and closes it at stop (`lessor.app.operator`), so two in one process share none."""
_QUEUE: ContextVar[FairQueue | None] = ContextVar("lessor_render_queue", default=None)


@contextmanager
def rendering(queue: FairQueue) -> Iterator[FairQueue]:
    """`offload` without a `queue` uses `queue` within (the webhook's handler: its operator's render threads)."""
    token = _QUEUE.set(queue)
    try:
        yield queue
    finally:
        _QUEUE.reset(token)


async def offload(function: Callable[..., T], /, *args: Any, key: str, queue: FairQueue | None = None,
                  **kwargs: Any) -> T:
    """`function(*args, **kwargs)` in a render thread under one budget; the event loop only awaits it.

    `key` says whose work it is (the operator passes the tenant's namespace):
    it waits its turn among that key's work (`FairQueue`). Every template it
    evaluates shares the budget's deadline; one that runs past it fails as a
    TemplateError naming its field and the limit. `queue`: whose render threads
    (an actor passes its operator's, `Context.rendering`); by default the one
    `rendering` set, else the process's `RENDERING`.
    """
    chosen = queue or _QUEUE.get() or RENDERING
    return await chosen.run(key, lambda: function(*args, **kwargs))


def switch_fast() -> None:
    """From now on, a render thread holds the interpreter at most `SWITCH_INTERVAL` while the event loop waits
    for it. Process-wide, so the app calls it as it starts (and a bench as it measures), never a module; it
    only ever lowers the interval, so two operators in one process agree."""
    if sys.getswitchinterval() > SWITCH_INTERVAL:
        sys.setswitchinterval(SWITCH_INTERVAL)
