"""JSON Patch from add/remove/replace only, applying it, updateFilters and matchIgnore."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessor.model.jsonpatch import JsonPatchError, apply, diff, filter_operations, matches_ignoring

# Keys with '/' and '~' exercise pointer escaping; few distinct keys make overlaps likely.
keys = st.sampled_from(["a", "b", "c", "a/b", "m~n", "~1", "", "0"])
scalars = st.none() | st.booleans() | st.integers(-3, 3) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=3)
documents = st.recursive(
    scalars,
    lambda children: st.lists(children, max_size=5) | st.dictionaries(keys, children, max_size=5),
    max_leaves=25,
)


def canonical(value: Any) -> Any:
    """A form in which JSON-equal values are ==, and true is not 1."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", value)
    if isinstance(value, dict):
        return ("object", {key: canonical(item) for key, item in value.items()})
    if isinstance(value, list):
        return ("array", [canonical(item) for item in value])
    return ("other", value)


@settings(max_examples=300)
@given(documents, documents)
def test_a_diff_applied_gives_the_new_document(old: Any, new: Any) -> None:
    old_copy, new_copy = copy.deepcopy(old), copy.deepcopy(new)
    patch = diff(old, new)
    assert {operation["op"] for operation in patch} <= {"add", "remove", "replace"}
    assert canonical(apply(old, patch)) == canonical(new)
    assert canonical(old) == canonical(old_copy) and canonical(new) == canonical(new_copy)


@given(documents)
def test_a_document_has_no_diff_with_itself(doc: Any) -> None:
    assert diff(doc, copy.deepcopy(doc)) == []
    assert matches_ignoring(doc, copy.deepcopy(doc), [])


@given(documents, documents)
def test_documents_match_without_ignores_exactly_when_they_have_no_diff(a: Any, b: Any) -> None:
    assert matches_ignoring(a, b, []) == (diff(a, b) == [])
    assert matches_ignoring(a, b, [".*"])


def test_diff_escapes_pointers_and_never_moves() -> None:
    old = {"metadata": {"annotations": {"lessor.dev/a": "1", "x~y": "2"}}, "spec": {"keep": 1, "drop": 2}}
    new = {"metadata": {"annotations": {"lessor.dev/a": "3", "x~y": "2"}}, "spec": {"keep": 1, "moved": 2}}
    assert diff(old, new) == [
        {"op": "replace", "path": "/metadata/annotations/lessor.dev~1a", "value": "3"},
        {"op": "remove", "path": "/spec/drop"},
        {"op": "add", "path": "/spec/moved", "value": 2},
    ]


@pytest.mark.parametrize(
    ("old", "new", "patch"),
    [
        ([1, 2, 3], [1, 2, 3, 4, 5], [{"op": "add", "path": "/3", "value": 4}, {"op": "add", "path": "/4", "value": 5}]),
        ([1, 2, 3, 4, 5], [1, 2], [{"op": "remove", "path": "/4"}, {"op": "remove", "path": "/3"}, {"op": "remove", "path": "/2"}]),
        ([1, 2, 3], [0, 1, 2, 3], [{"op": "add", "path": "/0", "value": 0}]),
        ([1, 2, 3], [1, 3], [{"op": "remove", "path": "/1"}]),
        ([1, 2, 3], [1, 9, 3], [{"op": "replace", "path": "/1", "value": 9}]),
        ([{"a": 1}, 5], [{"a": 2}, 5, 6], [{"op": "replace", "path": "/0/a", "value": 2}, {"op": "add", "path": "/2", "value": 6}]),
        (True, 1, [{"op": "replace", "path": "", "value": 1}]),
        (1, 1.0, []),
        ({"a": [1]}, {"a": {"0": 1}}, [{"op": "replace", "path": "/a", "value": {"0": 1}}]),
    ],
)
def test_diff_rules(old: Any, new: Any, patch: list[dict[str, Any]]) -> None:
    assert diff(old, new) == patch


def test_diff_values_are_copies() -> None:
    new = {"a": {"b": [1]}}
    patch = diff({}, new)
    patch[0]["value"]["b"].append(2)
    assert new == {"a": {"b": [1]}}


def test_apply_supports_test_and_the_end_of_an_array() -> None:
    doc = {"list": [1], "name": "x"}
    patched = apply(doc, [
        {"op": "test", "path": "/name", "value": "x"},
        {"op": "add", "path": "/list/-", "value": 2},
        {"op": "add", "path": "/list/0", "value": 0},
        {"op": "replace", "path": "/name", "value": "y"},
    ])
    assert patched == {"list": [0, 1, 2], "name": "y"}
    assert doc == {"list": [1], "name": "x"}


@pytest.mark.parametrize(
    ("operation", "message"),
    [
        ({"op": "test", "path": "/name", "value": "z"}, "test failed"),
        ({"op": "test", "path": "/n", "value": True}, "test failed"),
        ({"op": "replace", "path": "/missing", "value": 1}, "no member 'missing'"),
        ({"op": "remove", "path": "/list/1"}, "index 1 is out of range"),
        ({"op": "add", "path": "/list/2", "value": 1}, "index 2 is out of range"),
        ({"op": "add", "path": "/list/01", "value": 1}, "'01' is not an array index"),
        ({"op": "remove", "path": "/list/-"}, "'-' is not an array index"),
        ({"op": "add", "path": "/name/x", "value": 1}, "cannot address 'x' inside a str"),
        ({"op": "add", "path": "/a/b/c", "value": 1}, "no member 'a'"),
        ({"op": "add", "path": "name", "value": 1}, "must be empty or start with '/'"),
        ({"op": "add", "path": "/a~2", "value": 1}, "'~' must be followed by 0 or 1"),
        ({"op": "move", "from": "/name", "path": "/x"}, "unsupported op 'move'"),
        ({"op": "add", "path": "/x"}, "'value' is missing"),
        ({"op": "remove", "path": ""}, "cannot remove the whole document"),
    ],
)
def test_a_bad_operation_is_a_clear_error(operation: dict[str, Any], message: str) -> None:
    doc = {"list": [1], "name": "x", "n": 1}
    with pytest.raises(JsonPatchError, match=message) as caught:
        apply(doc, [{"op": "test", "path": "/n", "value": 1}, operation])
    assert str(caught.value).startswith("operation 1 ")


def test_apply_unescapes_pointers() -> None:
    assert apply({"a/b": {"m~n": 1}}, [{"op": "replace", "path": "/a~1b/m~0n", "value": 2}]) == {"a/b": {"m~n": 2}}


# The seed's use case: users may change spec.desiredState and nothing else.
DESIRED_STATE = [{"pathMatch": "/spec/desiredState", "allowedOps": ["replace"]}]


def test_update_filters_allow_only_matching_paths_and_ops() -> None:
    patch = diff(
        {"spec": {"desiredState": "started", "size": 2}},
        {"spec": {"desiredState": "stopped", "size": 8, "desiredStateOverride": "x"}},
    )
    allowed, refused = filter_operations(patch, DESIRED_STATE)
    assert allowed == [{"op": "replace", "path": "/spec/desiredState", "value": "stopped"}]
    assert refused == [
        {"op": "replace", "path": "/spec/size", "value": 8},
        {"op": "add", "path": "/spec/desiredStateOverride", "value": "x"},  # full match, not prefix
    ]


def test_update_filters_check_the_op() -> None:
    patch = diff({"spec": {"desiredState": "started"}}, {"spec": {}})
    assert filter_operations(patch, DESIRED_STATE) == ([], [{"op": "remove", "path": "/spec/desiredState"}])


def test_update_filters_without_allowed_ops_allow_all_three() -> None:
    patch = diff({"spec": {"vars": {"a": 1, "b": 2}}}, {"spec": {"vars": {"a": 2, "c": 3}}})
    allowed, refused = filter_operations(patch, [{"pathMatch": "/spec/vars/.*"}])
    assert [operation["op"] for operation in allowed] == ["remove", "replace", "add"]
    assert refused == []


def test_no_update_filters_means_no_updates() -> None:
    patch = diff({"spec": {"a": 1}}, {"spec": {"a": 2}})
    assert filter_operations(patch, None) == ([], patch)
    assert filter_operations(patch, []) == ([], patch)


@pytest.mark.parametrize(
    ("update_filter", "message"),
    [
        ({"pathMatch": "/spec/(unclosed"}, "updateFilters pathMatch: invalid regular expression '/spec/\\(unclosed' \\(RE2 syntax\\)"),
        ({"allowedOps": ["add"]}, "no pathMatch"),
        ({"pathMatch": "/spec/a", "allowedOps": ["move"]}, "allowedOps \\['move'\\]"),
    ],
)
def test_a_malformed_update_filter_is_a_clear_error(update_filter: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        filter_operations([], [update_filter])


def test_match_ignore_skips_matching_paths_and_everything_inside_them() -> None:
    handle = {"spec": {"vars": {"guid": "abc12", "nested": {"x": 1}}, "size": 2}}
    claim = {"spec": {"vars": {"guid": "zzz99", "nested": {"x": 2}}, "size": 2}}
    assert not matches_ignoring(handle, claim, [])
    assert not matches_ignoring(handle, claim, ["/spec/vars/guid"])
    assert matches_ignoring(handle, claim, ["/spec/vars/guid", "/spec/vars/nested"])
    assert matches_ignoring(handle, claim, ["/spec/vars(/.*)?"])
    assert not matches_ignoring(handle, claim, ["/spec/var"])  # full match, not prefix
    assert not matches_ignoring(handle, {**claim, "spec": {**claim["spec"], "size": 3}}, ["/spec/vars"])


def test_match_ignore_looks_inside_what_only_one_side_has() -> None:
    assert matches_ignoring({"spec": {}}, {"spec": {"vars": {"guid": "x"}}}, ["/spec/vars/guid"])
    assert matches_ignoring({"spec": {"list": [1]}}, {"spec": {"list": [1, {"seed": 2}]}}, ["/spec/list/\\d+/seed"])
    assert not matches_ignoring({"spec": {}}, {"spec": {"vars": {"guid": "x", "size": 1}}}, ["/spec/vars/guid"])
    assert not matches_ignoring({"spec": {}}, {"spec": {"vars": {}}}, ["/spec/vars/guid"])


def test_match_ignore_patterns_see_escaped_pointers() -> None:
    a = {"metadata": {"annotations": {"lessor.dev/seed": "1"}}}
    b = {"metadata": {"annotations": {"lessor.dev/seed": "2"}}}
    assert matches_ignoring(a, b, ["/metadata/annotations/lessor\\.dev~1seed"])


def test_a_malformed_match_ignore_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="matchIgnore: invalid regular expression"):
        matches_ignoring({"a": 1}, {"a": 2}, ["("])
