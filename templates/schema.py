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
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator
from jsonschema.exceptions import SchemaError

from .pointers import escape_pointer_token


@dataclass(frozen=True)
class SchemaViolation:
    """One way the template breaks the schema; `path` is a JSON pointer."""

    path: str
    message: str

    def __str__(self) -> str:
        return f"{self.path or '/'}: {self.message}"


class InvalidSchemaError(ValueError):
    """The provider's schema itself is broken; the provider, not the claim, must be fixed."""


_SCHEMA_MAPS = ("properties", "patternProperties", "definitions", "$defs", "dependentSchemas")
_SCHEMA_LISTS = ("allOf", "anyOf", "oneOf", "prefixItems")
_SCHEMAS = ("items", "additionalItems", "additionalProperties", "not", "contains", "propertyNames")


def _translate(schema: Any) -> Any:
    """A JSON Schema 2020-12 equivalent of a Kubernetes OpenAPI v3 schema."""
    if not isinstance(schema, Mapping):
        return schema  # `true`/`false` schemas, or garbage for check_schema to report
    result = {key: value for key, value in schema.items() if not key.startswith("x-kubernetes-")}

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


@lru_cache(maxsize=256)
def _validator(canonical_schema: str) -> Draft202012Validator:
    schema = _translate(json.loads(canonical_schema))
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as error:
        where = "/".join(escape_pointer_token(str(part)) for part in error.absolute_path)
        raise InvalidSchemaError(f"invalid openAPIV3Schema at /{where}: {error.message}") from None
    return Draft202012Validator(schema)


def validate_schema(instance: Any, schema: Mapping[str, Any], path: str = "") -> list[SchemaViolation]:
    """All violations of `schema` by `instance`, sorted by path.

    `path` is the pointer of `instance` in its object (e.g.
    `/spec/resources/0/template`) and prefixes every reported path.
    Raises InvalidSchemaError when the schema itself is not valid.
    """
    validator = _validator(json.dumps(schema, sort_keys=True))
    violations = [
        SchemaViolation(
            path + "".join(f"/{escape_pointer_token(str(part))}" for part in error.absolute_path),
            error.message,
        )
        for error in validator.iter_errors(instance)
    ]
    return sorted(violations, key=lambda violation: (violation.path, violation.message))
