"""What the app hands every actor: the API, the clock and the settings."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Protocol

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
    shared: dict[str, object] = field(default_factory=dict)
    """What a domain's actors share, by a key of the domain's (the leasing domain's exporter states, built once
    per version): kept here, unnamed, so that the shared actors name no domain."""
    credentials: Credentials | None = None
    """Set while lessor serves Jumpstarter's gRPC protocol: clients and exporters get a token Secret."""
