"""OpenTelemetry SDK set-up from the standard OTEL_* environment variables.

The runtime (`lessor.mailbox`) only uses the OpenTelemetry API; this is the
one place the app chooses an SDK and exporters. Call `configure_telemetry()`
once at start-up, before making the ActorSystem, and `shutdown()` the
provider it returns on exit so that buffered spans are flushed.
"""

from __future__ import annotations

import os
import random
import sys
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.resources import SERVICE_NAME, Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    ConsoleSpanExporter,
    SimpleSpanProcessor,
    SpanExporter,
)

from lessor.telemetry.tracefile import DEFAULT_TRACES_FILE, TRACES_FILE_ENV, JsonLinesExporter

DEFAULT_SERVICE_NAME = "lessor"
QUEUE_SIZE = 16_384
EXPORTERS = ("otlp", "zipkin", "console", "jsonl", "none")


def tracer_provider_from_env() -> TracerProvider | None:
    """The tracer provider the environment asks for, or None when tracing is off.

    `OTEL_TRACES_EXPORTER` is a comma-separated list of `otlp` (OTLP over
    HTTP/protobuf; endpoint, headers, timeout, TLS and compression come from
    the `OTEL_EXPORTER_OTLP_*` variables, default http://localhost:4318),
    `zipkin` (Zipkin's JSON to `OTEL_EXPORTER_ZIPKIN_ENDPOINT`, default
    http://localhost:9411/api/v2/spans: the viewer `lessor dev --traces` runs),
    `console`, `jsonl` (lessor's: JSON lines appended to `LESSOR_TRACES_FILE`, which `lessor trace`
    reads) and `none`. Unset means `none`: an operator that nobody traces
    pays nothing for spans. `OTEL_SDK_DISABLED=true` also turns tracing off.
    `OTEL_SERVICE_NAME` defaults to `lessor`; `OTEL_RESOURCE_ATTRIBUTES`,
    `OTEL_TRACES_SAMPLER` and the span limits are read by the SDK itself.
    """
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    names = [name.strip().lower() for name in os.environ.get("OTEL_TRACES_EXPORTER", "none").split(",")]
    unknown = sorted(set(names) - set(EXPORTERS) - {""})
    if unknown:
        raise ValueError(f"OTEL_TRACES_EXPORTER: unsupported {', '.join(unknown)} (supported: {', '.join(EXPORTERS)})")
    names = [name for name in names if name not in ("", "none")]
    if not names:
        return None
    service = os.environ.get("OTEL_SERVICE_NAME") or DEFAULT_SERVICE_NAME
    provider = TracerProvider(resource=Resource.create({SERVICE_NAME: service}))
    for name in dict.fromkeys(names):
        if name == "otlp":
            provider.add_span_processor(_batch(_otlp_exporter()))
        elif name == "zipkin":
            provider.add_span_processor(_batch(_zipkin_exporter()))
        elif name == "jsonl":
            path = Path(os.environ.get(TRACES_FILE_ENV) or DEFAULT_TRACES_FILE)
            provider.add_span_processor(_batch(JsonLinesExporter(path)))
        else:
            # stdout as it is now: the exporter's default is bound when its module is imported.
            provider.add_span_processor(SimpleSpanProcessor(ConsoleSpanExporter(service_name=service, out=sys.stdout)))
    return provider


def _batch(exporter: SpanExporter) -> BatchSpanProcessor:
    """Batches exported each second, or as soon as a batch is full. The SDK's queue of 2,048 spans drops
    spans when a storm outruns the export (one lease is about 150 spans), and a trace with holes misleads:
    16,384. `OTEL_BSP_SCHEDULE_DELAY` and `OTEL_BSP_MAX_QUEUE_SIZE` still decide when set."""
    delay = None if os.environ.get("OTEL_BSP_SCHEDULE_DELAY") else 1000
    size = None if os.environ.get("OTEL_BSP_MAX_QUEUE_SIZE") else QUEUE_SIZE
    return BatchSpanProcessor(exporter, schedule_delay_millis=delay, max_queue_size=size)


def configure_telemetry() -> TracerProvider | None:
    """Install the provider from the environment as the global one; return it (None when tracing is off)."""
    provider = tracer_provider_from_env()
    if provider is not None:
        trace.set_tracer_provider(provider)
    return provider


def unrecorded() -> trace.Span:
    """A parent span that records nothing, for work no one should have to scroll past (a leader-Lease renewal
    every 2 s, an exporter heartbeat that changes nothing): `with trace.use_span(unrecorded()):` and, under the
    default parent-based sampler, no span begun inside is recorded, down to the actor messages and API
    requests it causes, at no cost beyond a non-recording span each. Its ids are random, so a sampler that
    ignores the parent still sees separate traces."""
    return trace.NonRecordingSpan(trace.SpanContext(
        random.getrandbits(128) | 1, random.getrandbits(64) | 1, is_remote=False,
        trace_flags=trace.TraceFlags(trace.TraceFlags.DEFAULT)))


def _otlp_exporter() -> SpanExporter:
    protocol = os.environ.get(
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", os.environ.get("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    )
    if protocol.strip().lower() != "http/protobuf":
        raise ValueError(f"OTLP protocol {protocol!r} is not supported: lessor exports OTLP over http/protobuf")
    # Imported here: the exporter pulls in requests and protobuf, which an
    # operator that does not export traces need not load.
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    return OTLPSpanExporter()


def _zipkin_exporter() -> SpanExporter:
    from opentelemetry.exporter.zipkin.json import ZipkinExporter  # as above: loaded only when used

    return ZipkinExporter()
