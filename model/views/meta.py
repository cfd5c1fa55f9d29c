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

from ..fields import Body, mapping_at, timestamp
from ..labels import IGNORE

EMPTY: Mapping[str, Any] = {}


def text(value: Any) -> str | None:
    """A string field; None when it is missing or not a string."""
    return value if isinstance(value, str) else None


def strings(value: Any) -> Mapping[str, str]:
    """A map of strings (labels, annotations); entries that are not string to string are left out."""
    if not isinstance(value, Mapping):
        return EMPTY
    return {k: v for k, v in value.items() if isinstance(k, str) and isinstance(v, str)}


@dataclass(frozen=True, slots=True)
class Meta:
    """`metadata`, typed."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int | None = None
    labels: Mapping[str, str] = field(default_factory=dict)
    annotations: Mapping[str, str] = field(default_factory=dict)
    created: datetime | None = None
    deleting: bool = False
    owners: tuple[Mapping[str, Any], ...] = ()

    @classmethod
    def of(cls, body: Body | None) -> Meta:
        metadata = mapping_at(body, "metadata")
        generation = metadata.get("generation")
        owners = metadata.get("ownerReferences")
        return cls(
            name=text(metadata.get("name")) or "",
            namespace=text(metadata.get("namespace")) or "",
            uid=text(metadata.get("uid")) or "",
            resource_version=text(metadata.get("resourceVersion")) or "",
            generation=generation if isinstance(generation, int) and not isinstance(generation, bool) else None,
            labels=strings(metadata.get("labels")),
            annotations=strings(metadata.get("annotations")),
            created=timestamp(metadata.get("creationTimestamp")),
            deleting=bool(metadata.get("deletionTimestamp")),
            owners=tuple(o for o in owners if isinstance(o, Mapping)) if isinstance(owners, list) else (),
        )

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
