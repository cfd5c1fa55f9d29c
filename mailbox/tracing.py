"""Message spans after OpenTelemetry's messaging conventions, skipped entirely when no SDK is installed."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from .envelope import Envelope

SYSTEM = "lessor"


class Tracing:
    """Opens the PRODUCER span of a send and the CONSUMER span of its handling.

    With the API's default (no-op) provider, spans would be discarded anyway,
    and creating them costs more than delivering a message; so `enabled` is
    decided once, from the provider given or installed when the system is made.
    """

    def __init__(self, provider: trace.TracerProvider | None) -> None:
        provider = provider or trace.get_tracer_provider()
        self.enabled = not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
        self._tracer = provider.get_tracer("lessor.mailbox")
        self._ids = itertools.count(1)

    def send(self, address: str, message: Any, links: Sequence[Context] = ()) -> tuple[Span, Context, int]:
        """Start the PRODUCER span under the current context; return it, the context carrying it, the message id."""
        message_id = next(self._ids)
        span = self._tracer.start_span(
            f"send {type(message).__name__}",
            kind=SpanKind.PRODUCER,
            attributes=_attributes(address, "send", message_id),
            links=_links(links),
        )
        return span, trace.set_span_in_context(span, otel_context.get_current()), message_id

    @contextmanager
    def process(self, address: str, envelope: Envelope) -> Iterator[None]:
        """The CONSUMER span around one handling: child of the send, linked to the sends it superseded."""
        span = self._tracer.start_span(
            f"process {type(envelope.message).__name__}",
            context=envelope.context,
            kind=SpanKind.CONSUMER,
            attributes=_attributes(address, "process", envelope.id),
            links=_links(envelope.links or ()),
        )
        with trace.use_span(span, end_on_exit=True):
            try:
                yield
            except asyncio.CancelledError:
                span.set_status(Status(StatusCode.ERROR, "cancelled (killed or shut down)"))
                raise


def _attributes(address: str, operation: str, message_id: int) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": operation,
        "messaging.destination.name": address,
        "messaging.message.id": str(message_id),
    }


def _links(contexts: Sequence[Context]) -> list[Link]:
    return [Link(trace.get_current_span(c).get_span_context()) for c in contexts]
