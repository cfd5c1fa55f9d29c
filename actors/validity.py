"""The validity actor: one Client, ExporterAccessPolicy or ResourceProvider, and its `Valid` condition.

These kinds are read by the lease, claim, pool and handle actors, which
report a broken one where it is used; this actor tells the object's own
author, on the object: `Valid` True, or False with the reason and message
of the kind's `Rule` (the same pure functions the admission webhook denies
with). The rules are the domains': `leasing.validity` (Client,
ExporterAccessPolicy) and `provisioning.validity` (ResourceProvider); the
app registers one actor kind per rule (lessor/app/operator.py). Here is only
what every rule shares: `FieldError`, `valid_condition`, `Rule` and the
actor.

Each error names its field the way the manifest spells it
(`spec.policies[0].from`) and has a CamelCase reason; the condition takes
the first error's reason and every error's message. Reasons shared by the
kinds: `InvalidDuration`, `InvalidField` (any other malformed field); the
others are the domains'. `Valid` when there is none.

State: the object as last seen. Messages: `Observed` of the object (the
topology routes each change of it here); `Throttled`, from whoever holds the
object back (a provider whose templates keep running out of time,
`provisioning.throttle`): a `Throttled` condition, True until the hold ends. Writes: the object's `Valid`
condition, only when it changes (status writes do not change a spec, so a
status-only change costs no write), and an Event when it goes wrong or
recovers. A kind whose rule says so (providers) is logged once per verdict
when invalid, not on every event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import newer
from lessor.model.views.conditions import StatusView

from .api import Kind
from .conditions import FALSE, VALID, Condition, merge_condition, new_condition, same_conditions
from .context import Context
from .events import record_transitions
from .object_actor import ObjectActor
from .observed import Observed
from .queries import TOPOLOGY, GetObject

INVALID_DURATION = "InvalidDuration"
INVALID_FIELD = "InvalidField"
THROTTLED = "Throttled"
TEMPLATE_TIME_LIMIT = "TemplateTimeLimit"
WITHIN_TIME_LIMIT = "WithinTimeLimit"

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FieldError:
    """One thing wrong with an object: the field as the manifest spells it, what is wrong, and the reason."""

    field: str
    message: str
    reason: str = INVALID_FIELD

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"


def valid_condition(errors: Sequence[FieldError], *, now: datetime, generation: int | None,
                    summary: str = "the spec is valid") -> Condition:
    """`Valid`: True with `summary`, or False with the first error's reason and every error, each naming its field."""
    if not errors:
        return new_condition("Valid", True, "Valid", summary, now=now, observed_generation=generation)
    return new_condition("Valid", False, errors[0].reason, "; ".join(map(str, errors)), now=now,
                         observed_generation=generation)


@dataclass(frozen=True, slots=True)
class Throttled:
    """The object is held back for `seconds` (0: no longer), and why: its `Throttled` condition and an Event."""

    message: str
    seconds: float


@dataclass(frozen=True, slots=True)
class Rule:
    """What makes one kind valid."""

    kind: Kind
    errors: Callable[[Mapping[str, Any]], Sequence[FieldError]]
    log_refusals: bool = False
    summary: Callable[[Mapping[str, Any]], str] | None = None
    """What a valid object does, as its `Valid` message (what `kubectl get` shows in Message)."""
    shown: Callable[[Mapping[str, Any]], Mapping[str, Any]] | None = None
    """Status fields written with `Valid` for `kubectl get`'s columns (what a JSONPath cannot format)."""
    view: type[StatusView] = StatusView
    """The kind's view (`ObjectActor.view_kind`)."""


class ValidActor(ObjectActor):
    __slots__ = ("rule", "kind", "view_kind")
    condition = VALID  # given up on a version (`guard`): Valid=False, InternalError

    def __init__(self, address: str, ctx: Context, rule: Rule) -> None:
        super().__init__(address, ctx)
        self.rule = rule
        self.kind = rule.kind
        self.view_kind = rule.view

    async def started(self) -> None:
        self.obj = await self.ask(TOPOLOGY, GetObject(self.rule.kind.kind, self.namespace, self.name))
        await self._judge()

    async def receive(self, message: Any) -> Any:
        if await self.still_parked(message):
            return None
        match message:
            case Observed(object=None):
                self.stop()
            case Observed(object=Mapping() as obj) if newer(obj, self.obj):
                self.obj = obj
                await self._judge()
            case Observed():
                pass  # an older snapshot than our own write
            case Throttled(message=text, seconds=seconds):
                await self._throttled(text, seconds)
            case _:
                self.unexpected(message)

    async def _throttled(self, text: str, seconds: float) -> None:
        """`Throttled` True (reason TemplateTimeLimit) while held back, then False (WithinTimeLimit)."""
        if self.obj is None:
            return
        held = seconds > 0
        seen = self.seen_as(StatusView)
        assert seen is not None
        current = list(seen.condition_dicts)
        if not held and seen.condition(THROTTLED) is None:
            return  # never held: no condition to clear
        condition = new_condition(THROTTLED, held, TEMPLATE_TIME_LIMIT if held else WITHIN_TIME_LIMIT,
                                  text if held else "its templates run again", now=self.ctx.now(),
                                  observed_generation=seen.meta.generation)
        conditions = merge_condition(current, condition)
        if same_conditions(current, conditions):
            return
        if held:
            log.warning("%s %s/%s: %s", self.rule.kind.kind, self.namespace, self.name, text)
            self.schedule(THROTTLED, Throttled("", 0.0), delay=seconds)
        if await self.write_status({"conditions": conditions}):
            record_transitions(self.ctx.events, self.rule.kind, self.obj, current, conditions)

    async def _judge(self) -> None:
        if self.obj is None:
            self.stop()
            return
        seen = self.seen_as(StatusView)
        assert seen is not None
        errors = self.rule.errors(self.obj)
        current = list(seen.condition_dicts)
        summary = self.rule.summary(self.obj) if self.rule.summary and not errors else "the spec is valid"
        condition = valid_condition(errors, now=self.ctx.now(), generation=seen.meta.generation, summary=summary)
        conditions = merge_condition(current, condition)
        shown = self.rule.shown(self.obj) if self.rule.shown else {}
        if same_conditions(current, conditions) and all(seen.status.get(k) == v for k, v in shown.items()):
            return
        if errors and self.rule.log_refusals:
            log.warning("%s %s/%s is invalid and not used (%s): %s", self.rule.kind.kind, self.namespace,
                        self.name, condition["reason"], condition["message"])
        elif self.rule.log_refusals and _was_invalid(seen):
            log.info("%s %s/%s is valid again", self.rule.kind.kind, self.namespace, self.name)
        if not await self.write_status({"conditions": conditions, **shown}):
            self.stop()
            return
        record_transitions(self.ctx.events, self.rule.kind, self.obj, current, conditions)


def _was_invalid(seen: StatusView) -> bool:
    found = seen.condition(VALID)
    return found is not None and found.status == FALSE
