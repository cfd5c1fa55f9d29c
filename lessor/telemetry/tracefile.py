"""Spans to a file of JSON lines, and one object's trace read back from it as a terminal waterfall.

`lessor dev --traces` has the operator write its spans to Zipkin (the viewer it runs) and to a file
(`OTEL_TRACES_EXPORTER=jsonl`, `LESSOR_TRACES_FILE`); `lessor trace lease NAMESPACE/NAME` prints the
trace of that lease's creation from the file, with no viewer needed: every span, indented under its
parent, with when it started after the watch event, how long it took, the actor it ran in and its
status."""

from __future__ import annotations

import threading
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

TRACES_FILE_ENV = "LESSOR_TRACES_FILE"
DEFAULT_TRACES_FILE = "lessor-traces.jsonl"
ROOTS = {"lease": "Lease", "claim": "ResourceClaim"}
"""`lessor trace KIND`: the kind whose watch event roots the trace."""


class JsonLinesExporter(SpanExporter):
    """One JSON object per span, appended: what `lessor trace` reads."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        lines = b"".join(orjson.dumps(_record(span)) + b"\n" for span in spans)
        with self._lock, self.path.open("ab") as out:
            out.write(lines)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass


def _record(span: ReadableSpan) -> dict[str, Any]:
    context = span.context
    return {
        "trace": f"{context.trace_id:032x}" if context else "",
        "span": f"{context.span_id:016x}" if context else "",
        "parent": f"{span.parent.span_id:016x}" if span.parent else None,
        "name": span.name,
        "start": span.start_time or 0,
        "end": span.end_time or span.start_time or 0,
        "error": not span.status.is_ok,
        "description": span.status.description or "",
        # Attribute values are what OpenTelemetry allows (primitives and sequences of them), all JSON; a copy
        # of the span's own mapping is the cheap way to read them (this runs for every span, in a thread).
        "attributes": span.attributes.copy() if span.attributes else {},  # type: ignore[attr-defined]
        "events": [{"name": event.name, "attributes": dict(event.attributes or {})} for event in span.events],
    }


@dataclass(frozen=True, slots=True)
class Span:
    trace: str
    span: str
    parent: str | None
    name: str
    start: int  # nanoseconds since the epoch
    end: int
    error: bool
    description: str
    attributes: Mapping[str, Any]
    events: Sequence[Mapping[str, Any]] = ()


def read_spans(lines: Iterable[str | bytes], source: str = "the spans file") -> list[Span]:
    """The spans of a file `JsonLinesExporter` wrote; a line that is not one (a line cut short when an
    operator was killed mid-write, another file) is a ValueError that names it and says what to do."""
    spans = []
    for number, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            record = orjson.loads(line)
            spans.append(Span(**{key: record[key] for key in Span.__slots__ if key in record}))
        except (orjson.JSONDecodeError, TypeError) as err:
            what = (f"not JSON: {str(err).split(':')[0]}" if isinstance(err, orjson.JSONDecodeError)
                    else "not a span")
            raise ValueError(
                f"{source}, line {number}: {what} ({_excerpt(line)}). The file holds one span a line, as JSON, "
                f"written by the operator; delete that line (a line cut short when an operator was stopped "
                f"mid-write) or pass the right file with --file") from None
    return spans


def _excerpt(line: str | bytes, width: int = 60) -> str:
    text = line.decode(errors="replace") if isinstance(line, bytes) else line
    text = text.strip()
    return repr(text if len(text) <= width else text[:width] + "…")


def creation_trace(spans: Sequence[Span], kind: str, namespace: str, name: str) -> list[Span]:
    """The spans of the trace rooted at the watch event that created `kind` NAMESPACE/NAME (the latest, if it
    was created more than once); empty when the file has none."""
    roots = [s for s in spans if s.parent is None and s.name == f"receive {kind}"
             and s.attributes.get("k8s.event.type") == "ADDED"
             and s.attributes.get("k8s.namespace.name") == namespace and s.attributes.get("k8s.object.name") == name]
    if not roots:
        return []
    root = max(roots, key=lambda s: s.start)
    return [s for s in spans if s.trace == root.trace]


def waterfall(spans: Sequence[Span]) -> Iterator[str]:
    """Lines of an indented waterfall: offset from the root, duration, span, where it ran, status."""
    children: dict[str | None, list[Span]] = {}
    ids = {s.span for s in spans}
    for s in sorted(spans, key=lambda s: s.start):
        children.setdefault(s.parent if s.parent in ids else None, []).append(s)
    roots = children.get(None, [])
    if not roots:
        return
    origin = roots[0].start
    yield f"{'at ms':>9} {'took ms':>9}  span"

    def walk(span: Span, depth: int) -> Iterator[str]:
        where = span.attributes.get("messaging.destination.name") or span.attributes.get("url.full") or ""
        what = span.attributes.get("lessor.message.type")
        if what and span.name.endswith(f" {what}"):  # `process Offer` says it already
            what = None
        status = f"  ERROR {span.description}".rstrip() if span.error else ""
        detail = " ".join(str(part) for part in (what, f"@ {where}" if where else "") if part)
        yield (f"{(span.start - origin) / 1e6:9.1f} {(span.end - span.start) / 1e6:9.1f}  "
               f"{'  ' * depth}{span.name}{'  ' + detail if detail else ''}{status}")
        for event in span.events:  # condition changes: why, beside how long
            a = event.get("attributes") or {}
            if event.get("name") == "condition changed":
                yield (f"{'':9} {'':9}  {'  ' * depth}  · {a.get('lessor.condition.type')}="
                       f"{a.get('lessor.condition.status')} {a.get('lessor.condition.reason')}: "
                       f"{a.get('lessor.condition.message')}")
        for child in children.get(span.span, []):
            yield from walk(child, depth + 1)

    for root in roots:
        yield from walk(root, 0)


def zipkin_trace_url(port: int, trace_id: str) -> str:
    """Zipkin's page of one trace (`lessor dev --traces` runs Zipkin on 127.0.0.1:`port`)."""
    return f"http://127.0.0.1:{port}/zipkin/traces/{trace_id}"


def print_trace(kind: str, target: str, path: Path, out: IO[str], *, zipkin_port: int | None = None) -> int:
    """`lessor trace`: the waterfall of the trace, or with `zipkin_port` the link to it in Zipkin; a
    ValueError saying what to do when there is none."""
    spans = find_trace(kind, target, path)
    if zipkin_port is not None:
        out.write(zipkin_trace_url(zipkin_port, spans[0].trace) + "\n")
        return 0
    for line in waterfall(spans):
        out.write(line + "\n")
    return 0


def find_trace(kind: str, target: str, path: Path) -> list[Span]:
    """The spans of the trace of `kind` NAMESPACE/NAME's creation in the file at `path`."""
    namespace, _, name = target.partition("/")
    if not namespace or not name:
        raise ValueError(f"{target!r}: name the object as NAMESPACE/NAME")
    if not path.is_file():
        raise ValueError(f"no traces at {path}: run `lessor dev --traces` (or `lessor run` with "
                         f"OTEL_TRACES_EXPORTER=jsonl {TRACES_FILE_ENV}={path}), then create the {kind}")
    with path.open("rb") as lines:
        spans = creation_trace(read_spans(lines, str(path)), ROOTS[kind], namespace, name)
    if not spans:
        raise ValueError(f"{path} holds no trace of the creation of {kind} {target} (was it created while "
                         "tracing was on? spans are written in batches: wait a few seconds)")
    return spans
