"""The conversation between lease actors and exporter actors.

An exporter is handed out in two steps so that no write is ever wasted and
no lease holds two exporters:

    lease ──Want──────────► exporter      queue me (priority, age)
    lease ◄─────────Offer── exporter      you are my best waiter; the exporter is reserved
    lease ──Accept/Decline► exporter      the lease takes the best offer it holds
    lease ◄───────Granted── exporter      after status.leaseRef was written (the commit point)

`Withdraw` leaves a queue, `Release` gives a held exporter back. A lease
that is killed mid-conversation loses nothing: offers expire, and the
restarted lease asks again; an exporter that restarts tells the leases
waiting on it (`ExporterRestarted`) to queue again, and one whose
availability changes tells them (`AvailabilityChanged`) to re-check why they wait.

No lease is ever named by two exporters, because a lease never accepts an
offer while the fate of a commit naming it may still be open somewhere:

- it never gives up on an `Accept` by the clock; only the exporter's answer
  (`Granted`, `OfferWithdrawn`), its restart (whose incarnation starts after
  every commit write of the previous one has settled, `inflight.py`) or its
  deletion closes an accept;
- a lease incarnation that starts after a kill (its previous incarnation may
  have accepted somewhere), or while a commit naming it is in flight, first
  asks every candidate to `Settle`: each
  answers after whatever it was doing, `Granted` if it holds the lease, else
  `NotHeld`; offers wait until all have answered.

The interleavings and their outcomes are tabled in docs/architecture.md,
"Interleavings".
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

NO_NAMES: frozenset[str] = frozenset()
"""The empty set of names, shared: `frozenset()` makes a new one of 216 bytes each time, and every exporter and
lease actor holds two or one that are nearly always empty."""


# --- to the exporter actor ---------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Want:
    lease: str
    priority: int
    spot: bool  # the lease's approval for this exporter is spot: it may be evicted, it evicts no one
    created: datetime
    allow_disabled: bool = False


@dataclass(frozen=True, slots=True)
class Withdraw:
    lease: str


@dataclass(frozen=True, slots=True)
class Accept:
    lease: str
    ticket: int


@dataclass(frozen=True, slots=True)
class Decline:
    lease: str
    ticket: int


@dataclass(frozen=True, slots=True)
class Release:
    lease: str


@dataclass(frozen=True, slots=True)
class Settle:
    """Where do I stand with you? Answered, after any commit in hand, `Granted` or `NotHeld`."""

    lease: str


@dataclass(frozen=True, slots=True)
class Confirm:
    """A restarted lease whose status says it holds the exporter asks whether it still does
    (a `Granted` or `Evicted` meant for it may have died with its previous incarnation)."""

    lease: str


# --- to the lease actor ------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Offer:
    exporter: str
    ticket: int
    evicts: str | None  # the spot lease that loses the exporter if this offer is accepted


@dataclass(frozen=True, slots=True)
class OfferWithdrawn:
    exporter: str
    ticket: int


@dataclass(frozen=True, slots=True)
class Granted:
    exporter: str


@dataclass(frozen=True, slots=True)
class NotHeld:
    """The answer to `Settle`: this exporter does not hold the lease and has no commit for it in flight."""

    exporter: str


@dataclass(frozen=True, slots=True)
class Evicted:
    exporter: str
    by: str


@dataclass(frozen=True, slots=True)
class ExporterRestarted:
    """The exporter's actor restarted and lost its queue and any Accept in flight:
    waiting leases queue again (the exporter itself did not change: their plans stand)."""

    exporter: str


@dataclass(frozen=True, slots=True)
class AvailabilityChanged:
    """The exporter went online or offline, ready or busy (its queue is intact): waiting leases
    re-check their Pending reason."""

    exporter: str
