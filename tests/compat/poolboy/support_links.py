"""The providers of Poolboy's linked scenarios, in lessor's test words: a base with a `stringvar` of three
lower-case values and a `numbervar`, rendered into a resource named after the handle and the entry."""

from __future__ import annotations

from typing import Any

PARAMETERS = [
    {"name": "stringvar", "allowUpdate": True, "required": True, "validation": {"openAPIV3Schema": {
        "type": "string", "default": "one", "enum": ["one", "two", "three"]}}},
    {"name": "numbervar", "allowUpdate": True, "validation": {"openAPIV3Schema": {
        "type": "integer", "default": 0, "minimum": 0}}},
]


def base_spec(override: dict[str, Any], numbervalue: str, stringvalue: str, **more: Any) -> dict[str, Any]:
    return {"override": override, "parameters": PARAMETERS, "template": {"enable": True, "definition": {
        "spec": {"numbervalue": numbervalue, "stringvalue": stringvalue}}},
        "updateFilters": [{"pathMatch": "/spec/.*", "allowedOps": ["replace"]}], **more}


def entries(claim: dict[str, Any]) -> list[tuple[str, str]]:
    """(name, provider) of each of the claim's status.resources."""
    return [(r["name"], r["provider"]["name"]) for r in claim["status"].get("resources") or ()]
