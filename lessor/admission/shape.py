"""Whether an object has the types its CustomResourceDefinition gives its fields.

The API server checks an object against its CRD's schema before it calls
validating webhooks, so checks are written for objects of the right shape.
The webhook's port is reachable by more than the API server, though, and a
check that meets a string where the CRD says object fails with an
AttributeError: an internal error instead of an answer. So the webhook
checks the types first, from the same CRDs (crds/*.yaml), and denies a
field of the wrong type by name. Only types: patterns, formats and enums
stay the API server's.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

from lessor.shipped import manifests
from lessor.model.views import View

_TYPES: dict[str, tuple[type, ...]] = {
    "object": (dict,), "array": (list,), "string": (str,), "boolean": (bool,), "integer": (int,),
    "number": (int, float),
}
_JSON_NAMES = {dict: "object", list: "array", str: "string", bool: "boolean", int: "integer", float: "number"}


@cache
def _schemas() -> dict[tuple[str, str, str], Mapping[str, Any]]:
    """(group, version, kind) → the CRD's openAPIV3Schema."""
    found = {}
    for crd in manifests.crds():
        spec = View.of(crd).spec
        for version in spec["versions"]:
            found[(spec["group"], version["name"], spec["names"]["kind"])] = version["schema"]["openAPIV3Schema"]
    return found


def warm() -> None:
    """Read the CRDs now (a second or more of YAML), so that the first review does not wait for it."""
    _schemas()


def wrong_type(group: str, version: str, kind: str, obj: Mapping[str, Any]) -> tuple[str, str] | None:
    """(field, what is wrong) for the first field of ``obj`` whose type is not its CRD's; None if all are.

    Kinds that are not lessor's are not judged. ``metadata`` is the API server's.
    """
    schema = _schemas().get((group, version, kind))
    if schema is None:
        return None
    properties = schema.get("properties") or {}
    for key in sorted(set(obj) & set(properties) - {"metadata"}):
        if (problem := _wrong(obj[key], properties[key], key)) is not None:
            return problem
    return None


def _wrong(value: Any, schema: Mapping[str, Any], field: str) -> tuple[str, str] | None:
    """`_problem`, its field spelled out (only for the field found: a list of many entries builds no strings)."""
    if (problem := _problem(value, schema)) is None:
        return None
    path, message = problem
    for step in reversed(path):
        field = f"{field}[{step}]" if isinstance(step, int) else _join(field, step)
    return field, message


def _problem(value: Any, schema: Mapping[str, Any]) -> tuple[list[str | int], str] | None:
    """(the path below `value`, innermost first, and what is wrong) for the first field of the wrong type."""
    if value is None:
        return None  # the API server drops nulls it does not allow
    if schema.get("x-kubernetes-int-or-string"):
        if isinstance(value, bool) or not isinstance(value, int | str):
            return [], f"must be an integer or a string, not {_name(value)}"
        return None
    expected = schema.get("type")
    if expected in _TYPES and (not isinstance(value, _TYPES[expected]) or (
            isinstance(value, bool) and expected in ("integer", "number"))):
        return [], f"must be {'an' if expected[0] in 'aeiou' else 'a'} {expected}, not {_name(value)}"
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        for key, item in value.items():
            child = properties.get(key) or (extra if isinstance(extra, Mapping) else None)
            if child is not None and (problem := _problem(item, child)) is not None:
                problem[0].append(key)
                return problem
    elif isinstance(value, list) and isinstance(items := schema.get("items"), Mapping):
        for index, item in enumerate(value):
            if (problem := _problem(item, items)) is not None:
                problem[0].append(index)
                return problem
    return None


def _join(field: str, key: str) -> str:
    return f"{field}.{key}" if key.replace("_", "").replace("-", "").isalnum() else f"{field}[{key}]"


def _name(value: Any) -> str:
    return _JSON_NAMES.get(type(value), type(value).__name__)
