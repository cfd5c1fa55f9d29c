"""The resource names and label selectors of Jumpstarter's API, in and out of lessor's objects. No grpc here."""

from __future__ import annotations

import re
from typing import Any

_NAME = re.compile(r"^namespaces/([^/]+)/(leases|exporters|clients)/([^/]+)$")
_PARENT = re.compile(r"^namespaces/([^/]+)$")


def resource(namespace: str, collection: str, name: str) -> str:
    """`namespaces/lab/leases/l1`."""
    return f"namespaces/{namespace}/{collection}/{name}"


def parse_resource(text: str, collection: str) -> tuple[str, str]:
    """(namespace, name) of `namespaces/NS/COLLECTION/NAME`; ValueError naming the expected form."""
    match = _NAME.match(text)
    if match is None or match.group(2) != collection:
        raise ValueError(f"name {text!r} is not namespaces/NAMESPACE/{collection}/NAME")
    return match.group(1), match.group(3)


def parse_parent(text: str) -> str:
    """The namespace of `namespaces/NS`."""
    match = _PARENT.match(text)
    if match is None:
        raise ValueError(f"parent {text!r} is not namespaces/NAMESPACE")
    return match.group(1)


def _split_terms(text: str) -> list[str]:
    """Split at the commas that are not inside parentheses."""
    terms, depth, current = [], 0, ""
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        if char == "," and depth == 0:
            terms.append(current.strip())
            current = ""
        else:
            current += char
    terms.append(current.strip())
    return [term for term in terms if term]


_SET = re.compile(r"^(\S+)\s+(in|notin)\s+\((.*)\)$")


def selector_from_text(text: str) -> dict[str, Any]:
    """A LabelSelector object from kubectl's selector syntax (`board=rpi4,zone in (a,b),!broken`), as
    `jmp create lease --selector` sends it; ValueError naming the term it cannot read."""
    labels: dict[str, str] = {}
    expressions: list[dict[str, Any]] = []
    for term in _split_terms(text):
        if match := _SET.match(term):
            values = [v.strip() for v in match.group(3).split(",") if v.strip()]
            if not values:
                raise ValueError(f"selector term {term!r}: {match.group(2)} needs at least one value")
            expressions.append({"key": match.group(1), "operator": "In" if match.group(2) == "in" else "NotIn",
                                "values": values})
        elif "!=" in term:
            key, value = (part.strip() for part in term.split("!=", 1))
            expressions.append({"key": key, "operator": "NotIn", "values": [value]})
        elif "=" in term:
            key, value = (part.strip() for part in term.replace("==", "=").split("=", 1))
            labels[key] = value
        elif term.startswith("!"):
            expressions.append({"key": term[1:].strip(), "operator": "DoesNotExist"})
        elif re.fullmatch(r"[A-Za-z0-9._/-]+", term):
            expressions.append({"key": term, "operator": "Exists"})
        else:
            raise ValueError(f"selector term {term!r} is not key=value, key!=value, key in (...), "
                             "key notin (...), key or !key")
    selector: dict[str, Any] = {}
    if labels:
        selector["matchLabels"] = labels
    if expressions:
        selector["matchExpressions"] = expressions
    return selector
