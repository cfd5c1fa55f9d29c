"""The one Jinja2 environment every provider template runs in.

`ImmutableSandboxedEnvironment` rather than `SandboxedEnvironment`: besides
refusing private and internal attributes (`__class__`, `__globals__`, ...)
and sandboxing `str.format`, it refuses the methods that change lists,
dicts and sets (`append`, `update`, `pop`, ...). Several templates and
checks see the same claim, handle and provider objects, so one template
must not be able to change what the next one sees.

On top of that: `StrictUndefined`, so a misspelt field is an error and not
an empty string; no loader, so templates cannot include files; only the
globals a provider needs; an unsafe attribute fails at once instead of
yielding an undefined that fails later (or never); and `*` and `**`
bounded, so one expression cannot allocate gigabytes.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from functools import lru_cache
from typing import Any, NoReturn

from jinja2 import StrictUndefined, nodes
from jinja2.environment import TemplateExpression
from jinja2.exceptions import SecurityError
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, safe_range
from jinja2.utils import Namespace

from .jsonvalues import json_scalar
from .timestamps import TimestampFactory, make_timedelta

#: Longest string or list that `*` may build.
MAX_REPEAT = 1_000_000
#: Largest integer, in bits, that `**` may build.
MAX_POWER_BITS = 100_000


def _check_repeat(left: Any, right: Any) -> None:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(count, int):
            if len(sequence) * count > MAX_REPEAT:
                raise SecurityError(f"'*' would build a sequence longer than {MAX_REPEAT}")


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if base.bit_length() * exponent > MAX_POWER_BITS:
            raise SecurityError(f"'**' would build an integer larger than {MAX_POWER_BITS} bits")


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        return super().call_binop(context, operator, left, right)

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        # Jinja returns an undefined that only fails when used, so `x.__class__ is
        # defined` or a lazy `map(attribute=...)` would quietly go on. Fail at once.
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")


def _new_environment() -> _Sandbox:
    env = _Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True)
    # Jinja's defaults add lipsum, cycler and joiner; a provider needs none of them.
    env.globals.clear()
    env.globals.update(
        range=safe_range,
        dict=dict,
        namespace=Namespace,
        timestamp=TimestampFactory(),
        timedelta=make_timedelta,
    )
    env.policies["json.dumps_function"] = _dumps
    return env


def _dumps(value: Any, **kwargs: Any) -> str:
    # `tojson` on a timestamp writes its RFC 3339 string instead of failing.
    return json.dumps(value, default=json_scalar, **kwargs)


ENVIRONMENT = _new_environment()

Evaluate = Callable[[Mapping[str, Any]], Any]


@lru_cache(maxsize=1024)
def compile_template(source: str) -> Evaluate:
    """Compile once per distinct source string.

    A source that is exactly one `{{ expression }}` compiles to the
    expression, whose value keeps its type; anything else renders to text.
    """
    tree = ENVIRONMENT.parse(source)
    match tree.body:
        case [nodes.Output(nodes=[expression])] if not isinstance(expression, nodes.TemplateData):
            assign = nodes.Assign(nodes.Name("result", "store"), expression, lineno=1)
            template = ENVIRONMENT.from_string(nodes.Template([assign], lineno=1))
            return TemplateExpression(template, undefined_to_none=False)
    return ENVIRONMENT.from_string(tree).render


@lru_cache(maxsize=1024)
def compile_expression(source: str) -> Evaluate:
    """Compile a bare expression (a validation check) once per distinct source."""
    return ENVIRONMENT.compile_expression(source, undefined_to_none=False)
