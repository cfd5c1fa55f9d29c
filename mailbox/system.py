"""The actor system: registry of kinds, addressing, delivery, and the scope every actor runs in."""

from __future__ import annotations

import asyncio
import contextvars
import logging
import math
from collections.abc import Callable, Coroutine, Hashable, Iterator
from types import TracebackType
from typing import Any

import anyio
from opentelemetry import trace
from opentelemetry.context import Context
from prometheus_client import REGISTRY, CollectorRegistry

from . import dead_letters
from .actor import DEFAULT_ASK_TIMEOUT, Actor
from .fair_inbox import FairKey
from .cell import ACTIVE, Cell
from .dead_letters import DeadLetter, DeadLetters
from .envelope import Envelope
from .errors import AskTimeout, MailboxFull, Undeliverable
from .kind import Kind
from .metrics import NO_KIND, KindStats, MailboxCollector
from .start_slots import StartSlots
from .supervision import Supervision
from .storms import FailureLog
from .timers import TimerTrace, Timers
from .tracing import Cause, Tracing
from .services import SystemServices
from .turns import TenantOf, Turns

log = logging.getLogger(__name__)

Escalation = Callable[[str, BaseException], None]

DEFAULT_SUPERVISION = Supervision()


class ActorSystem:
    """Virtual actors addressed by path (`kind/...`), spawned by their first message.

    Use as `async with ActorSystem() as system:`. Every actor task runs in
    the system's task group; leaving the block refuses new messages, stops
    every actor (each runs `stopping`, waiting messages become dead letters)
    and returns only when all actor tasks have finished.
    """

    def __init__(
        self,
        *,
        registry: CollectorRegistry | None = REGISTRY,
        tracer_provider: trace.TracerProvider | None = None,
        on_escalation: Escalation | None = None,
        shutdown_timeout: float = 10.0,
    ) -> None:
        """`registry`: where the metrics go (None: nowhere). `tracer_provider`: defaults to the global one.

        `on_escalation(address, error)` is called when an actor exceeds its
        restart intensity and is stopped for good. `shutdown_timeout` bounds
        how long leaving the block waits for `stopping` hooks before
        cancelling the stragglers.
        """
        self.dead_letters = DeadLetters()
        self._kinds: dict[str, Kind] = {}
        self._stats: dict[str, KindStats] = {NO_KIND: KindStats()}
        self._cells: dict[str, Cell] = {}
        self._timers = Timers(self._timer_due)
        self._tracing = Tracing(tracer_provider)
        self._turns = Turns()  # tenanted actors' steps take turns by tenant
        self._failure_log = FailureLog(log)  # a storm of identical crashes is one traceback and counts
        # What the cells use of the system; it keeps the counts they keep (`busy`: kept by the cells, so asking
        # costs nothing) and the addresses escalated, stopped for good.
        self._services = SystemServices(
            turns=self._turns, tracing=self._tracing, timers=self._timers, failure_log=self._failure_log,
            spawn=self._spawn, tell=self._tell, ask=self._ask, schedule=self._schedule, forget=self._forget,
            dead_letter=self._dead_letter, escalated=self._escalated)
        self._registry = registry
        self._collector = MailboxCollector(self._stats, self._occupancy)
        self._on_escalation = on_escalation
        self._shutdown_timeout = shutdown_timeout
        self._group: asyncio.TaskGroup | None = None
        self._accepting = False  # True from entering the block until leaving it starts
        self._emptied = asyncio.Event()

    # -- lifecycle -------------------------------------------------------------

    async def __aenter__(self) -> ActorSystem:
        if self._group is not None or self._services.closing:
            raise RuntimeError("an ActorSystem runs once")
        if self._registry is not None:
            self._registry.register(self._collector)  # first: a name clash leaves nothing half-started
        # Actor tasks go in an asyncio.TaskGroup rather than an anyio one:
        # anyio wraps each task in its own cancel scope and event, which made
        # spawning several times slower (see docs/mailbox.md).
        self._group = asyncio.TaskGroup()
        await self._group.__aenter__()
        self._accepting = True
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        assert self._group is not None
        self._accepting = False
        self._services.closing = True
        self._timers.close()
        try:
            with anyio.CancelScope(shield=True), anyio.move_on_after(self._shutdown_timeout):
                for cell in list(self._cells.values()):
                    cell.request_stop()
                    if cell.starting and cell.task is not None:
                        # An incarnation still in `started()` has served nothing: waiting for it
                        # (thousands queued for the API at start-up) would hold up SIGTERM.
                        cell.task.cancel()
                if self._cells:
                    await self._emptied.wait()
        finally:
            stragglers = [cell for cell in self._cells.values() if cell.task is not None]
            if stragglers:
                log.warning("%d actors (%s, ...) did not stop within %gs; cancelling them", len(stragglers),
                            stragglers[0].address, self._shutdown_timeout)
            for cell in stragglers:
                if cell.task is not None:
                    cell.task.cancel()
            self._failure_log.flush()
            self.dead_letters.flush()
            # Every actor task is finished or cancelled; the group only waits
            # for them. It is not handed the block's exception, so that
            # exception propagates as itself, not wrapped in a group.
            await self._group.__aexit__(None, None, None)
            if self._registry is not None:
                self._registry.unregister(self._collector)

    # -- the public API ----------------------------------------------------------

    def register(
        self,
        kind: str,
        factory: Callable[[str], Actor],
        *,
        capacity: int = 1000,
        supervision: Supervision = DEFAULT_SUPERVISION,
        passivate_after: float | None = None,
        max_starting: int | None = None,
        ask_timeout: float = DEFAULT_ASK_TIMEOUT,
        fair_key: FairKey | None = None,
        tenant: TenantOf | None = None,
    ) -> None:
        """Make `kind/...` addresses spawn `factory(address)` on their first message.

        `capacity` bounds each mailbox (see `tell`). `passivate_after`: stop
        actors idle that many seconds; their next message (or timer)
        reactivates them, with `started` rebuilding their state.
        `max_starting`: at most that many of the kind run `started` at once;
        the others wait their turn with their mailboxes intact. For a kind
        whose start-up waits on something slow (the API at a first start):
        thousands of suspended starts hold memory the allocator keeps. Only
        safe if a `started` never waits on another actor of the same kind.
        `ask_timeout`: how long an ask to this kind waits when the asker gives
        no timeout. `math.inf` for an actor that is only ever busy, never gone
        (the topology): its askers wait for the answer instead of timing out,
        failing and asking again, which under load only adds to its queue.
        Such an ask still ends with an error if the actor is killed while
        handling it or the message goes to dead letters; waits past
        `DEFAULT_ASK_TIMEOUT` are counted (`lessor_mailbox_slow_asks`).
        `fair_key`: for an actor that serves many tenants, the tenant of each
        message; the mailbox then takes tenants in turn (`fair_inbox`).
        `tenant(address)`: the tenant an actor of this kind works for (any
        hashable; it must not raise). Its steps then take turns with the other
        tenants' (`turns`): however many actors one tenant has running, another
        tenant's actor waits for a round of tenants, not of actors; and with
        `max_starting`, the start slots go to the tenants in turn. Without it
        the kind's actors run as the event loop takes them.
        """
        if not kind or "/" in kind:
            raise ValueError(f"a kind is one non-empty address segment, not {kind!r}")
        if kind in self._kinds:
            raise ValueError(f"kind {kind!r} is already registered")
        if capacity < 1:
            raise ValueError("capacity must be at least 1")
        if max_starting is not None and max_starting < 1:
            raise ValueError("max_starting must be at least 1")
        if not ask_timeout > 0:
            raise ValueError("ask_timeout must be positive (math.inf: no deadline)")
        stats = self._stats.setdefault(kind, KindStats())
        slots = StartSlots(max_starting, tenant) if max_starting is not None else None
        self._kinds[kind] = Kind(kind, factory, capacity, supervision, passivate_after, stats, slots, ask_timeout,
                                 fair_key, tenant)

    def tell(self, address: str, message: Any, *, coalesce: Hashable | None = None) -> None:
        """Queue `message` for `address` and return at once.

        A full mailbox refuses the message: it becomes a dead letter and this
        raises `MailboxFull`, so the overload is the sender's to handle.
        With `coalesce`, a message still waiting in that mailbox under the
        same key is replaced by this one, which keeps the old one's place.
        """
        if self._tracing.enabled:
            self._tell(address, message, None, coalesce)
        else:  # the hot path, one call shorter
            self._post(address, Envelope(message, None, None, coalesce), True)

    async def ask(self, address: str, message: Any, *, timeout: float | None = None) -> Any:
        """Send `message` and return the actor's reply.

        Raises what the handler raised, `ActorKilled` if it was killed while
        handling, `Undeliverable` if the message went to dead letters,
        `MailboxFull`, or `AskTimeout` after `timeout` seconds (None: the
        addressed kind's `ask_timeout`, 5 s unless registered otherwise;
        `math.inf`: no deadline).
        """
        return await self._ask(address, message, None, timeout)

    def stop(self, address: str) -> None:
        """Stop the actor ahead of its waiting messages (which become dead letters); its next message respawns it."""
        cell = self._cells.get(address)
        if cell is not None:
            cell.request_stop()

    def restart(self, address: str) -> None:
        """Restart the actor ahead of its waiting messages: `stopping`, then a new incarnation's `started`."""
        cell = self._cells.get(address)
        if cell is not None:
            cell.request_restart()

    def kill(self, address: str) -> bool:
        """Cancel the actor mid-handling; it is restarted as after a crash. False if no incarnation was live."""
        cell = self._cells.get(address)
        return cell is not None and cell.kill()

    def busy(self) -> int:
        """How many actors have work under way (a message to handle, a start, a stop): 0 when all is quiet."""
        return self._services.at_work

    def live(self, kind: str | None = None) -> list[str]:
        """Addresses of active (not passivated, not stopped) actors, optionally of one kind."""
        return [
            address
            for address, cell in self._cells.items()
            if cell.state is ACTIVE and (kind is None or cell.kind.name == kind)
        ]

    # -- delivery ----------------------------------------------------------------

    def _tell(
        self,
        address: str,
        message: Any,
        sender: str | None,
        key: Hashable | None,
        links: tuple[Context, ...] = (),
        bounded: bool = True,
        parent: Context | None = None,
    ) -> None:
        envelope = Envelope(message, sender, None, key)
        if self._tracing.enabled:
            self._tracing.told(envelope, links, parent)
        self._post(address, envelope, bounded)

    async def _ask(self, address: str, message: Any, sender: str | None, timeout: float | None) -> Any:
        reply: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        envelope = Envelope(message, sender, reply)
        kind = self._kinds.get(address.partition("/")[0])
        if timeout is None:
            timeout = kind.ask_timeout if kind is not None else DEFAULT_ASK_TIMEOUT
        if not self._tracing.enabled:
            self._post(address, envelope, True)
            return await _reply(address, reply, timeout, kind)
        span, envelope.context, envelope.id = self._tracing.send(address, message)
        with trace.use_span(span, end_on_exit=True):
            self._post(address, envelope, True)
            return await _reply(address, reply, timeout, kind)

    def _post(self, address: str, envelope: Envelope, bounded: bool) -> None:
        cell = self._cells.get(address)
        if cell is None:
            if not self._accepting:
                if self._group is None:
                    raise RuntimeError("the ActorSystem is not running: use `async with ActorSystem() as system`")
                self._dead_letter(address, envelope, dead_letters.SHUTDOWN)
                return
            kind = self._kinds.get(address.partition("/")[0])
            if kind is None:
                self._dead_letter(address, envelope, dead_letters.UNREGISTERED)
                return
            if address in self._services.closed:
                self._dead_letter(address, envelope, dead_letters.ESCALATED)
                return
            cell = self._cells[address] = Cell(self._services, address, kind)
        refused = cell.post(envelope, bounded)
        if refused is not None:
            self._dead_letter(address, envelope, refused)
            if refused == dead_letters.MAILBOX_FULL:
                raise MailboxFull(address, cell.kind.capacity)

    def _dead_letter(self, address: str, envelope: Envelope, reason: str) -> None:
        kind = self._kinds.get(address.partition("/")[0])
        (kind.stats if kind else self._stats[NO_KIND]).dead_letters[reason] += 1
        self.dead_letters.add(DeadLetter(address, envelope.message, reason, envelope.sender))
        reply = envelope.reply
        if reply is not None and not reply.done() and reason != dead_letters.MAILBOX_FULL:
            reply.set_exception(Undeliverable(address, reason))

    # -- services for cells and actors -------------------------------------------

    def _spawn(self, coroutine: Coroutine[Any, Any, None], address: str,
               context: contextvars.Context) -> asyncio.Task[None]:
        assert self._group is not None
        # A fresh context (`lanes.tenant_context`): an actor does not inherit the contextvars (trace context
        # included) of whichever sender happened to wake it.
        return self._group.create_task(coroutine, name=address, context=context)

    def _forget(self, cell: Cell) -> None:
        if self._cells.get(cell.address) is cell:
            del self._cells[cell.address]
            if self._services.closing and not self._cells:
                self._emptied.set()

    def _schedule(self, address: str, key: Hashable, message: Any, delay: float,
                  on_behalf_of: Cause | None = None) -> None:
        if self._services.closing:
            return
        context: TimerTrace = None
        if self._tracing.enabled:
            context = self._tracing.armed()
            if on_behalf_of is not None and on_behalf_of.sampled:
                context = (on_behalf_of.context, context) if context is not None else on_behalf_of.context
        self._timers.schedule(address, key, message, delay, context)

    def _timer_due(self, address: str, message: Any, context: TimerTrace) -> None:
        # Timer messages skip the mailbox bound: an actor's own keyed timers
        # are few, and dropping one (a lease's expiry) would be a silent bug.
        # The delivery continues the trace that armed it (a child, and a link that says so), or the cause it
        # was armed on behalf of (a child of that, linked to the one that armed it).
        parent, link = context if isinstance(context, tuple) else (context, context)
        self._tell(address, message, address, None, (link,) if link is not None else (), bounded=False,
                   parent=parent)

    def _escalated(self, address: str, error: BaseException) -> None:
        if self._on_escalation is None:
            return
        try:
            self._on_escalation(address, error)
        except Exception:
            log.exception("escalation callback failed for %s", address)

    def _occupancy(self) -> Iterator[tuple[str, int]]:
        for cell in self._cells.values():
            yield cell.kind.name, cell.depth()


def _slow_ask(reply: asyncio.Future[Any], kind: Kind | None) -> None:
    if kind is not None and not reply.done():
        kind.stats.slow_asks += 1


async def _reply(address: str, reply: asyncio.Future[Any], timeout: float, kind: Kind | None) -> Any:
    if math.isinf(timeout):
        # No deadline: the answer (or the error of a kill or a dead letter) always comes. Only count the slow ones.
        slow = asyncio.get_running_loop().call_later(DEFAULT_ASK_TIMEOUT, _slow_ask, reply, kind)
        try:
            return await reply
        finally:
            slow.cancel()
    deadline = asyncio.timeout(timeout)
    try:
        async with deadline:
            return await reply
    except TimeoutError:
        if deadline.expired():
            raise AskTimeout(address, timeout) from None
        raise
