"""The validity actor: one Client, ExporterAccessPolicy or ResourceProvider, and its `Valid` condition.

These kinds are read by the lease, claim, pool and handle actors, which
report a broken one where it is used; this actor tells the object's own
author, on the object: `Valid` True, or False with the reason and message
of `validation` (the same functions the admission webhook denies with).

State: the object as last seen. Messages: `Observed` of the object (the
topology routes each change of it here). Writes: the object's `Valid`
condition, only when it changes (status writes do not change a spec, so a
status-only change costs no write), and an Event when it goes wrong or
recovers. A provider found invalid is logged once per verdict, not on
every event.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lessor.model.fields import generation, newer

from .leasing.access_policy import compile_policies
from .api import CLIENT, POLICY, PROVIDER, Kind
from .conditions import VALID, find_condition, merge_condition, same_conditions
from .context import Context
from .events import record_transitions
from .leasing.wording import summarize_policy
from .object_actor import ObjectActor
from .observed import Observed
from .provisioning.provider import provider_from
from .queries import TOPOLOGY, GetObject
from .validation import FieldError, client_errors, policy_errors, provider_errors, valid_condition

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Rule:
    """What makes one kind valid."""

    kind: Kind
    errors: Callable[[Mapping[str, Any]], Sequence[FieldError]]
    log_refusals: bool = False
    summary: Callable[[Mapping[str, Any]], str] | None = None
    """What a valid object does, as its `Valid` message (what `kubectl get` shows in Message)."""


def _policy_summary(obj: Mapping[str, Any]) -> str:
    return summarize_policy(compile_policies([obj]).policies[0])


def _provider_summary(obj: Mapping[str, Any]) -> str:
    provider = provider_from(obj)
    if provider.kind and provider.api_version:
        return f"creates {provider.kind} ({provider.api_version}) for each claim's resource"
    return "creates the kind its override's templates render, for each claim's resource"


RULES: Mapping[str, Rule] = {
    CLIENT.kind: Rule(CLIENT, client_errors),
    POLICY.kind: Rule(POLICY, policy_errors, summary=_policy_summary),
    PROVIDER.kind: Rule(PROVIDER, provider_errors, log_refusals=True, summary=_provider_summary),
}


class ValidActor(ObjectActor):
    __slots__ = ("rule", "kind")
    condition = VALID  # given up on a version (`guard`): Valid=False, InternalError

    def __init__(self, address: str, ctx: Context, rule: Rule) -> None:
        super().__init__(address, ctx)
        self.rule = rule
        self.kind = rule.kind

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
            case _:
                self.unexpected(message)

    async def _judge(self) -> None:
        if self.obj is None:
            self.stop()
            return
        errors = self.rule.errors(self.obj)
        current = (self.obj.get("status") or {}).get("conditions")
        summary = self.rule.summary(self.obj) if self.rule.summary and not errors else "the spec is valid"
        condition = valid_condition(errors, now=self.ctx.now(), generation=generation(self.obj), summary=summary)
        conditions = merge_condition(current, condition)
        if same_conditions(current, conditions):
            return
        if errors and self.rule.log_refusals:
            log.warning("%s %s/%s is invalid and not used (%s): %s", self.rule.kind.kind, self.namespace,
                        self.name, condition["reason"], condition["message"])
        elif self.rule.log_refusals and _was_invalid(current):
            log.info("%s %s/%s is valid again", self.rule.kind.kind, self.namespace, self.name)
        if not await self.write_status({"conditions": conditions}):
            self.stop()
            return
        record_transitions(self.ctx.events, self.rule.kind, self.obj, current, conditions)


def _was_invalid(conditions: Any) -> bool:
    found = find_condition(conditions, VALID)
    return found is not None and found.get("status") == "False"
