"""The base class the app subclasses: one instance is one incarnation of an actor."""

from __future__ import annotations

from collections.abc import Hashable
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context

if TYPE_CHECKING:
    from .cell import Cell
    from .tracing import Cause

DEFAULT_ASK_TIMEOUT = 5.0
"""How long an ask waits for its answer, unless the asker or the addressed kind (`register(ask_timeout=)`) says."""


class Actor:
    """Private state plus three hooks; the runtime calls them one at a time, never concurrently.

    `started` runs before the first message of every incarnation: on first
    activation, after a restart (crash, kill or request) and on reactivation
    after passivation. It is where state is rebuilt from the source of truth,
    because nothing else survives: not the instance, not its timers (except
    across passivation), not the message that was being handled.

    The runtime binds the instance to its address after the factory returns,
    so `address`, `tell`, `ask`, `schedule`, `cancel` and `stop` work from
    `started` on, not in `__init__`.
    """

    __slots__ = ("_cell",)

    _cell: Cell

    async def started(self) -> None:
        """Rebuild state; a raise counts as a crash (restart with backoff)."""

    async def receive(self, message: Any) -> Any:
        """Handle one message; the return value is the reply to an ask, a raise is a crash."""
        raise NotImplementedError(f"{type(self).__name__} must define receive()")

    async def stopping(self) -> None:
        """Last words on an orderly stop, restart request or passivation (not after a crash or kill)."""

    def failure_key(self) -> Hashable:
        """What this incarnation works on, for counting failures in a row (say, the version of the input
        it acts on): a failure with another key starts the count of `failed` again. Default: all alike."""
        return None

    async def failed(self, error: Exception, attempts: int) -> bool:
        """Called on the incarnation whose `started` or `receive` just raised `error`, before it is discarded.

        `attempts` counts the failures in a row with the same `failure_key`
        (within the supervision window), this one included; kills are not
        failures. Return True to resume: the incarnation is kept, as it is,
        and goes on with its next message, because it has dealt with the
        failure itself (for instance, given up on the input that keeps
        making it fail, so that it stops crash-looping on it). False, the
        default, restarts it with backoff as always; so does a raise here.
        """
        return False

    @property
    def address(self) -> str:
        return self._cell.address

    @property
    def restarted(self) -> bool:
        """Whether an earlier incarnation of this address ran in this system and ended by a crash, a kill or a
        restart, so that what it sent may still be in flight. False on a first activation (and on the one after
        a stop or passivation, which end only an idle actor, or one whose work is over)."""
        return self._cell.incarnations > 1

    def tell(self, address: str, message: Any, *, coalesce: Hashable | None = None,
             on_behalf_of: Cause | None = None) -> None:
        """Send without waiting; see `ActorSystem.tell`. `on_behalf_of`, a `cause()` kept from an earlier
        message: this send goes on in that message's trace, linked to the one in hand (an offer made on a
        release's turn belongs to the request it answers, and says which release made it possible)."""
        if on_behalf_of is None:
            self._cell.system.tell(address, message, self._cell.address, coalesce)
        else:
            self._cell.system.tell(address, message, self._cell.address, coalesce,
                                    links=(otel_context.get_current(),), parent=on_behalf_of.context)

    def cause(self) -> Cause | None:
        """The trace of the message in hand, to keep for `tell(on_behalf_of=)`; None when tracing is off, or
        when the actor's handler runs outside a system (a test calling `receive` itself)."""
        cell = getattr(self, "_cell", None)
        return cell.system.tracing.cause() if cell is not None else None

    async def ask(self, address: str, message: Any, *, timeout: float | None = None) -> Any:
        """Send and wait for the reply; see `ActorSystem.ask`. Asking oneself would deadlock, so it raises."""
        if address == self._cell.address:
            raise ValueError(f"{address} cannot ask itself: it would wait on its own mailbox")
        return await self._cell.system.ask(address, message, self._cell.address, timeout)

    def schedule(self, key: Hashable, message: Any, *, delay: float | None = None, at: datetime | None = None,
                 on_behalf_of: Cause | None = None) -> None:
        """Send `message` to self after `delay` seconds or at the aware datetime `at`; replaces the timer `key`.
        It fires in the trace that armed it; with `on_behalf_of`, in that cause's trace instead, linked to the
        one in hand (a lease resolving again because a policy arrived goes on in its own story)."""
        if at is not None:
            if delay is not None or at.tzinfo is None:
                raise ValueError("give either delay or a timezone-aware at, not both")
            delay = (at - datetime.now(UTC)).total_seconds()
        elif delay is None:
            raise ValueError("give delay or at")
        self._cell.system.schedule(self._cell.address, key, message, delay, on_behalf_of)

    def cancel(self, key: Hashable) -> bool:
        """Cancel the timer `key`; False if there was none pending."""
        return self._cell.system.timers.cancel(self._cell.address, key)

    def stop(self) -> None:
        """Stop after the current message: `stopping` runs, waiting messages go to dead letters."""
        self._cell.request_stop()

    def restart(self) -> None:
        """Restart after the current message: `stopping` runs, then a new incarnation's `started`;
        waiting messages wait for it. Timers are cancelled, as after a crash."""
        self._cell.request_restart()
