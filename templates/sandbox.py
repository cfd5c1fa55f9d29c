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
bounded, so one expression cannot allocate gigabytes: every operation
that could build a string or list beyond the template size limit
(`budget.MAX_SIZE`) is refused before it runs, and every output is
checked as it grows (see `budget.py`, which also holds the time limit).
"""

from __future__ import annotations

import json
import re
import types
from collections.abc import Callable, Iterable, Mapping
from datetime import datetime, timezone
from functools import lru_cache, wraps
from typing import Any, NoReturn

from jinja2 import StrictUndefined, nodes
from jinja2.compiler import CodeGenerator, Frame
from jinja2.environment import TemplateExpression
from jinja2.exceptions import SecurityError, TemplateSyntaxError
from jinja2.filters import make_attrgetter
from jinja2.parser import Parser
from jinja2.runtime import Context
from jinja2.sandbox import ImmutableSandboxedEnvironment, SandboxedFormatter, safe_range
from jinja2.utils import Namespace, pass_context, pass_environment, pass_eval_context

from . import budget
from .budget import MAX_SIZE, deep_size, too_big
from .errors import NotOffered
from .jsonvalues import json_scalar
from .poolboy import FILTERS as POOLBOY_FILTERS
from .poolboy import Now, json_query, poolboy_timedelta
from .strgen import strgen
from .timestamps import TimestampFactory
from .vocabulary import missing_in

#: Longest string or list that `*` may build (the template size limit).
MAX_REPEAT = MAX_SIZE
#: Largest integer, in bits, that `**` or `*` may build.
MAX_POWER_BITS = 100_000
#: Widest indent `tojson` may use.
MAX_JSON_INDENT = 16


def _refuse(what: str) -> NoReturn:
    raise SecurityError(too_big(what))


def _size(value: Any) -> int:
    return len(value) if isinstance(value, (str, list, tuple, dict)) else 0


_FLAT = (str, int, float, bool, type(None))


def _deep_checked(value: Any, what: str) -> Any:
    """`value`, unless writing it out (str, JSON) would exceed the size limit: shared references count each time."""
    if isinstance(value, _FLAT):
        return value
    if isinstance(value, (list, tuple, dict, Mapping)) and deep_size(value) > MAX_SIZE:
        _refuse(what)
    return value


def _checked(value: Any, what: str) -> Any:
    """`value`, unless it is a string or collection beyond the size limit."""
    if _size(value) > MAX_SIZE:
        _refuse(what)
    return value


def _check_repeat(left: Any, right: Any) -> None:
    for sequence, count in ((left, right), (right, left)):
        if isinstance(sequence, (str, list, tuple)) and isinstance(count, int) and count > 1:
            if len(sequence) * count > MAX_REPEAT or deep_size(sequence, MAX_REPEAT // count) * count > MAX_REPEAT:
                _refuse("'*'")
    if isinstance(left, int) and isinstance(right, int) and left.bit_length() + right.bit_length() > MAX_POWER_BITS:
        raise SecurityError(f"'*' would build an integer larger than {MAX_POWER_BITS} bits")


def _check_power(base: Any, exponent: Any) -> None:
    if isinstance(base, int) and isinstance(exponent, int) and abs(base) > 1 and exponent > 0:
        if base.bit_length() * exponent > MAX_POWER_BITS:
            raise SecurityError(f"'**' would build an integer larger than {MAX_POWER_BITS} bits")


def _check_plus(left: Any, right: Any) -> None:
    if isinstance(left, (str, list, tuple)) and isinstance(right, (str, list, tuple)):
        if len(left) + len(right) > MAX_SIZE or deep_size(left) + deep_size(right) > MAX_SIZE:
            _refuse("'+'")


_PERCENT_SPEC = re.compile(r"%(?:\(([^)]*)\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?")


def _check_percent(text: Any, arguments: Any) -> None:
    """`'%999999999d' % 1`, `'%*d' % (999999999, 1)`, `('%(a)s' * 9999) % {'a': big}`: within the size limit."""
    if not isinstance(text, str) or "%" not in text:
        return
    values = arguments if isinstance(arguments, tuple) else (arguments,)
    specs = list(_PERCENT_SPEC.finditer(text))
    if isinstance(arguments, Mapping):  # each `%(key)s` writes its value again
        written = len(text) + sum(deep_size(arguments.get(spec.group(1))) for spec in specs if spec.group(1))
    else:
        written = len(text) + deep_size(arguments)
    if written > MAX_SIZE:
        _refuse("'%' formatting")
    for match in specs:
        for number in match.group(2, 3):
            if number == "*":
                if any(isinstance(v, int) and v > MAX_SIZE for v in values):
                    _refuse("'%' formatting")
            elif number is not None and (len(number) > 7 or int(number) > MAX_SIZE):
                _refuse("'%' formatting")


_SPEC_NUMBER = re.compile(r"\d+")


def _check_format_spec(spec: str) -> None:
    """`'{:>999999999}'`: no width or precision beyond the size limit."""
    for number in _SPEC_NUMBER.findall(spec):
        if len(number) > 7 or int(number) > MAX_SIZE:
            _refuse("a format width or precision")


class _Formatter(SandboxedFormatter):
    """Jinja2's sandboxed `str.format`, with widths and precisions (and the result) bounded."""

    _written = 0

    def format_field(self, value: Any, format_spec: str) -> Any:
        _check_format_spec(format_spec)
        _deep_checked(value, "the formatted string")
        field = super().format_field(value, format_spec)
        self._written += len(field)  # `'{0}{0}{0}...'.format(big)`: the fields add up
        if self._written > MAX_SIZE:
            _refuse("the formatted string")
        return field

    def vformat(self, format_string: str, args: Any, kwargs: Any) -> str:
        self._written = len(format_string)
        formatted: str = super().vformat(format_string, args, kwargs)
        _checked(formatted, "the formatted string")
        return formatted


def _width(value: Any) -> int:
    return value if isinstance(value, int) else 0


def _check_str_method(text: str, name: str, args: tuple[Any, ...], kwargs: Mapping[str, Any]) -> tuple[Any, ...]:
    """Refuse a str method call that would build too much; returns the arguments (an iterable made a list)."""
    if name in ("ljust", "rjust", "center", "zfill"):
        if args and _width(args[0]) > MAX_SIZE:
            _refuse(f"str.{name}")
    elif name == "expandtabs":
        tabsize = args[0] if args else kwargs.get("tabsize", 8)
        if len(text) + text.count("\t") * max(_width(tabsize), 0) > MAX_SIZE:
            _refuse("str.expandtabs")
    elif name == "replace" and len(args) >= 2 and isinstance(args[0], str) and isinstance(args[1], str):
        count = text.count(args[0]) if args[0] else len(text) + 1
        if len(args) > 2 and isinstance(args[2], int) and args[2] >= 0:
            count = min(count, args[2])
        if len(text) + count * len(args[1]) > MAX_SIZE:
            _refuse("str.replace")
    elif name == "join" and args:
        items = list(args[0])
        if sum(_size(item) for item in items) + len(text) * max(len(items) - 1, 0) > MAX_SIZE:
            _refuse("str.join")
        return (items, *args[1:])
    elif name == "translate":
        if len(text) * max((_size(v) for v in (args[0].values() if args and isinstance(args[0], Mapping) else ())),
                           default=1) > MAX_SIZE:
            _refuse("str.translate")
    return args


# --------------------------------------------------------------- filters


def _pre_center(value: Any, width: Any = 80, *args: Any, **kwargs: Any) -> None:
    if _width(width) > MAX_SIZE:
        _refuse("the center filter")


def _pre_indent(value: Any, width: Any = 4, *args: Any, **kwargs: Any) -> None:
    width = kwargs.get("width", width)
    text = str(value)
    per_line = len(width) if isinstance(width, str) else _width(width)
    if len(text) + (text.count("\n") + 1) * per_line > MAX_SIZE:
        _refuse("the indent filter")


def _pre_wordwrap(value: Any, width: Any = 79, break_long_words: Any = True, wrapstring: Any = None,
                  *args: Any, **kwargs: Any) -> None:
    wrapstring = kwargs.get("wrapstring", wrapstring)
    width = kwargs.get("width", width)
    text = str(value)
    if isinstance(wrapstring, str) and len(text) + (len(text) // max(_width(width), 1) + 1) * len(wrapstring) > MAX_SIZE:
        _refuse("the wordwrap filter")


def _pre_replace(value: Any, old: Any = "", new: Any = "", count: Any = None, *args: Any, **kwargs: Any) -> None:
    _check_str_method(str(value), "replace", (str(old), str(new), -1 if count is None else count), {})


def _pre_format(value: Any, *args: Any, **kwargs: Any) -> None:
    _check_percent(str(value), tuple(args) or kwargs)


def _pre_batch(value: Any, linecount: Any = 1, *args: Any, **kwargs: Any) -> None:
    if _width(linecount) > MAX_SIZE:
        _refuse("the batch filter")


def _pre_tojson(value: Any, indent: Any = None, *args: Any, **kwargs: Any) -> None:
    indent = kwargs.get("indent", indent)
    if _width(indent) > MAX_JSON_INDENT or (isinstance(indent, str) and len(indent) > MAX_JSON_INDENT):
        raise SecurityError(f"tojson indent is at most {MAX_JSON_INDENT}")


_PRECHECKS: dict[str, Callable[..., None]] = {
    "center": _pre_center, "indent": _pre_indent, "wordwrap": _pre_wordwrap, "replace": _pre_replace,
    "format": _pre_format, "batch": _pre_batch, "tojson": _pre_tojson,
}


#: Filters that only select, count or reorder: they never write their value out as text.
_NOT_WRITING = frozenset({"attr", "batch", "default", "d", "dictsort", "first", "groupby", "items", "last", "length",
                          "count", "list", "map", "max", "min", "reject", "rejectattr", "reverse", "select",
                          "selectattr", "slice", "sort", "unique", "sum", "join", "random", "abs", "round", "int",
                          "float", "bool", "object", "safe", "json_query", "merge_list_of_dicts",
                          "to_datetime", "parse_time_interval"})


def _bounded_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """A filter checked before (where it can amplify, or writes its value as text) and after (its result's size)."""
    passes = 1 if getattr(original, "jinja_pass_arg", None) is not None else 0
    precheck = _PRECHECKS.get(name)
    writes = name not in _NOT_WRITING

    @wraps(original)
    def bounded(*args: Any, **kwargs: Any) -> Any:
        if writes and len(args) > passes:
            _deep_checked(args[passes], f"the {name} filter's input")
        if precheck is not None:
            precheck(*args[passes:], **kwargs)
        return _checked(original(*args, **kwargs), f"the {name} filter's result")

    return bounded


def _join_filter(eval_ctx: Any, value: Iterable[Any], d: str = "", attribute: Any = None) -> str:
    if attribute is not None:
        value = map(make_attrgetter(eval_ctx.environment, attribute), value)
    items = [str(_deep_checked(item, "the join filter")) for item in value]
    separator = str(d)
    if sum(map(len, items)) + len(separator) * max(len(items) - 1, 0) > MAX_SIZE:
        _refuse("the join filter")
    return separator.join(items)


def _sum_filter(environment: Any, iterable: Iterable[Any], attribute: Any = None, start: Any = 0) -> Any:
    items = list(iterable if attribute is None else map(make_attrgetter(environment, attribute), iterable))
    if isinstance(start, (list, tuple, str)) and _size(start) + sum(map(_size, items)) > MAX_SIZE:
        _refuse("the sum filter")
    return sum(items, start)


class _CodeGenerator(CodeGenerator):
    """`a ~ b` goes through the environment, so its length is checked like `+`."""

    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.bounded_concat((")
        for argument in node.nodes:
            self.visit(argument, frame)
            self.write(", ")
        self.write("))")


class _Sandbox(ImmutableSandboxedEnvironment):
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _CodeGenerator

    def call_binop(self, context: Context, operator: str, left: Any, right: Any) -> Any:
        budget.current_check()
        if operator == "*":
            _check_repeat(left, right)
        elif operator == "**":
            _check_power(left, right)
        elif operator == "+":
            _check_plus(left, right)
        elif operator == "%":
            _check_percent(left, right)
        return _checked(super().call_binop(context, operator, left, right), f"'{operator}'")

    def call(__self, __context: Context, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        budget.current_check()
        owner = getattr(__obj, "__self__", None)
        if isinstance(__obj, types.BuiltinMethodType) and isinstance(owner, str):
            args = _check_str_method(owner, __obj.__name__, args, kwargs)
        return _checked(super().call(__context, __obj, *args, **kwargs), "a call's result")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        if not isinstance(value, (types.MethodType, types.BuiltinMethodType)) or value.__name__ not in (
            "format", "format_map"
        ) or not isinstance(value.__self__, str):
            return None
        text, is_map = value.__self__, value.__name__ == "format_map"
        formatter = _Formatter(self)

        @wraps(value)
        def bounded_format(*args: Any, **kwargs: Any) -> str:
            if is_map:
                if kwargs or len(args) != 1:
                    raise TypeError("format_map() takes exactly one argument")
                return formatter.vformat(text, (), args[0])
            return formatter.vformat(text, args, kwargs)

        return bounded_format

    @staticmethod
    def concat(parts: Iterable[Any]) -> str:
        """Every output (a template's, a block's, a macro's) is checked as it grows."""
        collected, total = [], 0
        for part in parts:
            total += len(part)
            if total > MAX_SIZE:
                _refuse("the output")
            collected.append(part)
        return "".join(collected)

    @staticmethod
    def bounded_concat(parts: Iterable[Any]) -> str:
        return _Sandbox.concat(str(_deep_checked(part, "'~'")) for part in parts)

    def unsafe_undefined(self, obj: Any, attribute: str) -> NoReturn:
        # Jinja returns an undefined that only fails when used, so `x.__class__ is
        # defined` or a lazy `map(attribute=...)` would quietly go on. Fail at once.
        raise SecurityError(f"access to attribute {attribute!r} of a {type(obj).__name__!r} object is unsafe")


def _new_environment() -> _Sandbox:
    env = _Sandbox(undefined=StrictUndefined, autoescape=False, keep_trailing_newline=True, finalize=_finalize)
    # Jinja's defaults add lipsum, cycler and joiner; a provider needs none of them.
    env.globals.clear()
    env.globals.update(
        range=safe_range,
        dict=dict,
        namespace=Namespace,
        timestamp=TimestampFactory(),
        timedelta=poolboy_timedelta,
        # Poolboy's: the current time, and Python's datetime types (immutable values, nothing to reach from them)
        now=Now(),
        datetime=datetime,
        timezone=timezone,
    )
    env.policies["json.dumps_function"] = _dumps
    # The pool/claim tool's typing filters: `x | bool` parses yes/no strings; `x | object` keeps x's value
    # (a lone `{{ expression }}` keeps its type here anyway).
    env.filters["bool"] = _bool_filter
    env.filters["object"] = _object_filter
    # The rest of Poolboy's filters (`poolboy.py`); `strgen` draws from the operating system's randomness and
    # refuses a pattern whose longest string is beyond the size limit before drawing.
    env.filters.update(POOLBOY_FILTERS)
    env.filters["json_query"] = _json_query_filter
    env.filters["strgen"] = _strgen_filter
    env.filters["to_json"] = _to_json
    env.filters.update({name: _bounded_filter(name, f) for name, f in env.filters.items()})
    env.filters["join"] = _bounded_filter("join", pass_eval_context(_join_filter))
    env.filters["sum"] = _bounded_filter("sum", pass_environment(_sum_filter))
    return env


_TRUE = frozenset(("y", "yes", "t", "true", "on", "1"))
_FALSE = frozenset(("n", "no", "f", "false", "off", "0", ""))


def _bool_filter(value: Any) -> bool:
    """Truth of a value; a string must say yes or no (`true`, `no`, `1`, `off`...), else it is an error."""
    if isinstance(value, str):
        word = value.strip().lower()
        if word in _TRUE or word in _FALSE:
            return word in _TRUE
        raise ValueError(f"the bool filter cannot read {value[:40]!r} as true or false")
    return bool(value)


def _object_filter(value: Any) -> Any:
    return value


def _json_query_filter(value: Any, query: Any) -> Any:
    """JMESPath selects, but a multiselect can repeat its input: the result is held to the size limit as written."""
    return _deep_checked(json_query(value, query), "the json_query filter's result")


@pass_context
def _strgen_filter(context: Context, pattern: Any) -> str:
    """`strgen`; taking the context keeps Jinja from folding `'[a-z]{8}' | strgen` into one string at compile time."""
    return strgen(pattern)


def _to_json(value: Any) -> str:
    """Poolboy's `to_json`: JSON text, without tojson's indent (nothing to widen)."""
    return _dumps(value)


def _finalize(value: Any) -> Any:
    """Every `{{ ... }}` output, before it is written as text."""
    return _deep_checked(value, "the output")


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
    _refuse_missing(tree)
    match tree.body:
        case [nodes.Output(nodes=[expression])] if not isinstance(expression, nodes.TemplateData):
            assign = nodes.Assign(nodes.Name("result", "store"), expression, lineno=1)
            template = ENVIRONMENT.from_string(nodes.Template([assign], lineno=1))
            return TemplateExpression(template, undefined_to_none=False)
    return ENVIRONMENT.from_string(tree).render


@lru_cache(maxsize=1024)
def compile_expression(source: str) -> Evaluate:
    """Compile a bare expression (a validation check) once per distinct source."""
    _refuse_missing(parse_expression(source))
    return ENVIRONMENT.compile_expression(source, undefined_to_none=False)


def parse_expression(source: str) -> nodes.Expr:
    """The tree of a bare expression, parsed as `compile_expression` parses it."""
    parser = Parser(ENVIRONMENT, source, state="variable")
    expression = parser.parse_expression()
    if not parser.stream.eos:
        raise TemplateSyntaxError("chunk after expression", parser.stream.current.lineno, None, None)
    return expression


def _refuse_missing(tree: nodes.Node) -> None:
    """A function, filter or test the sandbox lacks fails here, before anything renders (vocabulary.py)."""
    missing = missing_in(ENVIRONMENT, tree)
    if missing:
        raise NotOffered(missing[0].message, missing[0].line)
