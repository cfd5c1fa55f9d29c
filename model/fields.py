"""Read-only readers of object fields, tolerant of any shape a user may write.

Each returns a typed value or None (or 0) for a missing or malformed field; none raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any, TypeGuard

from lessor.templates.timestamps import parse_timestamp


Body = Mapping[str, Any]



def is_mapping(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """`isinstance(value, Mapping)`, a dict first: what JSON decodes to, and the cache's shared dicts (a dict
    subclass), pass the C check, not the ABC's, which costs more than the rest of a reader (the topology reads
    a dozen fields per event)."""
    return isinstance(value, dict) or isinstance(value, Mapping)


def mapping_at(obj: Body | None, key: str) -> Mapping[str, Any]:
    """`obj[key]` when it is a mapping, else an empty one: a user may write any shape."""
    value = (obj or {}).get(key)
    return value if is_mapping(value) else {}


def _metadata(obj: Body | None) -> Mapping[str, Any]:
    return mapping_at(obj, "metadata")


def name_of(obj: Body) -> str:
    return str(_metadata(obj).get("name") or "")


def deleting(obj: Body | None) -> bool:
    return bool(_metadata(obj).get("deletionTimestamp"))


def generation(obj: Body | None) -> int | None:
    value = _metadata(obj).get("generation")
    return value if isinstance(value, int) else None


def _version(obj: Body | None) -> int | None:
    try:
        return int(_metadata(obj).get("resourceVersion") or 0)
    except (TypeError, ValueError):
        return None


def newer(obj: Body, than: Body | None) -> bool:
    """Whether snapshot `obj` is at least as new as `than` (snapshots from the topology can trail an actor's
    own writes: keep the higher resourceVersion).

    A resourceVersion that is not a number cannot be compared; then `obj` is taken, so an actor never stays
    stuck on a copy no later snapshot can replace. A missing one counts as 0 (an object never written).
    """
    if than is None:
        return True
    mine, theirs = _version(obj), _version(than)
    return mine is None or theirs is None or mine >= theirs


def timestamp(value: Any) -> datetime | None:
    """An RFC 3339 timestamp field, or None when it is missing or unreadable."""
    try:
        return parse_timestamp(value) if isinstance(value, str) else None
    except ValueError:
        return None


def created_at(obj: Body) -> datetime | None:
    return timestamp(_metadata(obj).get("creationTimestamp"))
