"""What the checks share: field paths as users write them, and what an update changed."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from lessor.actors.validity import FieldError
from lessor.admission.checker import AdmissionRequest
from lessor.admission.results import Cause, CheckResult
from lessor.model.fields import mapping_at
from lessor.model.jsonpatch import field_path
from lessor.model.selectors import SelectorError

__all__ = ["deny_errors", "field_path", "grouped", "name_problem", "operator_field", "problem_cause", "ref_name",
           "selector_causes", "spec", "spec_changed"]

_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def name_problem(name: Any) -> str:
    """Why ``name`` cannot name a lessor object (a DNS subdomain), or ``""``.

    Such a name is never looked up: no object can have it.
    """
    if not isinstance(name, str):
        return "must be a string"
    if len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return (f"{name[:64]!r} is not a valid object name (lowercase letters, digits, '-' and '.', "
                "at most 253 characters)")
    return ""


def ref_name(ref: Any) -> str:
    """The ``name`` of a reference such as ``spec.clientRef``; ``""`` when there is none of type string."""
    name = ref.get("name") if isinstance(ref, Mapping) else None
    return name if isinstance(name, str) else ""


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    return mapping_at(obj, "spec")


def spec_changed(request: AdmissionRequest, *keys: str) -> bool:
    """Whether a create, or an update that changed one of these ``spec`` keys.

    Checks judge what a change asks for: releasing a lease must not be
    refused because its client was deleted since it was created.
    """
    if request.get("operation") != "UPDATE":
        return True
    new, old = spec(request.get("object")), spec(request.get("oldObject"))
    return any(new.get(key) != old.get(key) for key in keys)


def selector_causes(error: SelectorError) -> list[Cause]:
    return [Cause(cause.message, cause.field) for cause in error.causes]


def grouped(errors: Sequence[FieldError], checks: Sequence[tuple[str, Callable[[FieldError], bool]]],
            rest: str) -> dict[str, list[FieldError]]:
    """Each of the operator's errors under the first check whose test it passes, else under `rest`.

    The operator's validity function is the rule (the domains' `validity` modules); the checks only sort its
    errors into the names a denial shows, so the webhook denies exactly what the operator marks invalid.
    """
    found: dict[str, list[FieldError]] = {name: [] for name, _ in checks}
    found[rest] = []
    for error in errors:
        found[next((name for name, test in checks if test(error)), rest)].append(error)
    return found


def problem_cause(problem: str) -> Cause:
    """One of the operator's ``spec.field: message`` problems as a cause naming that field."""
    field, separator, message = problem.partition(": ")
    if separator and field.startswith("spec") and " " not in field:
        return Cause(message, operator_field(field))
    return Cause(problem, "spec")


def operator_field(field: str) -> str:
    """The operator's ``spec.resources[0].template/data/size`` (a JSON pointer inside the template, whose keys
    may hold dots) as a cause's field: ``spec.resources[0].template.data.size``."""
    head, marker, pointer = field.partition(".template/")
    return field_path(f"{head}.template", "/" + pointer) if marker else field


async def deny_errors(errors: Sequence[FieldError]) -> CheckResult:
    """Deny with one cause per error, each naming its field; allow when there is none."""
    if not errors:
        return CheckResult.ok()
    return CheckResult.deny(*(Cause(error.message, error.field) for error in errors))
