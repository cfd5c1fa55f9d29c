"""Kubernetes Events, as actors see them: `record` and forget.

An actor tells its `Context.events` what a user would want to read in
`kubectl describe`: a lease granted, pending or ended, a claim bound or
ready, a handle created, a resource the API server refused. The reason is
the condition reason the actor reports in the object's status (DESIGN.md
section 6). Recording never blocks, never raises and never writes here: the
app's recorder (`lessor.events.recorder`) aggregates repeats into an EventSeries,
rate-limits per object, counts Normal events past their namespace's storm
budget into one summary Event per reason (Warnings are always written) and
writes `events.k8s.io/v1` Events in the background; the default `NO_EVENTS`
records nothing (unit tests). So an Event may not reach `kubectl describe`
of its own object in a storm: what a user must see there belongs in the
object's conditions too (a lease's Pending reason is), or in a Warning.

Where a status write changes conditions, `record_transitions` compares the
conditions before and after and records what changed, so the call site is
one line. For a ResourceProvider's `Valid` condition (written by the
provider's actor), call after the status write that changes it:

    record_transitions(self.ctx.events, PROVIDER, self.obj, old_conditions, new_conditions)

which records `Valid=False` as a Warning with its reason and message (and
`Valid=True` once it is valid again as a Normal `Valid`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from lessor.model.views.conditions import Condition

from .api import Kind

log = logging.getLogger(__name__)

NORMAL = "Normal"
WARNING = "Warning"

# Conditions that are bad news when True.
_BAD_WHEN_TRUE = frozenset({"Invalid", "Unsatisfiable", "Throttled"})
# Conditions whose every change is news; others are recorded only when they go wrong or recover.
_ANNOUNCED = frozenset({"Ready", "Bound"})
# False/Unknown reasons that are progress, not trouble: Normal, or not worth an event at all.
_ORDINARY_FALSE = frozenset({"Released", "Expired", "Binding", "Scheduled"})
_QUIET = frozenset({"NotBound", "ResourcesNotReady", "NotValid"})
"""Waiting states every claim passes through (the Ready/Bound event that follows says more), and
Bound=False because the claim is not valid (the Valid event says why)."""

# The `action` of each event: what lessor did or tried regarding the object.
ACTIONS = {"Ready": "Provision", "Bound": "Bind", "Valid": "Validate", "Rendered": "Render", "Throttled": "Throttle"}


class Recorder(Protocol):
    def record(self, kind: Kind, obj: Mapping[str, Any] | None, type: str, reason: str, note: str,
               action: str) -> None:
        """Record an event regarding `obj` (of `kind`, as last read or written). Returns at once."""
        ...


class NoEvents:
    """Records nothing: the default for actors built without an app (unit tests)."""

    def record(self, kind: Kind, obj: Mapping[str, Any] | None, type: str, reason: str, note: str,
               action: str) -> None:
        return None


NO_EVENTS: Recorder = NoEvents()


def severity(condition: str, status: bool | str, reason: str) -> str:
    """Normal for progress; Warning for what a user has to act on, or has lost."""
    true = status is True or status == "True"
    if condition in _BAD_WHEN_TRUE:
        return WARNING if true else NORMAL
    return NORMAL if true or reason in _ORDINARY_FALSE else WARNING


def record_transitions(events: Recorder, kind: Kind, obj: Mapping[str, Any] | None,
                       before: Iterable[Mapping[str, Any]] | None,
                       after: Iterable[Mapping[str, Any]] | None) -> None:
    """One event per condition whose status or reason changed between `before` and `after`.

    Recorded: every change of Ready and Bound, any condition going wrong
    (Warning), and a condition recovering from wrong. Not recorded: the
    waiting states a claim passes through on its way (`_QUIET`), and a
    condition that starts out fine (a claim valid from the start).
    """
    try:
        old = {c.type: c for c in _typed(before)}
        for condition in _typed(after):
            type_, status, reason = condition.type, condition.status, condition.reason
            previous = old.get(type_)
            if previous is not None and (previous.status, previous.reason) == (status, reason):
                continue
            level = severity(type_, status, reason)
            was_bad = previous is not None and severity(type_, previous.status, previous.reason) == WARNING
            if reason in _QUIET or (type_ not in _ANNOUNCED and level == NORMAL and not was_bad):
                continue
            events.record(kind, obj, level, reason, condition.message, ACTIONS.get(type_, type_))
    except Exception:  # an event is never worth failing an actor for
        log.debug("recording condition events failed", exc_info=True)


def _typed(conditions: Iterable[Mapping[str, Any]] | None) -> list[Condition]:
    return [Condition.of(c) for c in conditions or () if isinstance(c, Mapping)]
