"""Whether a Client or an ExporterAccessPolicy is valid: one pure function per kind, and their `Rule`s.

The operator writes the verdict as the object's `Valid` condition (the
`validity` actor, registered per rule in lessor/app/operator.py) and the
admission webhook denies the same errors (lessor.admission checks for
policies): one rule, one place.

Reasons (besides the shared `InvalidDuration` and `InvalidField` of
`validity`): `InvalidSelector` (a missing or malformed label selector),
`InvalidRule` (a policy rule that can never apply, or is not an object).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import timedelta
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.views.leasing import ClientView, PolicyView
from lessor.model.selectors import SelectorError, format_selector, parse_selector

from ..api import CLIENT, POLICY
from ..validity import INVALID_DURATION, FieldError, Rule
from .access_policy import compile_policies
from .spec import parse_go_duration
from .wording import summarize_policy

INVALID_SELECTOR = "InvalidSelector"
INVALID_RULE = "InvalidRule"


def _spec(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return mapping_at(obj, "spec")


def _selector_errors(raw: Any, field: str) -> list[FieldError]:
    try:
        parse_selector(raw, field)
    except SelectorError as err:
        return [FieldError(cause.field, cause.message, INVALID_SELECTOR) for cause in err.causes]
    return []


# --- Client ---------------------------------------------------------------------------------


def client_errors(client: Mapping[str, Any]) -> list[FieldError]:
    """A Client is labels and an optional `spec.username`; the CRD checks nearly all of it."""
    username = _spec(client).get("username")
    if username is not None and not isinstance(username, str):
        return [FieldError("spec.username", f"must be a string, not {type(username).__name__}")]
    return []


# --- ExporterAccessPolicy -------------------------------------------------------------------


def policy_errors(policy: Mapping[str, Any]) -> list[FieldError]:
    """Everything that makes a policy (or one of its rules) apply to nothing, or not parse.

    Once a namespace has a policy only the clients some policy admits may
    lease there, so a policy that silently admits no one locks a lab out.
    """
    spec = _spec(policy)
    errors: list[FieldError] = []
    if spec.get("exporterSelector") is None:
        errors.append(FieldError("spec.exporterSelector", "missing: the policy would apply to no exporter; "
                                 "{} applies it to all", INVALID_SELECTOR))
    else:
        errors += _selector_errors(spec["exporterSelector"], "spec.exporterSelector")
    rules = spec.get("policies")
    if rules is not None and not isinstance(rules, list):
        return [*errors, FieldError("spec.policies", "must be a list", INVALID_RULE)]
    for index, rule in enumerate(rules or ()):
        errors += _rule_errors(f"spec.policies[{index}]", rule)
    return errors


def _rule_errors(field: str, rule: Any) -> list[FieldError]:
    if not isinstance(rule, Mapping):
        return [FieldError(field, "must be an object", INVALID_RULE)]
    errors: list[FieldError] = []
    priority = rule.get("priority")
    if priority is not None and (not isinstance(priority, int) or isinstance(priority, bool)):
        errors.append(FieldError(f"{field}.priority", "must be an integer"))
    sources = rule.get("from")
    if not isinstance(sources, list) or not sources:
        errors.append(FieldError(f"{field}.from", "empty: the rule would admit no client; list clientSelectors, "
                                 "{} admits all", INVALID_RULE))
    for position, source in enumerate(sources if isinstance(sources, list) else ()):
        where = f"{field}.from[{position}].clientSelector"
        raw = source.get("clientSelector") if isinstance(source, Mapping) else None
        if raw is None:
            errors.append(FieldError(where, "missing: this entry matches no client; {} matches all", INVALID_SELECTOR))
        else:
            errors += _selector_errors(raw, where)
    raw_maximum = rule.get("maximumDuration")
    if raw_maximum is not None:
        where = f"{field}.maximumDuration"
        try:
            if parse_go_duration(raw_maximum, where) <= timedelta(0):
                errors.append(FieldError(where, f"must be positive, not {raw_maximum} (leave it out for no limit)",
                                         INVALID_DURATION))
        except (ValueError, OverflowError) as err:
            errors.append(FieldError(where, str(err).removeprefix(f"{where}: "), INVALID_DURATION))
    return errors


def _policy_summary(obj: Mapping[str, Any]) -> str:
    return summarize_policy(compile_policies([obj]).policies[0])


def _policy_shown(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    """The policy's selector as kubectl prints one, for the Exporters column."""
    return {"exporterSelector": format_selector(PolicyView.of(obj).exporter_selector)}


CLIENT_RULE = Rule(CLIENT, client_errors, view=ClientView)
POLICY_RULE = Rule(POLICY, policy_errors, summary=_policy_summary, shown=_policy_shown, view=PolicyView)
