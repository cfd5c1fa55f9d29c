"""Validating templates against a provider's openAPIV3Schema: every error, each with its pointer."""

from __future__ import annotations

import re

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


# --- user regexes run in RE2: linear time, and the dialect the API server uses for CRD patterns -----------

REDOS = {"type": "object", "properties": {"data": {
    "type": "object",
    "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}},
    "patternProperties": {"^(b+)+$": {"type": "integer"}},
    "additionalProperties": False,
}}}


def test_a_catastrophic_pattern_answers_at_once() -> None:
    # Python's backtracking `re` would take longer than the universe's age on these.
    hostile = {"data": {"x": "a" * 100_000 + "!", "b" * 100_000 + "!": "not checked by the pattern"}}

    violations = validate_schema(hostile, REDOS)

    assert [v.path for v in violations] == ["/data", "/data/x"]
    assert "does not match any of the regexes: '^(b+)+$'" in violations[0].message
    assert validate_schema({"data": {"x": "aaa", "bbb": 1}}, REDOS) == []
    assert [v.path for v in validate_schema({"data": {"bbb": "one"}}, REDOS)] == ["/data/bbb"]


@pytest.mark.parametrize(
    ("schema", "where"),
    [
        ({"properties": {"data": {"properties": {"x": {"pattern": "(?=a)b"}}}}},
         ".properties.data.properties.x.pattern"),
        ({"patternProperties": {"(a)\\1": {}}}, '.patternProperties["(a)\\\\1"]'),
        ({"items": {"pattern": "a{1001}"}}, ".items.pattern"),
        ({"allOf": [{"properties": {"a.b": {"pattern": "(?<!x)"}}}]}, '.allOf[0].properties["a.b"].pattern'),
    ],
)
def test_a_pattern_re2_cannot_compile_names_its_place(schema: dict, where: str) -> None:
    with pytest.raises(InvalidSchemaError) as caught:
        validate_schema({}, schema)

    assert caught.value.where == where
    assert caught.value.reason.startswith("invalid regular expression")
    assert "(RE2 syntax)" in caught.value.reason


def test_re2_syntax_that_python_lacks_is_accepted() -> None:
    schema = {"properties": {"name": {"type": "string", "pattern": "^\\pL+\\z"}}}
    assert validate_schema({"name": "abc"}, schema) == []
    assert [v.path for v in validate_schema({"name": "ab1"}, schema)] == ["/name"]


@pytest.mark.parametrize(("ref", "says"), [("#/definitions/nowhere", "$ref cannot be resolved"),
                                           ("#", "$ref refers to itself without end")], ids=["nowhere", "itself"])
def test_a_ref_that_cannot_be_followed_is_the_schemas_error_not_a_crash(ref: str, says: str) -> None:
    """Found by the fuzz suite: such a schema crashed the provider informer's handler, and the webhook."""
    with pytest.raises(InvalidSchemaError, match=re.escape(says)):
        validate_schema({"data": {}}, {"type": "object", "$ref": ref})


@pytest.mark.parametrize("pattern", [{"a": 1}, ["a"], 7])
def test_a_pattern_that_is_not_a_string_names_its_place(pattern: object) -> None:
    """Found by the webhook review fuzz (a provider whose schema's pattern was an object): an InternalError before."""
    with pytest.raises(InvalidSchemaError) as caught:
        validate_schema({}, {"properties": {"x": {"pattern": pattern}}})
    assert caught.value.where == ".properties.x.pattern"
    assert "must be a string" in caught.value.reason
