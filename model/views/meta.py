"""The metadata every kind shares, and the base of every kind's view.

A user may write any shape into an object the API server's schema lets through (and older objects predate
today's schema), so every reader here tolerates every shape: a missing or malformed field reads as None, empty
or 0, never raises.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Self

from ..fields import Body, is_mapping, mapping_at, timestamp
from ..labels import IGNORE

EMPTY: Mapping[str, Any] = {}


def text(value: Any) -> str | None:
    """A string field; None when it is missing or not a string."""
    return value if isinstance(value, str) else None


def strings(value: Any) -> Mapping[str, str]:
    """A map of strings (labels, annotations); entries that are not string to string are left out. A map that
    is all strings, as nearly every one is, is given as it is, not copied."""
    if not is_mapping(value):
        return EMPTY
    if all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return value
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


def ref_name(value: Any) -> str | None:
    """The name of a `{name: ...}` reference; None when it is missing, empty or malformed."""
    name = value.get("name") if is_mapping(value) else None
    return name if isinstance(name, str) and name else None


@dataclass(frozen=True, slots=True)
class Meta:
    """`metadata`, typed. It holds the mapping and reads each field when asked: a view is built per observed
    version of every object, and most readers want one or two fields (building them all cost 7 µs and 0.4 KB a
    view at 20k exporters)."""

    fields: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def of(cls, body: Body | None) -> Meta:
        return cls(mapping_at(body, "metadata"))

    @property
    def name(self) -> str:
        return text(self.fields.get("name")) or ""

    @property
    def namespace(self) -> str:
        return text(self.fields.get("namespace")) or ""

    @property
    def uid(self) -> str:
        return text(self.fields.get("uid")) or ""

    @property
    def resource_version(self) -> str:
        return text(self.fields.get("resourceVersion")) or ""

    @property
    def generation(self) -> int | None:
        value = self.fields.get("generation")
        return value if isinstance(value, int) and not isinstance(value, bool) else None

    @property
    def labels(self) -> Mapping[str, str]:
        return strings(self.fields.get("labels"))

    @property
    def annotations(self) -> Mapping[str, str]:
        return strings(self.fields.get("annotations"))

    @property
    def created(self) -> datetime | None:
        return timestamp(self.fields.get("creationTimestamp"))

    @property
    def deleting(self) -> bool:
        return bool(self.fields.get("deletionTimestamp"))

    @property
    def owners(self) -> tuple[Mapping[str, Any], ...]:
        owners = self.fields.get("ownerReferences")
        return tuple(o for o in owners if is_mapping(o)) if isinstance(owners, list) else ()

    @property
    def ignored(self) -> bool:
        """Whether the object carries `lessor.dev/ignore`: the operator leaves it alone."""
        return IGNORE in self.labels


@dataclass(frozen=True, slots=True)
class View:
    """An object as observed: its metadata typed, its `spec` and `status` as mappings (empty when missing or
    malformed), and the body itself for what is written back. Each kind's view adds its fields as properties,
    read from `spec` and `status` with the helpers above."""

    body: Body
    meta: Meta
    spec: Mapping[str, Any]
    status: Mapping[str, Any]

    @classmethod
    def of(cls, body: Body) -> Self:
        return cls(body, Meta.of(body), mapping_at(body, "spec"), mapping_at(body, "status"))

    @classmethod
    def maybe(cls, body: Body | None) -> Self | None:
        """The view of `body`, or None for no object (deleted, not found)."""
        return None if body is None else cls.of(body)

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def namespace(self) -> str:
        return self.meta.namespace
