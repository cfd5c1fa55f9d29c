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


class Cause:
    """Why something is done, as a trace sees it: an opaque token an actor keeps with a request, so that
    the answer sent much later, on another message's turn, still belongs to the request's trace."""

    __slots__ = ("context",)

    def __init__(self, context: Context) -> None:
        self.context = context


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

    def cause(self) -> Cause | None:
        """The trace of what runs now, kept to carry on later on its behalf; None when tracing is off."""
        return Cause(otel_context.get_current()) if self.enabled else None

    def send(self, address: str, message: Any, links: Sequence[Context] = (),
             parent: Context | None = None) -> tuple[Span, Context, int]:
        """Start the PRODUCER span under `parent` (default: the current context); return it, the context
        carrying it, the message id. A timer passes the context that armed it as both parent and link."""
        message_id = next(self._ids)
        span = self._tracer.start_span(
            f"send {destination_template(address)}",
            context=parent,
            kind=SpanKind.PRODUCER,
            attributes=_attributes(address, "send", message_id, message),
            links=_links(links),
        )
        return span, trace.set_span_in_context(span, parent or otel_context.get_current()), message_id

    @contextmanager
    def process(self, address: str, envelope: Envelope) -> Iterator[None]:
        """The CONSUMER span around one handling: child of the send, linked to the sends it superseded."""
        with self._consumer(f"process {destination_template(address)}", address, envelope, "process"):
            yield

    @contextmanager
    def start(self, address: str, envelope: Envelope) -> Iterator[None]:
        """An actor's start-up (`started`) in the trace of the message that activated it: what it reads and
        writes to rebuild its state belongs to that message's story, not to a trace of its own."""
        with self._consumer(f"start {destination_template(address)}", address, envelope, "start"):
            yield

    @contextmanager
    def _consumer(self, name: str, address: str, envelope: Envelope, operation: str) -> Iterator[None]:
        span = self._tracer.start_span(
            name,
            context=envelope.context,
            kind=SpanKind.CONSUMER,
            attributes=_attributes(address, operation, envelope.id, envelope.message),
            links=_links(envelope.links or ()),
        )
        with trace.use_span(span, end_on_exit=True):
            try:
                yield
            except asyncio.CancelledError:
                span.set_status(Status(StatusCode.ERROR, "cancelled (killed or shut down)"))
                raise


def destination_template(address: str) -> str:
    """An address with its object's namespace and name as placeholders: `lease/lab/l1` is
    `lease/{namespace}/{name}` (OpenTelemetry's low-cardinality destination template)."""
    kind, _, rest = address.partition("/")
    if not rest:
        return kind
    return f"{kind}/{{namespace}}/{{name}}" if "/" in rest else f"{kind}/{{name}}"


def message_type(message: Any) -> str:
    """The message's type, as spans and metrics name it: a private `_Decide` is `Decide`."""
    return type(message).__name__.lstrip("_")


def _attributes(address: str, operation: str, message_id: int, message: Any) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": "send" if operation == "send" else "process",
        "messaging.destination.name": address,
        "messaging.destination.template": destination_template(address),
        "messaging.message.id": str(message_id),
        "lessor.message.type": message_type(message),
    }


def _links(contexts: Sequence[Context]) -> list[Link]:
    return [Link(trace.get_current_span(c).get_span_context()) for c in contexts]
