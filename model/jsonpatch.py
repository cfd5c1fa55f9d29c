"""JSON Patch (RFC 6902) made only of `add`, `remove` and `replace`, and the rules built on it.

A provider's `updateFilters` allow claim updates per operation and path.
A general-purpose diff may emit `move` or `copy`, which no filter can judge
(the seed's own bug), so `diff` is written here and never does.

- Objects are compared key by key.
- Arrays keep their common prefix and suffix; the differing middle is
  compared index by index, extra new elements are added in ascending index
  order and surplus old ones removed from the highest index down, so each
  operation's index is valid when it is applied.
- Numbers compare by value (`1` equals `1.0`: JSON has one number type);
  booleans are not numbers.

Paths are JSON pointers (RFC 6901), with `~0` for `~` and `~1` for `/`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from lessor.templates.regexes import Regex, RegexError, compile_regex

Operation = dict[str, Any]

ALL_OPS = ("add", "remove", "replace")
_INDEX = re.compile(r"0|[1-9][0-9]*")
_MISSING = object()


class JsonPatchError(ValueError):
    """A patch that cannot be applied: bad pointer, missing target, failed test, unknown op."""


def escape(token: str) -> str:
    """One pointer token: `~` becomes `~0`, then `/` becomes `~1`."""
    return token.replace("~", "~0").replace("/", "~1")


def parse_pointer(pointer: str) -> list[str]:
    """The unescaped tokens of a JSON pointer; `""` is the whole document."""
    if pointer == "":
        return []
    if not pointer.startswith("/"):
        raise JsonPatchError(f"invalid JSON pointer {pointer!r}: it must be empty or start with '/'")
    tokens = pointer[1:].split("/")
    for token in tokens:
        if re.search(r"~(?![01])", token):
            raise JsonPatchError(f"invalid JSON pointer {pointer!r}: '~' must be followed by 0 or 1")
    return [token.replace("~1", "/").replace("~0", "~") for token in tokens]


_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def field_path(prefix: str, pointer: str) -> str:
    """``spec.resources[0].template`` + ``/data/size`` is ``spec.resources[0].template.data.size``.

    Library errors name JSON pointers; a denial names the field the way the
    user wrote it, so kubectl output reads like the manifest.
    """
    path = prefix
    for token in parse_pointer(pointer):
        if token.isdigit():
            path += f"[{token}]"
        elif _PLAIN_KEY.fullmatch(token):
            path += f".{token}" if path else token
        else:
            path += f"[{token}]"
    return path


def json_equal(a: Any, b: Any) -> bool:
    """Equality of JSON values: `True != 1`, `1 == 1.0`, and dict key order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return isinstance(a, bool) and isinstance(b, bool) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, Mapping) and isinstance(b, Mapping):
        return a.keys() == b.keys() and all(json_equal(a[key], b[key]) for key in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(json_equal(x, y) for x, y in zip(a, b))
    if isinstance(a, str) and isinstance(b, str):
        return a == b
    return a is None and b is None


# ----------------------------------------------------------------- diff


def diff(old: Any, new: Any) -> list[Operation]:
    """The operations that turn `old` into `new`."""
    patch: list[Operation] = []
    _diff(old, new, "", patch)
    return patch


def _diff(old: Any, new: Any, path: str, patch: list[Operation]) -> None:
    if json_equal(old, new):
        return
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        for key in old:
            if key not in new:
                patch.append({"op": "remove", "path": f"{path}/{escape(key)}"})
        for key, value in new.items():
            child = f"{path}/{escape(key)}"
            if key in old:
                _diff(old[key], value, child, patch)
            else:
                patch.append({"op": "add", "path": child, "value": copy.deepcopy(value)})
    elif isinstance(old, list) and isinstance(new, list):
        _diff_list(old, new, path, patch)
    else:
        patch.append({"op": "replace", "path": path, "value": copy.deepcopy(new)})


def _diff_list(old: list[Any], new: list[Any], path: str, patch: list[Operation]) -> None:
    shortest = min(len(old), len(new))
    start = 0
    while start < shortest and json_equal(old[start], new[start]):
        start += 1
    tail = 0
    while tail < shortest - start and json_equal(old[-1 - tail], new[-1 - tail]):
        tail += 1
    old_middle = old[start : len(old) - tail]
    new_middle = new[start : len(new) - tail]
    for offset in range(min(len(old_middle), len(new_middle))):
        _diff(old_middle[offset], new_middle[offset], f"{path}/{start + offset}", patch)
    for offset in range(len(old_middle), len(new_middle)):
        value = copy.deepcopy(new_middle[offset])
        patch.append({"op": "add", "path": f"{path}/{start + offset}", "value": value})
    for offset in reversed(range(len(new_middle), len(old_middle))):
        patch.append({"op": "remove", "path": f"{path}/{start + offset}"})


# ----------------------------------------------------------------- apply


def apply(doc: Any, patch: Iterable[Mapping[str, Any]]) -> Any:
    """A patched copy of `doc`; neither `doc` nor `patch` is modified.

    Supports `add`, `remove`, `replace` and `test`; anything else, a
    pointer that does not resolve, or a failing `test` raises JsonPatchError.
    """
    result = copy.deepcopy(doc)
    for number, operation in enumerate(patch):
        try:
            result = _apply_one(result, operation)
        except JsonPatchError as error:
            where = f"{operation.get('op')} {operation.get('path')!r}"
            raise JsonPatchError(f"operation {number} ({where}): {error}") from None
    return result


def _apply_one(doc: Any, operation: Mapping[str, Any]) -> Any:
    op = operation.get("op")
    if op not in ("add", "remove", "replace", "test"):
        raise JsonPatchError(f"unsupported op {op!r}")
    path = operation.get("path")
    if not isinstance(path, str):
        raise JsonPatchError("'path' must be a string")
    if op != "remove" and "value" not in operation:
        raise JsonPatchError("'value' is missing")
    tokens = parse_pointer(path)
    value = copy.deepcopy(operation.get("value"))

    if not tokens:
        if op == "remove":
            raise JsonPatchError("cannot remove the whole document")
        if op == "test":
            _test(doc, value)
            return doc
        return value

    parent = _resolve(doc, tokens[:-1])
    last = tokens[-1]
    if isinstance(parent, dict):
        if op != "add" and last not in parent:
            raise JsonPatchError(f"no member {last!r}")
        if op == "test":
            _test(parent[last], value)
        elif op == "remove":
            del parent[last]
        else:
            parent[last] = value
    elif isinstance(parent, list):
        index = _list_index(parent, last, allow_end=op == "add")
        if op == "test":
            _test(parent[index], value)
        elif op == "remove":
            del parent[index]
        elif op == "replace":
            parent[index] = value
        else:
            parent.insert(index, value)
    else:
        raise JsonPatchError(f"cannot address {last!r} inside a {type(parent).__name__}")
    return doc


def resolve_pointer(doc: Any, pointer: str) -> Any:
    """The value at `pointer` in `doc`; JsonPatchError when there is none."""
    return _resolve(doc, parse_pointer(pointer))


def _resolve(doc: Any, tokens: Sequence[str]) -> Any:
    for token in tokens:
        if isinstance(doc, dict):
            if token not in doc:
                raise JsonPatchError(f"no member {token!r}")
            doc = doc[token]
        elif isinstance(doc, list):
            doc = doc[_list_index(doc, token, allow_end=False)]
        else:
            raise JsonPatchError(f"cannot address {token!r} inside a {type(doc).__name__}")
    return doc


def _list_index(array: list[Any], token: str, allow_end: bool) -> int:
    if token == "-" and allow_end:
        return len(array)
    if not _INDEX.fullmatch(token):
        raise JsonPatchError(f"{token!r} is not an array index")
    index = int(token)
    if index > len(array) or (index == len(array) and not allow_end):
        raise JsonPatchError(f"index {index} is out of range for an array of {len(array)}")
    return index


def _test(actual: Any, expected: Any) -> None:
    if not json_equal(actual, expected):
        raise JsonPatchError(f"test failed: the value is {actual!r}, not {expected!r}")


# ------------------------------------------------------- updateFilters


def _compile(pattern: str, field: str) -> Regex:
    """A provider's regex, in RE2 (linear time, whatever the pattern); ValueError naming `field`."""
    try:
        return compile_regex(pattern)
    except RegexError as error:
        raise ValueError(f"{field}: {error}") from None


def filter_operations(
    patch: Iterable[Operation], update_filters: Iterable[Mapping[str, Any]] | None
) -> tuple[list[Operation], list[Operation]]:
    """Split a patch into the operations the provider's `updateFilters` allow and those it refuses.

    An operation is allowed when some filter's `pathMatch` matches its whole
    path (a full match, in RE2, so `/spec/desiredState` does not also allow
    `/spec/desiredStateOverride`) and the filter's `allowedOps` (all three
    when absent) include its op. No filters means no update is allowed:
    a provider opts fields in. Raises ValueError for a malformed filter.
    """
    rules = []
    for update_filter in update_filters or ():
        pattern = update_filter.get("pathMatch")
        if not isinstance(pattern, str):
            raise ValueError("an updateFilters entry has no pathMatch")
        ops = update_filter.get("allowedOps")
        ops = ALL_OPS if ops is None else tuple(ops)
        unknown = [op for op in ops if op not in ALL_OPS]
        if unknown:
            raise ValueError(f"updateFilters allowedOps {unknown} are not among {list(ALL_OPS)}")
        rules.append((_compile(pattern, "updateFilters pathMatch"), ops))

    allowed: list[Operation] = []
    refused: list[Operation] = []
    for operation in patch:
        ok = any(regex.fullmatch(operation["path"]) and operation["op"] in ops for regex, ops in rules)
        (allowed if ok else refused).append(operation)
    return allowed, refused


# --------------------------------------------------------- matchIgnore


def matches_ignoring(a: Any, b: Any, ignore_patterns: Iterable[str]) -> bool:
    """Whether `a` and `b` are equal once paths matching any `matchIgnore` regex are ignored.

    A pattern (RE2) matches a whole JSON pointer and ignores the
    value there with everything inside it. Where a whole object or array
    is present on one side only, its leaves are what the patterns are
    matched against, so ignoring `/spec/vars/.*` also ignores a `vars`
    that only one side has, as long as everything in it is ignored.
    """
    regexes = [_compile(pattern, "matchIgnore") for pattern in ignore_patterns]
    return all(
        any(regex.fullmatch(path) for regex in regexes) for path in _differences(a, b, "", regexes)
    )


def _differences(a: Any, b: Any, path: str, ignored: Sequence[Regex]) -> Iterator[str]:
    """Pointers of the values that differ, descending into containers present on one side only."""
    if any(regex.fullmatch(path) for regex in ignored):
        return
    if a is _MISSING and _children(b):
        for token, value in _children(b):
            yield from _differences(_MISSING, value, f"{path}/{token}", ignored)
    elif b is _MISSING and _children(a):
        for token, value in _children(a):
            yield from _differences(value, _MISSING, f"{path}/{token}", ignored)
    elif a is _MISSING or b is _MISSING:
        yield path
    elif isinstance(a, Mapping) and isinstance(b, Mapping):
        for key in [*a, *(key for key in b if key not in a)]:
            child = f"{path}/{escape(key)}"
            yield from _differences(a.get(key, _MISSING), b.get(key, _MISSING), child, ignored)
    elif isinstance(a, list) and isinstance(b, list):
        for index in range(max(len(a), len(b))):
            yield from _differences(
                a[index] if index < len(a) else _MISSING,
                b[index] if index < len(b) else _MISSING,
                f"{path}/{index}",
                ignored,
            )
    elif not json_equal(a, b):
        yield path


def _children(value: Any) -> list[tuple[str, Any]]:
    if isinstance(value, Mapping):
        return [(escape(key), item) for key, item in value.items()]
    if isinstance(value, list):
        return [(str(index), item) for index, item in enumerate(value)]
    return []
