"""One live actor: its mailbox, its incarnation and the task that drains it.

The task exists only while there is work (messages, a restart, a stop): it
drains the mailbox and exits when it is empty, and the next message starts a
new one. An idle actor is therefore a few small objects and no coroutine
frame, which is what lets 100k of them stay cheap.
"""

from __future__ import annotations

import asyncio
import logging
from bisect import bisect_left
from collections import deque
from collections.abc import Hashable
from time import perf_counter
from typing import TYPE_CHECKING

from . import dead_letters
from .actor import Actor
from .envelope import Envelope
from .fair_inbox import FairInbox
from .errors import ActorKilled, Expected, Undeliverable
from .metrics import BUCKETS, Handling
from .lanes import Meter, Serving, tenant_context
from .turns import Gated

if TYPE_CHECKING:
    from .kind import Kind
    from .start_slots import StartSlots
    from .system import ActorSystem

log = logging.getLogger(__name__)

# System messages, highest priority first. They jump the mailbox: the drain
# loop looks at them before every user message. A pending stronger one
# subsumes a weaker one (a stop makes a restart or passivation moot).
STOP, RESTART, PASSIVATE = 3, 2, 1

# Lifecycle: ACTIVE accepts messages; STOPPING runs `stopping` and refuses
# them; GONE has left the system (a later message makes a new cell).
ACTIVE, STOPPING, GONE = "active", "stopping", "gone"

# Seconds an actor may keep handling messages before it yields to the event
# loop, so one whose handlers never suspend cannot starve the others. A time
# slice rather than a message count: cheap messages go through in long runs,
# costly ones give way sooner.
TIMESLICE = 0.001

# Where a cell stands for its kind's start slots (`max_starting`, `start_slots`): none held, in the kind's
# line without a task, or holding one (its task starts the actor, then hands the slot on).
NO_SLOT, IN_LINE, HELD = 0, 1, 2

# Restart reasons (the `reason` label of the restarts metric).
CRASH, KILL, REQUESTED = "crash", "kill", "requested"
# What a failed incarnation may answer instead (`Actor.failed`): it is kept.
RESUME = "resume"


class Cell:
    """The runtime's side of one address: what outlives an incarnation (mailbox, restart history)."""

    __slots__ = (
        "system",
        "address",
        "kind",
        "actor",
        "inbox",
        "keyed",
        "control",
        "state",
        "task",
        "busy",
        "starting",
        "slot",
        "killing",
        "backoff",
        "wake",
        "failures",
        "streak",
        "idle_since",
        "idle_timer",
        "incarnations",
    )

    def __init__(self, system: ActorSystem, address: str, kind: Kind) -> None:
        self.system = system
        self.address = address
        self.kind = kind
        self.actor: Actor | None = None  # None: the next incarnation has yet to start
        self.inbox: deque[Envelope] | FairInbox | None = None  # allocated while messages wait
        self.keyed: dict[Hashable, Envelope] | None = None  # waiting envelopes by coalesce key
        self.control = 0
        self.state = ACTIVE
        self.task: asyncio.Task[None] | None = None
        self.busy = False  # inside the actor's own code (the only place a kill cancels)
        self.starting = False  # inside `started()`: a shutdown cancels it rather than wait for it
        self.slot = NO_SLOT  # a start slot of its kind's (`max_starting`): none, waiting in line, held
        self.killing = False
        self.backoff = 0.0  # seconds to wait before the next start
        self.wake: asyncio.Future[None] | None = None  # resolves a backoff wait early
        self.failures: deque[float] | None = None  # recent crash times, for the intensity limit
        self.streak: tuple[Hashable, int, float] | None = None  # failures in a row: (failure_key, count, last)
        self.idle_since = 0.0
        self.idle_timer: asyncio.TimerHandle | None = None
        self.incarnations = 0  # started so far; the cell, and so the count, ends with a stop or passivation

    # -- called by senders -------------------------------------------------

    def post(self, envelope: Envelope, bounded: bool) -> str | None:
        """Queue `envelope`; return why it was refused, if it was."""
        if self.state is not ACTIVE:
            return self._stop_reason()
        if envelope.key is not None and self.keyed:
            waiting = self.keyed.get(envelope.key)
            if waiting is not None:
                waiting.supersede(envelope)
                return None
        inbox = self.inbox
        if inbox is None:
            fair_key = self.kind.fair_key
            inbox = self.inbox = deque() if fair_key is None else FairInbox(fair_key, self.system._turns.known)
        elif bounded and len(inbox) >= self.kind.capacity:
            return dead_letters.MAILBOX_FULL
        if envelope.key is not None:
            if self.keyed is None:
                self.keyed = {}
            self.keyed[envelope.key] = envelope
        envelope.queued = perf_counter()
        inbox.append(envelope)
        if self.task is None:
            self._spawn()
        return None

    def depth(self) -> int:
        return len(self.inbox) if self.inbox else 0

    # -- system messages and kill ------------------------------------------

    def request_stop(self) -> None:
        self._request(STOP)

    def request_restart(self) -> None:
        self._request(RESTART)

    def kill(self) -> bool:
        """Abort the incarnation like a crash; False if there is none to abort."""
        if self.state is not ACTIVE or self.actor is None:
            return False
        if self.busy:
            if not self.killing and self.task is not None:
                self.killing = True
                self.task.cancel()
        else:
            self._crash(ActorKilled(self.address), None, KILL)
            if self.task is None:
                self._spawn()
        return True

    def _request(self, control: int) -> None:
        if self.state is not ACTIVE:
            return
        if self.task is None and control != RESTART and not _has_stopping_hook(self.actor):
            # Nothing of the actor's to run, and with no task the mailbox is
            # empty: stop or passivate right here, without a task. This is
            # what makes shutting down or passivating 100k idle actors cheap.
            self.actor = None
            if control == STOP:
                self._retire(self._stop_reason())
            else:
                self._passivated()
            return
        self.control = max(self.control, control)
        if self.wake is not None and not self.wake.done():
            self.wake.set_result(None)
        if self.task is None:
            self._spawn()

    # -- the drain task ------------------------------------------------------

    def _spawn(self) -> None:
        slots = self.kind.start_slots
        if slots is not None and self.actor is None and not self.control and not self.backoff:
            if self.slot == IN_LINE or not self._hold_slot(slots):
                return  # its turn comes when a start ends: waiting, an actor is its cell and mailbox, no task
        else:
            self._leave_line()  # a stop or restart first: its task takes a slot when it comes to start
        self._spawn_task()

    def waits_in_line(self) -> bool:
        """Still waiting in its kind's line for a start slot, with no task (`start_slots`)."""
        return self.slot == IN_LINE and self.task is None and self.state is ACTIVE

    def _take_turn(self) -> None:
        """Given a start slot by the start that ended: run."""
        self._leave_line()
        self.slot = HELD
        self._spawn_task()

    def _hold_slot(self, slots: StartSlots) -> bool:
        """Take a free start slot, or go in the kind's line for one (False)."""
        if slots.take():
            self.slot = HELD
            return True
        self._enter_line(slots)
        return False

    def _enter_line(self, slots: StartSlots) -> None:
        self.slot = IN_LINE
        self.system._at_work += 1  # its start is work under way, as when it waited as a task (`busy`)
        slots.wait(self)

    def _leave_line(self) -> None:
        if self.slot == IN_LINE:
            self.slot = NO_SLOT
            self.system._at_work -= 1

    def _spawn_task(self) -> None:
        run = self._run()
        tenant_of = self.kind.tenant
        tenant: Meter | Serving | None = None
        if tenant_of is not None:  # computed per task, not kept: an idle cell stays as small as it was
            tenant = self.system._turns.meter(tenant_of(self.address))
            run = Gated(run, self.system._turns, tenant)
        elif isinstance(self.inbox, FairInbox):
            tenant = self.inbox.serving
        # The task's context names its tenant: so do the tasks it starts, and the loop's fast lane reads it.
        self.task = self.system._spawn(run, self.address, tenant_context(tenant))
        self.system._at_work += 1

    async def _run(self) -> None:
        try:
            while self.state is not GONE:
                if self.control:
                    await self._apply_control()
                elif self.actor is None:
                    if not await self._start():
                        break  # in line for a start slot: this task ends
                elif self.inbox:
                    await self._drain(self.actor, self.inbox)
                else:
                    break
        except asyncio.CancelledError:
            # Not a kill (those are caught where the actor's code runs): the
            # system is being torn down under us.
            self._retire(dead_letters.SHUTDOWN)
            raise
        finally:
            self.task = None
            self.system._at_work -= 1
            if self.slot == HELD:  # stopped or cancelled before it started
                self._hand_slot_on()
        if self.state is ACTIVE and self.slot != IN_LINE:
            self._went_idle()

    async def _drain(self, actor: Actor, inbox: deque[Envelope] | FairInbox) -> None:
        """Handle waiting messages until the mailbox is empty, a system message waits, or the incarnation ends.

        The hot path: everything it touches per message is a local.
        """
        handling = self.kind.stats.handling
        waited = self.kind.stats.waiting
        yield_at = perf_counter() + TIMESLICE
        while inbox and not self.control and self.actor is actor:
            envelope = inbox.popleft()
            if envelope.key is not None and self.keyed is not None:
                del self.keyed[envelope.key]
            message = envelope.message
            stats = handling.get(type(message))
            if stats is None:
                stats = handling[type(message)] = Handling()
            self.busy = True
            began = perf_counter()
            waited.seconds += began - envelope.queued
            waited.buckets[bisect_left(BUCKETS, began - envelope.queued)] += 1
            try:
                if envelope.context is not None:
                    with self.system._tracing.process(self.address, envelope):
                        result = await actor.receive(message)
                else:
                    result = await actor.receive(message)
            except asyncio.CancelledError:
                if not self._was_killed():
                    raise
                stats.failed += 1
                self._crash(ActorKilled(self.address), envelope, KILL)
            except Exception as exc:
                stats.failed += 1
                verdict = await self._consult(actor, exc)
                if verdict == RESUME:
                    if envelope.reply is not None and not envelope.reply.done():
                        envelope.reply.set_exception(exc)
                else:
                    self._crash(ActorKilled(self.address) if verdict == KILL else exc, envelope, verdict)
            else:
                reply = envelope.reply
                if reply is not None and not reply.done():
                    reply.set_result(result)
            finally:
                ended = perf_counter()
                stats.seconds += ended - began
                stats.buckets[bisect_left(BUCKETS, ended - began)] += 1
                self.busy = False
                if self.killing:
                    self._kill_swallowed()
            if ended > yield_at:
                await asyncio.sleep(0)
                yield_at = perf_counter() + TIMESLICE

    async def _start(self) -> bool:
        """Start an incarnation, or wait before it; False if the actor went in line for a start slot instead."""
        delay, self.backoff = self.backoff, 0.0
        if delay:
            await self._sleep(delay)
            return True  # look at system messages again: a stop may have cut the wait short
        slots = self.kind.start_slots
        if slots is None:
            await self._incarnate()
            return True
        if self.slot != HELD and not self._hold_slot(slots):  # a restart, or the end of a crash's backoff
            return False
        try:
            if not self.control:  # else a stop came meanwhile: look at it first
                await self._incarnate()
        finally:
            self._hand_slot_on()
        return True

    def _hand_slot_on(self) -> None:
        slots = self.kind.start_slots
        self.slot = NO_SLOT
        if slots is not None and (following := slots.give_back()) is not None:
            following._take_turn()

    async def _incarnate(self) -> None:
        self.busy = True
        try:
            actor = self.kind.factory(self.address)
            actor._cell = self
            self.incarnations += 1
            self.actor = actor
            self.starting = True
            try:
                first = self.inbox[0] if self.inbox else None
                if first is not None and first.context is not None:
                    with self.system._tracing.start(self.address, first):
                        await actor.started()
                else:
                    await actor.started()
            finally:
                self.starting = False
        except asyncio.CancelledError:
            if not self._was_killed():
                raise
            self._crash(ActorKilled(self.address), None, KILL)
        except Exception as exc:
            verdict = await self._consult(self.actor, exc) if self.actor is not None else CRASH
            if verdict != RESUME:
                self._crash(ActorKilled(self.address) if verdict == KILL else exc, None, verdict)
        finally:
            self.busy = False
            if self.killing:
                self._kill_swallowed()

    async def _consult(self, actor: Actor, error: Exception) -> str:
        """The failed incarnation's own verdict on `error` (`Actor.failed`): RESUME, else CRASH (or KILL if
        it was killed meanwhile). Called while `busy`, so a kill cancels it like any of the actor's code."""
        now = asyncio.get_running_loop().time()
        try:
            key = actor.failure_key()
            hash(key)
        except Exception:
            log.exception("%s: failure_key() failed", self.address)
            key = None
        previous = self.streak
        count = previous[1] + 1 if (previous is not None and previous[0] == key
                                    and now - previous[2] <= self.kind.supervision.within) else 1
        self.streak = (key, count, now)
        try:
            return RESUME if await actor.failed(error, count) is True else CRASH
        except asyncio.CancelledError:
            if not self._was_killed():
                raise
            return KILL
        except Exception:
            log.exception("%s: failed() raised while handling %r", self.address, error)
            return CRASH

    async def _apply_control(self) -> None:
        control, self.control = self.control, 0
        if control == PASSIVATE and self.depth():
            return  # work arrived after all
        if control == STOP:
            self.state = STOPPING
        await self._stop_incarnation()
        if control == STOP:
            self._retire(self._stop_reason())
        elif control == RESTART:
            self.system._timers.cancel_all(self.address)
            self.kind.stats.restarts[REQUESTED] += 1
        elif not self.depth() and not self.control:
            self._passivated()
        # else: messages came while `stopping` ran; a new incarnation takes them.

    async def _stop_incarnation(self) -> None:
        actor = self.actor
        if actor is None:
            return
        self.busy = True
        try:
            await actor.stopping()
        except asyncio.CancelledError:
            if not self._was_killed():
                raise
        except Exception:
            log.exception("%s: stopping() failed", self.address)
        finally:
            self.busy = False
            if self.killing:
                self._kill_swallowed()
            self.actor = None

    async def _sleep(self, delay: float) -> None:
        loop = asyncio.get_running_loop()
        wake = self.wake = loop.create_future()
        timer = loop.call_later(delay, _resolve, wake)
        try:
            await wake
        finally:
            timer.cancel()
            self.wake = None

    def _kill_swallowed(self) -> None:
        """The actor caught our cancellation and carried on: forget the kill, leave the task uncancelled."""
        self._was_killed()

    def _was_killed(self) -> bool:
        """Whether the cancellation just caught was our kill (absorb it) rather than a shutdown (let it through)."""
        if not self.killing:
            return False
        self.killing = False
        task = asyncio.current_task()
        return task is None or task.uncancel() == 0

    # -- supervision ---------------------------------------------------------

    def _crash(self, error: Exception, envelope: Envelope | None, reason: str) -> None:
        """End the incarnation after a failure: answer the asker, then restart or escalate."""
        if envelope is not None and envelope.reply is not None and not envelope.reply.done():
            envelope.reply.set_exception(error)
        self.actor = None
        self.system._timers.cancel_all(self.address)
        if self.failures is None:
            self.failures = deque()
        policy = self.kind.supervision
        restarts = policy.record(self.failures, asyncio.get_running_loop().time())
        if restarts is None:
            self._escalate(error)
            return
        self.kind.stats.restarts[reason] += 1
        self.backoff = policy.delay(restarts, self.system._rng)
        if reason == KILL:
            log.warning("%s killed; restarting in %.3gs", self.address, self.backoff)
        elif self.system._closing and isinstance(error, Undeliverable) and error.reason == dead_letters.SHUTDOWN:
            # Asked an actor that shut down first: the shutdown's doing, not a fault of this actor.
            log.debug("%s: %s during shutdown", self.address, error)
        elif isinstance(error, Expected):
            self.system._failure_log.failed(self.kind.name, self.address, error,
                                            f"stopped by {error}; restarting in {self.backoff:.3g}s",
                                            level=logging.INFO, traceback=False)
        else:
            self.system._failure_log.failed(self.kind.name, self.address, error,
                                            f"failed; restarting in {self.backoff:.3g}s")

    def _escalate(self, error: Exception) -> None:
        policy = self.kind.supervision
        self.system._failure_log.failed(
            self.kind.name, self.address, error,
            f"failed more than {policy.max_restarts} times in {policy.within:g}s; stopped for good",
        )
        self.kind.stats.escalations += 1
        self.system._closed.add(self.address)
        self._retire(dead_letters.ESCALATED)
        self.system._escalated(self.address, error)

    # -- leaving -------------------------------------------------------------

    def _stop_reason(self) -> str:
        return dead_letters.SHUTDOWN if self.system._closing else dead_letters.STOPPED

    def _passivated(self) -> None:
        self.kind.stats.passivations += 1
        self._retire(dead_letters.STOPPED, keep_timers=True)

    def _retire(self, reason: str, *, keep_timers: bool = False) -> None:
        """Leave the system; waiting messages become dead letters for `reason`."""
        self.state = GONE
        self.actor = None
        self._leave_line()
        if self.idle_timer is not None:
            self.idle_timer.cancel()
            self.idle_timer = None
        if not keep_timers:
            self.system._timers.cancel_all(self.address)
        inbox, self.inbox, self.keyed = self.inbox, None, None
        self.system._forget(self)
        for envelope in inbox or ():
            self.system._dead_letter(self.address, envelope, reason)

    def _went_idle(self) -> None:
        if self.inbox is not None and not self.inbox:
            self.inbox = None
        if self.keyed is not None and not self.keyed:
            self.keyed = None
        after = self.kind.passivate_after
        if after is None:
            return
        loop = asyncio.get_running_loop()
        self.idle_since = loop.time()
        if self.idle_timer is None:
            self.idle_timer = loop.call_at(self.idle_since + after, self._idle_check)

    def _idle_check(self) -> None:
        """Passivate if idle long enough; the timer is re-armed lazily rather than on every message."""
        self.idle_timer = None
        if self.state is not ACTIVE or self.task is not None or self.slot == IN_LINE:
            return  # busy now; `_went_idle` re-arms when it is done
        due = self.idle_since + (self.kind.passivate_after or 0.0)
        loop = asyncio.get_running_loop()
        if loop.time() < due:
            self.idle_timer = loop.call_at(due, self._idle_check)
        else:
            self._request(PASSIVATE)


def _has_stopping_hook(actor: Actor | None) -> bool:
    return actor is not None and type(actor).stopping is not Actor.stopping


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
