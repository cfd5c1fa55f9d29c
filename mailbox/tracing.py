"""Message spans after OpenTelemetry's messaging conventions, skipped entirely when no SDK is installed."""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from collections.abc import Sequence
from types import TracebackType
from typing import Any

from opentelemetry import context as otel_context
from opentelemetry import trace
from opentelemetry.context import Context
from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

from .envelope import MAX_LINKS, Envelope

SYSTEM = "lessor"


class Cause:
    """Why something is done, as a trace sees it: an opaque token an actor keeps with a request, so that
    the answer sent much later, on another message's turn, still belongs to the request's trace."""

    __slots__ = ("context",)

    def __init__(self, context: Context) -> None:
        self.context = context

    @property
    def sampled(self) -> bool:
        """Whether its trace is recorded: one that is not (sampled out) is not worth keeping to continue."""
        return bool(trace.get_current_span(self.context).get_span_context().trace_flags.sampled)

    def detached(self) -> Cause:
        """The same cause holding only its span's ids, not the (ended) span and its attributes: cheap to keep
        many of for a long time."""
        return Cause(trace.set_span_in_context(trace.NonRecordingSpan(
            trace.get_current_span(self.context).get_span_context())))


class Tracing:
    """Opens the CONSUMER span of each handling (a child of the sender's span) and the PRODUCER span of an ask,
    each named after its operation and message type (`span_name`).

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

    def armed(self) -> Context | None:
        """The trace a timer armed now goes on in when it fires: the current one, if it is recorded. One that
        is not (sampled out, or deliberately unrecorded, as for work that changed nothing) is not continued:
        the timer's handling then starts a trace of its own, since what it does when it fires (an exporter
        found offline when its heartbeats stop) is news that the work arming it was not."""
        context = otel_context.get_current()
        return context if trace.get_current_span(context).get_span_context().trace_flags.sampled else None

    def told(self, envelope: Envelope, links: Sequence[Context] = (), parent: Context | None = None) -> None:
        """A tell has no span of its own: it only enqueues, so its span would measure nothing while costing
        as much as the handling's (half of all spans, and of tracing's cost, in a lease storm). The envelope
        carries the sender's context instead (or `parent`), and its handling is that span's child, linked to
        `links`. A timer passes the context that armed it as both parent and link."""
        envelope.context = parent if parent is not None else otel_context.get_current()
        envelope.id = next(self._ids)
        if links:
            envelope.links = deque(links, maxlen=MAX_LINKS)

    def send(self, address: str, message: Any) -> tuple[Span, Context, int]:
        """The PRODUCER span of an ask, which lasts until the reply; return it, the context carrying it,
        the message id."""
        message_id = next(self._ids)
        template = destination_template(address)
        span = self._tracer.start_span(
            f"send {message_type(message)}",
            kind=SpanKind.PRODUCER,
            attributes=_attributes(address, template, "send", message_id, message),
        )
        return span, trace.set_span_in_context(span), message_id

    def process(self, address: str, envelope: Envelope) -> _Consumer:
        """The CONSUMER span around one handling: child of the sender's, linked to the messages it superseded."""
        return self._consumer("process", address, envelope)

    def start(self, address: str, envelope: Envelope) -> _Consumer:
        """An actor's start-up (`started`) in the trace of the message that activated it: what it reads and
        writes to rebuild its state belongs to that message's story, not to a trace of its own."""
        return self._consumer("start", address, envelope)

    def _consumer(self, operation: str, address: str, envelope: Envelope) -> _Consumer:
        template = destination_template(address)
        return _Consumer(self._tracer.start_span(
            span_name(operation, address, envelope.message),
            context=envelope.context,
            kind=SpanKind.CONSUMER,
            attributes=_attributes(address, template, operation, envelope.id, envelope.message),
            links=_links(envelope.links) if envelope.links else None,
        ))


class _Consumer:
    """The span made current for the handling and ended after it. A class rather than `trace.use_span` in a
    generator: this runs for every message handled, and the two nested generators cost a fifth of tracing."""

    __slots__ = ("span", "token")

    def __init__(self, span: Span) -> None:
        self.span = span

    def __enter__(self) -> None:
        self.token = otel_context.attach(trace.set_span_in_context(self.span))

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None) -> None:
        try:
            if error is not None:
                if isinstance(error, asyncio.CancelledError):
                    self.span.set_status(Status(StatusCode.ERROR, "cancelled (killed or shut down)"))
                elif isinstance(error, Exception):
                    self.span.record_exception(error)
                    self.span.set_status(Status(StatusCode.ERROR, f"{type(error).__name__}: {error}"))
        finally:
            otel_context.detach(self.token)
            self.span.end()


def span_name(operation: str, address: str, message: Any) -> str:
    """`process Offer`, `send LeaseWorld`, `start lease`: the step, by message type (or, for a start-up, the
    actor's kind), so that a waterfall reads without opening each span. Low-cardinality either way, as the
    messaging conventions allow; the object is in `messaging.destination.name`."""
    if operation == "start":
        return f"start {address.partition('/')[0]}"
    return f"{operation} {message_type(message)}"


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


def _attributes(address: str, template: str, operation: str, message_id: int, message: Any) -> dict[str, str]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.name": operation,
        "messaging.operation.type": "send" if operation == "send" else "process",
        "messaging.destination.name": address,
        "messaging.destination.template": template,
        "messaging.message.id": str(message_id),
        "lessor.message.type": message_type(message),
    }


def _links(contexts: Sequence[Context]) -> list[Link]:
    return [Link(trace.get_current_span(c).get_span_context()) for c in contexts]
