"""Validating a resource template against a provider's `validation.openAPIV3Schema`.

Kubernetes schemas are OpenAPI v3.0 schemas, which differ from JSON Schema
2020-12 in a few keywords; they are translated before validation:

- `nullable: true` adds `"null"` to `type` (and `None` to `enum`);
- boolean `exclusiveMinimum`/`exclusiveMaximum` become the numeric form;
- array-form `items`/`additionalItems` become `prefixItems`/`items`;
- `dependencies` splits into `dependentRequired`/`dependentSchemas`;
- `x-kubernetes-*` extensions are dropped (they steer the API server, not validation).

`format` is not asserted. Every error is reported, each with the JSON
pointer (RFC 6901) of the offending value.

`pattern` and `patternProperties` (and `additionalProperties`, which
consults them) run in RE2 (`regexes.py`): linear time, the dialect the API
server uses for CRD patterns. A pattern RE2 cannot compile makes the schema
invalid, and the error names the pattern's place in the schema.
`unevaluatedProperties` and `unevaluatedItems` (JSON Schema 2019+, not in
OpenAPI v3.0) are dropped: jsonschema would run their patterns in Python's
backtracking `re`.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, FormatChecker, ValidationError, validators
from jsonschema.exceptions import SchemaError
from referencing.exceptions import Unresolvable

from .pointers import escape_pointer_token
from .regexes import RegexError, compile_regex


@dataclass(frozen=True)
class SchemaViolation:
    """One way the template breaks the schema; `path` is a JSON pointer."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '/'}: {self.message}"


class InvalidSchemaError(ValueError):
    """The provider's schema itself is broken; the provider, not the claim, must be fixed.

    `where` is the place in the schema, written to follow a field name
    (`.properties.data.properties.x.pattern`; empty for the whole schema),
    and `reason` what is wrong there.
    """

    def __init__(self, parts: Sequence[str | int], reason: str) -> None:
        pointer = "/" + "/".join(escape_pointer_token(str(part)) for part in parts)
        super().__init__(f"invalid openAPIV3Schema at {pointer}: {reason}")
        self.where = "".join(_field_part(part) for part in parts)
        self.reason = reason


_PLAIN_NAME = re.compile(r"[A-Za-z_$][-A-Za-z0-9_$]*")


def _field_part(part: str | int) -> str:
    """`.properties`, `[0]` or `["a.b"]`: one step of a schema location, written after a field name."""
    if isinstance(part, int):
        return f"[{part}]"
    return f".{part}" if _PLAIN_NAME.fullmatch(part) else f"[{json.dumps(part)}]"


_DROPPED = ("unevaluatedProperties", "unevaluatedItems")
_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMAS = ("items", "additionalItems", "additionalProperties", "not", "contains", "propertyNames")


def _translate(schema: Any) -> Any:
    """A JSON Schema 2020-12 equivalent of a Kubernetes OpenAPI v3 schema."""
    if not isinstance(schema, Mapping):
        return schema  # `true`/`false` schemas, or garbage for check_schema to report
    result = {key: value for key, value in schema.items()
              if not key.startswith("x-kubernetes-") and key not in _DROPPED}

    if isinstance(result.get("items"), list):
        result["prefixItems"] = result.pop("items")
        if "additionalItems" in result:
            result["items"] = result.pop("additionalItems")
    dependencies = result.pop("dependencies", None)
    if isinstance(dependencies, Mapping):
        for name, dependency in dependencies.items():
            group = "dependentRequired" if isinstance(dependency, list) else "dependentSchemas"
            result.setdefault(group, {})[name] = dependency
    for bound, exclusive in (("minimum", "exclusiveMinimum"), ("maximum", "exclusiveMaximum")):
        if isinstance(result.get(exclusive), bool):
            if result.pop(exclusive) and bound in result:
                result[exclusive] = result.pop(bound)
    if result.pop("nullable", False) is True:
        if isinstance(result.get("type"), str):
            result["type"] = [result["type"], "null"]
        if isinstance(result.get("enum"), list) and None not in result["enum"]:
            result["enum"] = [*result["enum"], None]

    for key in _SCHEMA_MAPS:
        if isinstance(result.get(key), Mapping):
            result[key] = {name: _translate(sub) for name, sub in result[key].items()}
    for key in _SCHEMA_LISTS:
        if isinstance(result.get(key), list):
            result[key] = [_translate(sub) for sub in result[key]]
    for key in _SCHEMAS:
        if key in result:
            result[key] = _translate(result[key])
    return result


def _patterns(schema: Any, parts: tuple[str | int, ...] = ()) -> Iterator[tuple[tuple[str | int, ...], Any]]:
    """Every `pattern` and `patternProperties` key of a (Kubernetes, untranslated) schema, with its place."""
    if not isinstance(schema, Mapping):
        return
    if "pattern" in schema:
        yield (*parts, "pattern"), schema["pattern"]
    if isinstance(schema.get("patternProperties"), Mapping):
        for key in schema["patternProperties"]:
            yield (*parts, "patternProperties", key), key
    for key in (*_SCHEMA_MAPS, "dependencies"):
        if isinstance(schema.get(key), Mapping):
            for name, sub in schema[key].items():
                yield from _patterns(sub, (*parts, key, name))
    for key in (*_SCHEMA_LISTS, "items"):
        if isinstance(schema.get(key), list):
            for index, sub in enumerate(schema[key]):
                yield from _patterns(sub, (*parts, key, index))
    for key in _SCHEMAS:
        if isinstance(schema.get(key), Mapping):
            yield from _patterns(schema[key], (*parts, key))


def _check_patterns(schema: Any) -> None:
    for parts, pattern in _patterns(schema):
        if not isinstance(pattern, str):  # a list or an object where a regular expression goes
            raise InvalidSchemaError(parts, f"a regular expression must be a string, not {type(pattern).__name__}")
        try:
            compile_regex(pattern)
        except RegexError as error:
            raise InvalidSchemaError(parts, str(error)) from None


# ------------------------------------------------------- RE2 in place of `re`


def _pattern(validator: Any, pattern: str, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if validator.is_type(instance, "string") and not compile_regex(pattern).search(instance):
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


def _pattern_properties(validator: Any, patterns: Mapping[str, Any], instance: Any,
                        schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    for pattern, subschema in patterns.items():
        regex = compile_regex(pattern)
        for key, value in instance.items():
            if regex.search(key):
                yield from validator.descend(value, subschema, path=key, schema_path=pattern)


def _additional_properties(validator: Any, additional: Any, instance: Any, schema: Any) -> Iterator[ValidationError]:
    if not validator.is_type(instance, "object"):
        return
    properties = schema.get("properties", {})
    regexes = [compile_regex(pattern) for pattern in schema.get("patternProperties", {})]
    extras = [key for key in instance
              if key not in properties and not any(regex.search(key) for regex in regexes)]
    if validator.is_type(additional, "object"):
        for extra in extras:
            yield from validator.descend(instance[extra], additional, path=extra)
    elif additional is False and extras:
        names = ", ".join(repr(extra) for extra in sorted(extras))
        if regexes:
            patterns = ", ".join(repr(pattern) for pattern in sorted(schema["patternProperties"]))
            yield ValidationError(f"{names} {'does' if len(extras) == 1 else 'do'} not match any of the "
                                  f"regexes: {patterns}")
        else:
            verb = "was" if len(extras) == 1 else "were"
            yield ValidationError(f"Additional properties are not allowed ({names} {verb} unexpected)")


_Validator = validators.extend(Draft202012Validator, {  # type: ignore[no-untyped-call]
    "pattern": _pattern,
    "patternProperties": _pattern_properties,
    "additionalProperties": _additional_properties,
})


def _re2_format_checker() -> FormatChecker:
    checker = FormatChecker()
    checker.checks("regex", raises=RegexError)(lambda value: not isinstance(value, str) or bool(compile_regex(value)))
    return checker


_SCHEMA_FORMATS = _re2_format_checker()


@lru_cache(maxsize=256)
def _validator(canonical_schema: str) -> Any:
    original = json.loads(canonical_schema)
    _check_patterns(original)
    schema = _translate(original)
    try:
        _Validator.check_schema(schema, format_checker=_SCHEMA_FORMATS)
    except SchemaError as error:
        raise InvalidSchemaError(tuple(error.absolute_path), error.message) from None
    return _Validator(schema)


def validate_schema(instance: Any, schema: Mapping[str, Any], path: str = "") -> list[SchemaViolation]:
    """All violations of `schema` by `instance`, sorted by path.

    `path` is the pointer of `instance` in its object (e.g.
    `/spec/resources/0/template`) and prefixes every reported path.
    Raises InvalidSchemaError when the schema itself is not valid.
    """
    validator = _validator(json.dumps(schema, sort_keys=True))
    try:
        violations = [
            SchemaViolation(
                path + "".join(f"/{escape_pointer_token(str(part))}" for part in error.absolute_path),
                error.message,
            )
            for error in validator.iter_errors(instance)
        ]
    except Unresolvable as error:  # a $ref to nowhere: found only when validating reaches it
        raise InvalidSchemaError((), f"$ref cannot be resolved: {error}") from None
    except RecursionError:  # a $ref that leads back to itself without end
        raise InvalidSchemaError((), "$ref refers to itself without end") from None
    return sorted(violations, key=lambda violation: (violation.path, violation.message))


def schema_errors(field: str, schema: Any) -> tuple[Mapping[str, Any] | None, list[str]]:
    """A provider's schema read: itself (None when it is not an object) and `field<where>: why` if it is broken."""
    if schema is None:
        return None, []
    if not isinstance(schema, Mapping):
        return None, [f"{field}: must be an object"]
    try:
        validate_schema(None, schema)
    except InvalidSchemaError as error:
        return schema, [f"{field}{error.where}: {error.reason}"]
    return schema, []
