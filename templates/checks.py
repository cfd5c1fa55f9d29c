"""Custom validation checks (`spec.validation.checks[]`): Jinja2 expressions that must be true.

A check sees the resource template's top-level fields as variables
(`spec.actionSchedule.stop < timestamp.utcnow.add('8h')`) next to the usual
template variables. It must evaluate to a boolean: a check that yields a
string or a number is an error rather than silently truthy, because a
validation rule that passes by accident is a hole.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from jinja2 import Undefined

from .budget import BudgetExceeded, evaluating, out_of_time
from .errors import TemplateError, describe
from .render import template_variables
from .sandbox import compile_expression


@dataclass(frozen=True)
class CheckFailure:
    """A check that did not pass: it was false (`error` is None) or could not be evaluated."""

    name: str
    check: str
    error: str | None = None

    def __str__(self) -> str:
        if self.error is None:
            return f"check {self.name!r} failed"
        return f"check {self.name!r} could not be evaluated: {self.error}"


def check_variables(resource_template: Mapping[str, Any], **named: Any) -> dict[str, Any]:
    """The template's top-level fields plus `template_variables(**named)`; the named ones win."""
    return {**resource_template, **template_variables(resource_template=resource_template, **named)}


def check_expression(expression: str, variables: Mapping[str, Any]) -> bool:
    """Evaluate one check in the sandbox; raises TemplateError if it cannot be evaluated."""
    try:
        with evaluating():
            result = compile_expression(expression)(variables)
            if isinstance(result, Undefined):
                str(result)  # raises the undefined error, which names the missing field
        if not isinstance(result, bool):
            kind = type(result).__name__
            raise TypeError(f"a check must give true or false, this one gave a value of type {kind}")
        return result
    except BudgetExceeded:
        raise TemplateError(out_of_time()) from None
    except Exception as error:  # whatever the expression provoked is the check's error
        raise TemplateError(describe(error)) from error


def run_checks(checks: Iterable[Mapping[str, Any]], variables: Mapping[str, Any]) -> list[CheckFailure]:
    """Run every check and return the failures; never raises for a bad check."""
    failures = []
    for check in checks:
        expression = check.get("check")
        name = str(check.get("name") or expression)
        if not isinstance(expression, str) or not expression.strip():
            failures.append(CheckFailure(name, "", "the check has no expression"))
            continue
        try:
            if not check_expression(expression, variables):
                failures.append(CheckFailure(name, expression))
        except TemplateError as error:
            failures.append(CheckFailure(name, expression, error.message))
    return failures


def compiled_checks(field: str, entries: Iterable[Any]) -> tuple[list[dict[str, str]], list[str]]:
    """The `{name, check}` entries whose expression compiles, and `field[i].check: why` for each that does not."""
    checks, errors = [], []
    for i, entry in enumerate(entries):
        expression = entry.get("check") if isinstance(entry, Mapping) else None
        if not isinstance(expression, str) or not expression.strip():
            errors.append(f"{field}[{i}].check: the check has no expression")
            continue
        try:
            compile_expression(expression)
        except Exception as error:  # whatever Jinja2 raises while parsing is the check's error
            errors.append(f"{field}[{i}].check: {describe(error)}")
            continue
        checks.append({"name": str(entry.get("name") or expression), "check": expression})
    return checks, errors
