"""Resolving a lease against its namespace: which exporters it may have, through which policy, in what order.

Pure functions over typed values. The caller (the lease actor) gathers a
snapshot: the lease's request, the client's labels, the exporters of the
namespace as `ExporterState`s (`exporter_state.py`), and the namespace's
policies compiled once into a `PolicySet` (`access_policy.py`); `resolve`
answers with a terminal `Verdict` (the lease ends `Invalid`/`Unsatisfiable`)
or a `Plan`: the candidates in the order to ask their exporter actors, and
the `Pending` reason to show if none can be taken. The words of each
condition are in `wording.py`.

The rules, in the order they are applied (docs/leasing.md has them with
their reasons and the corner cases of the seed analysis):

- `exporterRef` pins one exporter: `ExporterNotFound`, `SelectorMismatch`,
  `ExporterDisabled` (unless `allowDisabled`). A selector matching no
  exporter is `ExporterNotFound`; one whose exporters are all disabled,
  `AllDisabled`.
- No policy in the namespace: every usable exporter is approved at
  priority 0, not spot. A missing Client is admitted by nothing (`NoAccess`).
- A policy rule approves an exporter when the policy's `exporterSelector`
  matches it, one of the rule's `from[].clientSelector`s matches the
  client, and the requested duration is within `maximumDuration` (an
  unbounded lease passes no limit). Each exporter keeps its best approval:
  non-spot before spot, then the highest priority.
- No approval: `DurationExceeded` when some rule admitted the client to a
  usable exporter but was too short (naming the longest limit), else
  `NoAccess` (listing the policies that exist).
- Candidates: free, then evictable (a spot holder, when this lease's
  approval is not spot; lowest-priority holder first), then leased, then
  free but not ready, then offline; within each, non-spot before spot,
  higher priority, then name. The `Pending` reason is the one of the first
  candidate's group: `NotAvailable`, `NotReady` or `Offline`; a begin in
  the future makes it `Scheduled`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from enum import Enum

from .access_policy import Approval, PolicySet, Rule, approvals
from .exporter_state import ExporterState, Holder, may_take
from .spec import ConditionType, LeaseRequest, Reason, Verdict
from .wording import (
    ALLOW_DISABLED_HINT,
    duration_exceeded_message,
    list_labels,
    list_names,
    no_access_message,
    no_client_message,
    pending_message,
    scheduled_message,
)

__all__ = [
    "Candidate",
    "Pending",
    "Plan",
    "State",
    "duration_exceeded",
    "resolve",
]


class State(Enum):
    """Where a candidate stands for this lease, best first."""

    FREE = 0  # online, ready and unheld (or held by this very lease): can be granted now
    EVICTABLE = 1  # held by a spot lease and this lease's approval is not spot: can be taken by eviction
    HELD = 2  # leased to someone this lease cannot evict: wait in its queue
    NOT_READY = 3  # unheld but its exporterStatus is not ready (hooks running)
    OFFLINE = 4  # no recent heartbeat, or exporterStatus Offline

    @property
    def pending(self) -> Reason:
        """The Pending reason when the best candidate is in this state and cannot be had."""
        if self is State.OFFLINE:
            return Reason.OFFLINE
        if self is State.NOT_READY:
            return Reason.NOT_READY
        return Reason.NOT_AVAILABLE  # free or evictable ones that were taken first end up leased

    @property
    def words(self) -> str:
        """How a Pending message names the exporters in this state."""
        return _WORDS[self]


_WORDS = {
    State.FREE: "free a moment ago",
    State.EVICTABLE: "leased with spot access",
    State.HELD: "leased",
    State.NOT_READY: "not ready for a new lease (hooks running)",
    State.OFFLINE: "offline",
}


@dataclass(frozen=True, slots=True)
class Candidate:
    """An approved exporter this lease may take (or wait for), with the terms of its best approval."""

    exporter: str
    priority: int
    spot: bool
    state: State
    holder: Holder | None = None
    policy: str | None = None
    rule: int | None = None

    @property
    def takeable(self) -> bool:
        return self.state is State.FREE or self.state is State.EVICTABLE

    @property
    def sort_key(self) -> tuple[int, int, bool, int, str]:
        """State first (free before leased), lowest-priority spot holder first among evictions,
        then non-spot before spot, higher priority, name."""
        holder_priority = self.holder.priority if self.state is State.EVICTABLE and self.holder else 0
        return (self.state.value, holder_priority, self.spot, -self.priority, self.exporter)


@dataclass(frozen=True, slots=True)
class Pending:
    reason: Reason
    message: str
    news: bool = True
    """Worth an Event: not while every exporter it waits for is one whose agent has never reported (a lab
    applied before its agents start is not news; the condition says it all the same)."""

    type = ConditionType.PENDING


@dataclass(frozen=True, slots=True)
class Plan:
    """The candidates, best first, and the Pending reason if none of them can be had now.

    With `scheduled_until` set the lease is `Scheduled`: take nothing before
    then, and resolve again at that time (exporters change meanwhile).
    """

    candidates: tuple[Candidate, ...]
    pending: Pending
    scheduled_until: datetime | None = None

    @property
    def takeable(self) -> tuple[Candidate, ...]:
        if self.scheduled_until is not None:
            return ()
        return tuple(candidate for candidate in self.candidates if candidate.takeable)


def resolve(
    request: LeaseRequest,
    client_labels: Mapping[str, str] | None,
    exporters: Iterable[ExporterState],
    policies: PolicySet,
    *,
    now: datetime,
) -> Verdict | Plan:
    """Resolve a valid lease request against a snapshot of its namespace.

    `client_labels` is None when the Client named by `spec.clientRef` does not exist.
    """
    usable = _usable(request, exporters)
    if isinstance(usable, Verdict):
        return usable
    if client_labels is None:
        return Verdict(ConditionType.UNSATISFIABLE, Reason.NO_ACCESS, no_client_message(request))

    requested = request.requested_duration(now)
    approved, closed = approvals(usable, client_labels, policies, requested)
    if not approved:
        if closed:
            return duration_exceeded(request, closed, now)
        return Verdict(ConditionType.UNSATISFIABLE, Reason.NO_ACCESS,
                       no_access_message(request, client_labels, usable, policies))

    candidates = []
    for exporter in usable:
        approval = approved.pop(exporter.name, None)  # pop: a name given twice is a candidate once
        if approval is None:
            continue
        state = _state(exporter, approval, own=request.name)
        candidates.append(Candidate(exporter.name, approval.priority, approval.spot, state, exporter.holder,
                                    approval.policy, approval.rule))
    candidates.sort(key=lambda candidate: candidate.sort_key)
    ordered = tuple(candidates)

    if request.scheduled(now):
        assert request.begin is not None
        return Plan(ordered, Pending(Reason.SCHEDULED, scheduled_message(request)), request.begin)
    pending = _pending(ordered)
    if pending.reason == Reason.OFFLINE:
        unseen = {exporter.name for exporter in usable if not exporter.seen}
        if all(c.exporter in unseen for c in ordered if c.state is State.OFFLINE):
            pending = Pending(pending.reason, pending.message, news=False)
    return Plan(ordered, pending)


def _usable(request: LeaseRequest, exporters: Iterable[ExporterState]) -> list[ExporterState] | Verdict:
    unsatisfiable = ConditionType.UNSATISFIABLE
    if request.exporter_ref is not None:
        name = request.exporter_ref
        pinned = next((exporter for exporter in exporters if exporter.name == name), None)
        if pinned is None:
            return Verdict(unsatisfiable, Reason.EXPORTER_NOT_FOUND,
                           f"spec.exporterRef.name: there is no exporter {name} in the namespace")
        if request.selector is not None and not request.selector.matches(pinned.labels):
            return Verdict(unsatisfiable, Reason.SELECTOR_MISMATCH,
                           f"spec.exporterRef.name: exporter {name} (labels {list_labels(pinned.labels)}) does not "
                           f"match spec.selector ({request.selector})")
        if not pinned.enabled and not request.allow_disabled:
            return Verdict(unsatisfiable, Reason.EXPORTER_DISABLED,
                           f"spec.exporterRef.name: exporter {name} is disabled (spec.enabled: false); "
                           + ALLOW_DISABLED_HINT.format("it"))
        return [pinned]
    selector = request.selector
    assert selector is not None, "parse_lease refuses a lease with neither selector nor exporterRef"
    matching = [exporter for exporter in exporters if selector.matches(exporter.labels)]
    if not matching:
        return Verdict(unsatisfiable, Reason.EXPORTER_NOT_FOUND,
                       f"spec.selector: no exporter in the namespace matches {selector}")
    if request.allow_disabled:
        return matching
    enabled = [exporter for exporter in matching if exporter.enabled]
    if not enabled:
        return Verdict(unsatisfiable, Reason.ALL_DISABLED,
                       f"spec.selector: every exporter matching {selector} is disabled "
                       f"({list_names([exporter.name for exporter in matching])}); "
                       + ALLOW_DISABLED_HINT.format("them"))
    return enabled


def _state(exporter: ExporterState, approval: Approval, *, own: str) -> State:
    if not exporter.online:
        return State.OFFLINE
    holder = exporter.holder
    if holder is not None and holder.lease != own:  # disabled ones were filtered out by `_usable` already
        takeable = may_take(enabled=True, allow_disabled=True, holder=holder, spot=approval.spot)
        return State.EVICTABLE if takeable else State.HELD
    if holder is None and not exporter.ready:
        return State.NOT_READY
    return State.FREE


def _pending(candidates: Sequence[Candidate]) -> Pending:
    """The reason of the best candidate's state, with every candidate's state in the message."""
    reason = candidates[0].state.pending
    return Pending(reason, pending_message(candidates, reason))


def duration_exceeded(request: LeaseRequest, closed: Sequence[Rule], now: datetime) -> Verdict:
    """Named after the most generous of the rules that admitted the client but were too short (the webhook's too)."""
    longest = max(closed, key=lambda rule: (rule.maximum or timedelta(0), rule.priority))
    return Verdict(ConditionType.UNSATISFIABLE, Reason.DURATION_EXCEEDED,
                   duration_exceeded_message(request, longest, now))
