"""Jinja2 templating in a sandbox: timestamp, timedelta, validation checks and schemas.

Stands alone: nothing here imports the rest of lessor.
"""

from .budget import offload
from .checks import CheckFailure, check_expression, check_variables, compiled_checks, run_checks
from .durations import format_duration, parse_duration
from .errors import TemplateError
from .pointers import escape_pointer_token, strings_in
from .render import render_object, render_string, template_errors, template_variables
from .schema import InvalidSchemaError, SchemaViolation, schema_errors, validate_schema
from .timestamps import TimeDelta, Timestamp, format_timestamp, parse_timestamp

__all__ = [
    "CheckFailure",
    "InvalidSchemaError",
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
