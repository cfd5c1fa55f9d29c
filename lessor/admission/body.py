"""Reading a request body as JSON, and how deep an object may nest.

The webhook's port is reachable by anything in the cluster network, not only
the API server, so a body may be anything: not JSON, JSON nested so deep that
decoding it exhausts the stack, or so big that it exhausts memory. Each is
answered with what was wrong, before any check sees it.

The API server itself lets objects nest without limit inside fields that
keep unknown fields (a resource template), and checks walk objects
recursively; so an object nested deeper than `MAX_DEPTH` is denied, naming
where, rather than checked.
"""

from __future__ import annotations

import json
import re
from typing import Any

from lessor.model.jsonpatch import escape

MAX_BODY = 8 * 1024 * 1024
"""Bytes. An AdmissionReview carries both the new and the old object, each of which
may approach the API server's 3 MiB request limit; aiohttp's default 1 MiB would
turn big objects into errors."""

MAX_DEPTH = 100
"""Levels of nested arrays and objects in an object. Manifests stay under 30; checks
walk objects recursively, so depth must stay well below Python's recursion limit."""

# The API server writes request.uid first; a body too deep to decode can still be answered by it.
_UID = re.compile(rb'"request"\s*:\s*\{\s*"uid"\s*:\s*"([-0-9A-Za-z]{1,128})"')


class MalformedBody(ValueError):
    """The body cannot be decoded as JSON; the message says why.

    ``uid`` is the request's uid when the body is an AdmissionReview that is
    merely nested too deep to decode: it can still be denied.
    """

    def __init__(self, message: str, uid: str = "") -> None:
        super().__init__(message)
        self.uid = uid


def parse_json(raw: bytes) -> Any:
    """The decoded body; raises MalformedBody."""
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise MalformedBody(f"the body is not UTF-8 ({exc.reason} at byte {exc.start})") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise MalformedBody(f"the body is not JSON ({exc.msg} at line {exc.lineno} column {exc.colno})") from None
    except RecursionError:
        uid = _UID.search(raw)
        raise MalformedBody(f"the JSON nests too deep to decode (lessor accepts objects {MAX_DEPTH} levels deep)",
                            uid.group(1).decode() if uid else "") from None


def too_deep(value: Any, limit: int = MAX_DEPTH) -> str | None:
    """The JSON pointer of the first array or object nested deeper than ``limit`` in ``value``, or None.

    Depths only, first: an object of many entries costs one pass without a string per entry; the
    pointer is spelled out only for an object that is too deep.
    """
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            children: Any = item.values()
        elif isinstance(item, list):
            children = item
        else:
            continue
        if depth > limit:
            return _pointer_too_deep(value, limit)
        stack.extend((child, depth + 1) for child in children if isinstance(child, dict | list))
    return None


def _pointer_too_deep(value: Any, limit: int) -> str | None:
    stack: list[tuple[Any, int, str]] = [(value, 1, "")]
    while stack:
        item, depth, pointer = stack.pop()
        if isinstance(item, dict):
            children = [(child, f"{pointer}/{escape(str(key))}") for key, child in item.items()]
        elif isinstance(item, list):
            children = [(child, f"{pointer}/{index}") for index, child in enumerate(item)]
        else:
            continue
        if depth > limit:
            return pointer
        stack.extend((child, depth + 1, path) for child, path in children)
    return None
