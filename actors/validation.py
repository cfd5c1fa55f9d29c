"""Whether a Client, an ExporterAccessPolicy or a ResourceProvider is valid: one pure function per kind.

The operator writes the verdict as the object's `Valid` condition (`valid`
actor) and the admission webhook denies the same errors (lessor.admission
checks for policies and providers): one rule, one place. Each error names
its field the way the manifest spells it (`spec.policies[0].from`) and has
a CamelCase reason; the condition takes the first error's reason and every
error's message.

Reasons: `InvalidSelector` (a missing or malformed label selector),
`InvalidRule` (a policy rule that can never apply, or is not an object),
`InvalidDuration`, `InvalidTemplate` (a Jinja2 template or expression that
does not compile), `InvalidSchema`, `InvalidRegex`, `KindNotFixed` (a
provider that does not fix the kind it creates), `InvalidField` (any other
malformed field); `Valid` when there is none.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.jsonpatch import field_path
from lessor.model.selectors import SelectorError, parse_selector

from .conditions import Condition, new_condition
from .leasing.spec import parse_go_duration
from .provisioning.provider import provider_from

INVALID_SELECTOR = "InvalidSelector"
INVALID_RULE = "InvalidRule"
INVALID_DURATION = "InvalidDuration"
INVALID_TEMPLATE = "InvalidTemplate"
INVALID_SCHEMA = "InvalidSchema"
INVALID_REGEX = "InvalidRegex"
KIND_NOT_FIXED = "KindNotFixed"
INVALID_FIELD = "InvalidField"


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


# --- ResourceProvider -----------------------------------------------------------------------


def provider_errors(provider: Mapping[str, Any]) -> list[FieldError]:
    """The problems `provider_from` finds (the provider the claims, pools and handles use), by field."""
    return [_provider_error(text) for text in provider_from(provider).errors]


def _provider_error(text: str) -> FieldError:
    """`spec.override/metadata/name: message` (as the compiled provider says it) as a FieldError."""
    field, _, message = text.partition(": ")
    prefix, slash, pointer = field.partition("/")
    if slash:  # a string inside default or override: a template that does not compile
        return FieldError(field_path(prefix, slash + pointer), message, INVALID_TEMPLATE)
    return FieldError(field, message, _provider_reason(field, message))


def _provider_reason(field: str, message: str) -> str:
    if field.startswith("spec.validation.openAPIV3Schema"):
        return INVALID_SCHEMA
    if (field.startswith("spec.matchIgnore") or field.endswith(".pathMatch")) and "regular expression" in message:
        return INVALID_REGEX
    if field.startswith("spec.lifespan"):
        return INVALID_DURATION
    if field.startswith(("spec.validation.checks", "spec.readinessCheck")):
        return INVALID_TEMPLATE
    if field == "spec.override" and "apiVersion" in message:
        return KIND_NOT_FIXED
    return INVALID_FIELD
