"""What the app hands every actor: the API, the clock and the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, Generic, Protocol, TypeVar, cast

from lessor.templates.budget import FairQueue

from .api import Api
from .events import NO_EVENTS, Recorder
from .inflight import InFlight


def utcnow() -> datetime:
    return datetime.now(UTC)


class Credentials(Protocol):
    """Mints the tokens of Jumpstarter's tools (lessor.jumpstarter.tokens.Minter); see leasing/credentials.py."""

    endpoint: str

    async def mint(self, kind: str, namespace: str, name: str, uid: str) -> str: ...

    def renew_at(self, token: str) -> float | None:
        """When (epoch seconds) a token should be minted again: before it expires; None when it never does."""
        ...


T = TypeVar("T")


@dataclass(frozen=True, eq=False)
class Slot(Generic[T]):
    """A typed key of `Slots` (as aiohttp's AppKey): a domain declares what it shares and how to make it,
    so the shared actors name no domain and no reader casts."""

    name: str
    make: Callable[[], T]


class Slots:
    """What a domain's actors share within one Context (one operator), each made on first use.

    Per Context, never per process: two operators in one process (the tests run several) share nothing."""

    def __init__(self) -> None:
        self._values: dict[Slot[Any], Any] = {}

    def __getitem__(self, slot: Slot[T]) -> T:
        if slot not in self._values:
            self._values.setdefault(slot, slot.make())
        return cast(T, self._values[slot])


@dataclass(frozen=True)
class Context:
    api: Api
    now: Callable[[], datetime] = utcnow
    operator_namespace: str = "lessor-system"
    heartbeat_timeout: timedelta = timedelta(seconds=60)
    decision_window: float = 0.25
    """Seconds a free exporter collects requests before its first offer, so that leases
    created together are served by priority, not by arrival order."""
    offer_timeout: float = 5.0
    """An offer not answered in this time goes to the next waiter (its lease may have died)."""
    pending_grace: float = 1.0
    """A lease granted within this time never shows Pending: one status write saved."""
    events: Recorder = NO_EVENTS
    """Kubernetes Events for `kubectl describe` (`actors/events.py`); records nothing by default."""
    inflight: InFlight = field(default_factory=InFlight)
    """Commit writes still in flight, by object: an actor's next incarnation waits for them (`inflight.py`)."""
    slots: Slots = field(default_factory=Slots)
    """What a domain's actors share, by the domain's typed `Slot` (the leasing domain's exporter states, the
    provisioning domain's template throttle): owned by this Context, so that the shared actors name no domain."""
    rendering: FairQueue | None = None
    """The operator's render threads (`offload(..., queue=ctx.rendering)`), made at its start and closed at its
    stop; None: the process's, for contexts without an operator (unit tests)."""
    credentials: Credentials | None = None
    """Set while lessor serves Jumpstarter's gRPC protocol: clients and exporters get a token Secret."""
