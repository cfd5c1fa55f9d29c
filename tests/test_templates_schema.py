"""Validating templates against a provider's openAPIV3Schema: every error, each with its pointer."""

from __future__ import annotations

import pytest

from lessor.templates import InvalidSchemaError, SchemaViolation, validate_schema

# What a provider for the seed's AnarchySubjects might declare.
SCHEMA = {
    "type": "object",
    "required": ["spec"],
    "properties": {
        "spec": {
            "type": "object",
            "required": ["desiredState", "size"],
            "additionalProperties": False,
            "properties": {
                "desiredState": {"type": "string", "enum": ["started", "stopped"]},
                "size": {"type": "integer", "minimum": 1, "exclusiveMinimum": True, "maximum": 8},
                "note": {"type": "string", "nullable": True, "maxLength": 5},
                "ports": {"type": "array", "items": {"type": "integer"}, "x-kubernetes-list-type": "set"},
                "vars": {"type": "object", "x-kubernetes-preserve-unknown-fields": True},
                "replicas": {"x-kubernetes-int-or-string": True, "anyOf": [{"type": "integer"}, {"type": "string"}]},
                # property names that look like OpenAPI keywords are still just names
                "nullable": {"type": "boolean"},
                "x-kubernetes-thing": {"type": "string"},
                "a/b": {"type": "string"},
            },
        }
    },
}


def test_a_valid_template_has_no_violations() -> None:
    template = {
        "spec": {
            "desiredState": "started",
            "size": 2,
            "note": None,
            "ports": [80, 443],
            "vars": {"anything": {"goes": [1]}},
            "replicas": "50%",
            "nullable": False,
            "x-kubernetes-thing": "x",
        }
    }
    assert validate_schema(template, SCHEMA) == []


def test_every_violation_is_reported_with_its_pointer() -> None:
    template = {
        "spec": {
            "desiredState": "destroyed",
            "size": 1,
            "note": "too long",
            "ports": [80, "https"],
            "nullable": "yes",
            "x-kubernetes-thing": 5,
            "a/b": 1,
            "extra": True,
        }
    }
    violations = validate_schema(template, SCHEMA, "/spec/resources/0/template")
    assert [(violation.path, violation.message) for violation in violations] == [
        ("/spec/resources/0/template/spec", "Additional properties are not allowed ('extra' was unexpected)"),
        ("/spec/resources/0/template/spec/a~1b", "1 is not of type 'string'"),
        ("/spec/resources/0/template/spec/desiredState", "'destroyed' is not one of ['started', 'stopped']"),
        ("/spec/resources/0/template/spec/note", "'too long' is too long"),
        ("/spec/resources/0/template/spec/nullable", "'yes' is not of type 'boolean'"),
        ("/spec/resources/0/template/spec/ports/1", "'https' is not of type 'integer'"),
        ("/spec/resources/0/template/spec/size", "1 is less than or equal to the minimum of 1"),
        ("/spec/resources/0/template/spec/x-kubernetes-thing", "5 is not of type 'string'"),
    ]
    assert str(violations[0]).startswith("/spec/resources/0/template/spec: Additional properties")


def test_missing_fields_are_named_at_their_parent() -> None:
    assert validate_schema({"spec": {"size": 2}}, SCHEMA) == [
        SchemaViolation("/spec", "'desiredState' is a required property")
    ]
    assert str(validate_schema({}, SCHEMA)[0]) == "/: 'spec' is a required property"


def test_nullable_enums_accept_null() -> None:
    schema = {"type": "string", "enum": ["a"], "nullable": True}
    assert validate_schema(None, schema) == []
    assert validate_schema("b", schema) == [SchemaViolation("", "'b' is not one of ['a', None]")]


def test_exclusive_maximum_in_openapi_form() -> None:
    schema = {"type": "number", "maximum": 10, "exclusiveMaximum": True}
    assert validate_schema(9.5, schema) == []
    assert [violation.path for violation in validate_schema(10, schema)] == [""]
    assert validate_schema(10, {"type": "number", "maximum": 10, "exclusiveMaximum": False}) == []


def test_openapi_dependencies_and_tuple_items() -> None:
    schema = {
        "type": "object",
        "dependencies": {"end": ["start"], "mode": {"required": ["level"]}},
        "properties": {"pair": {"type": "array", "items": [{"type": "string"}], "additionalItems": False}},
    }
    violations = validate_schema({"end": "x", "mode": "y", "pair": ["a", "b"]}, schema)
    assert [violation.path for violation in violations] == ["", "", "/pair"]
    assert {violation.message for violation in violations[:2]} == {
        "'start' is a dependency of 'end'",
        "'level' is a required property",
    }


def test_a_broken_schema_is_the_providers_error() -> None:
    with pytest.raises(InvalidSchemaError, match=r"invalid openAPIV3Schema at /properties/size/type"):
        validate_schema({}, {"properties": {"size": {"type": "integr"}}})
