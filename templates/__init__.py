"""Jinja2 templating in a sandbox: timestamp, timedelta, validation checks and schemas.

Stands alone: nothing here imports the rest of lessor.
"""

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .budget import offload
    from .checks import CheckFailure, check_expression, check_variables, compiled_checks, run_checks
    from .durations import format_duration, parse_duration
    from .errors import TemplateError
    from .pointers import escape_pointer_token, strings_in
    from .render import render_object, render_string, template_errors, template_variables
    from .schema import InvalidSchemaError, SchemaViolation, schema_errors, validate_schema
    from .timestamps import TimeDelta, Timestamp, format_timestamp, parse_timestamp
    from .vocabulary import Missing, missing_names

# Each name is imported from its module when first used, not with the package: a duration or a
# timestamp (what `lessor convert` needs) should not cost Jinja2 and jsonschema (issue #24: start-up).
_MODULES = {
    "offload": "budget",
    **dict.fromkeys(("CheckFailure", "check_expression", "check_variables", "compiled_checks", "run_checks"),
                    "checks"),
    **dict.fromkeys(("format_duration", "parse_duration"), "durations"),
    "TemplateError": "errors",
    **dict.fromkeys(("escape_pointer_token", "strings_in"), "pointers"),
    **dict.fromkeys(("render_object", "render_string", "template_errors", "template_variables"), "render"),
    **dict.fromkeys(("InvalidSchemaError", "SchemaViolation", "schema_errors", "validate_schema"), "schema"),
    **dict.fromkeys(("TimeDelta", "Timestamp", "format_timestamp", "parse_timestamp"), "timestamps"),
    **dict.fromkeys(("Missing", "missing_names"), "vocabulary"),
}


def __getattr__(name: str) -> Any:
    module = _MODULES.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_MODULES))


__all__ = [
    "CheckFailure",
    "InvalidSchemaError",
    "Missing",
    "SchemaViolation",
    "TemplateError",
    "TimeDelta",
    "Timestamp",
    "check_expression",
    "check_variables",
    "compiled_checks",
    "escape_pointer_token",
    "strings_in",
    "format_duration",
    "format_timestamp",
    "missing_names",
    "offload",
    "parse_duration",
    "parse_timestamp",
    "render_object",
    "render_string",
    "run_checks",
    "schema_errors",
    "template_errors",
    "template_variables",
    "validate_schema",
]
