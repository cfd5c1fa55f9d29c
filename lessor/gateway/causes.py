"""Which of lessor's own writes a watch event reports, so that a trace goes on through it.

A claim becomes Ready through objects lessor writes itself: the claim's actor creates a handle, the
handle's actor applies the resources, the handle's status brings the claim its Ready. Each step
reaches the next actor as a watch event, and a watch event is where a trace would begin. Kept here:
the span of each write still waiting for its event, keyed by the object and the resourceVersion the
API server answered (or, while the answer is on its way, by the object alone: the event may be read
before the answer). The event's span is then a child of the write's, and the story stays one trace.

Only sampled writes are kept, at most `capacity` of them (a write with no event, e.g. a patch that
changed nothing, is forgotten oldest-first): with tracing off this costs nothing.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping
from typing import Any

from opentelemetry.trace import SpanContext

from lessor.model.fields import mapping_at
from lessor.model.views import Meta

Key = tuple[str, str, str]  # kind, namespace, name (or "~" + generateName while a create is in flight)


def key_of(kind: str, namespace: str | None, body: Mapping[str, Any] | None, name: str | None = None) -> Key:
    """The object a write names: by `name`, else by the body's name or generateName."""
    metadata = mapping_at(body, "metadata")  # `generateName` too, which `Meta` leaves out
    found = name or metadata.get("name") or f"~{metadata.get('generateName') or ''}"
    return kind, namespace or "", str(found)


class WriteCauses:
    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._in_flight: dict[Key, SpanContext] = {}
        self._answered: OrderedDict[tuple[Key, str], SpanContext] = OrderedDict()

    def __len__(self) -> int:
        return len(self._in_flight) + len(self._answered)

    def writing(self, key: Key, context: SpanContext) -> None:
        self._in_flight[key] = context

    def wrote(self, key: Key, answer: Mapping[str, Any] | None, context: SpanContext) -> None:
        """The write's answer came (or it failed: `answer` None)."""
        if self._in_flight.get(key) is context:
            del self._in_flight[key]
        meta = Meta.of(answer)
        version = meta.resource_version
        if not version:
            return
        self._answered[((key[0], key[1], meta.name or key[2]), version)] = context
        while len(self._answered) > self._capacity:
            self._answered.popitem(last=False)

    def cause_of(self, kind: str, obj: Mapping[str, Any]) -> SpanContext | None:
        """The span of lessor's write that this event of `obj` reports, if any (each answered write once)."""
        if not self._in_flight and not self._answered:
            return None
        metadata = mapping_at(obj, "metadata")  # `generateName` too, which `Meta` leaves out
        key = (kind, metadata.get("namespace") or "", metadata.get("name") or "")
        found = self._answered.pop((key, metadata.get("resourceVersion") or ""), None)
        if found is None:
            found = self._in_flight.get(key)
        if found is None and metadata.get("generateName"):
            found = self._in_flight.get((kind, key[1], f"~{metadata['generateName']}"))
        return found
