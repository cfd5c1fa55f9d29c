"""Tracing: a conversation across actors is one trace, an actor's start-up and its timers included; a tell's
handling is a child of its sender's span; a coalesced message's span links the senders it replaced; an answer
sent later on behalf of a kept cause continues its trace; names and attributes follow OpenTelemetry's messaging
conventions."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry import trace
from opentelemetry.trace import NonRecordingSpan, SpanContext, SpanKind, StatusCode, TraceFlags

from lessor.mailbox import Actor, ActorSystem, Cause
from tests.slowness import scaled


@dataclass(frozen=True)
class Start:
    pass


@dataclass(frozen=True)
class Forward:
    pass


@dataclass(frozen=True)
class Question:
    pass


@dataclass(frozen=True)
class Snapshot:
    version: int


@dataclass(frozen=True)
class Arm:
    pass


@dataclass(frozen=True)
class WakeUp:
    pass


class Relay(Actor):
    """a tells b; b asks c and reports the answer."""

    def __init__(self, answers: list[str], done: asyncio.Event, entered: asyncio.Event, gate: asyncio.Event) -> None:
        self.answers, self.done, self.entered, self.gate = answers, done, entered, gate

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Start):
            self.tell("relay/b", Forward())
        elif isinstance(message, Forward):
            self.answers.append(await self.ask("relay/c", Question()))
            self.done.set()
        elif isinstance(message, Question):
            return "42"
        elif message == "hold":
            self.entered.set()
            await self.gate.wait()
        elif isinstance(message, Snapshot) and message.version == 3:
            self.done.set()
        elif isinstance(message, Arm):
            self.schedule("wake", WakeUp(), delay=0.001)
        elif isinstance(message, WakeUp):
            self.done.set()
        elif message == "fail":
            self.done.set()
            raise RuntimeError("boom")
        return None


class Harness:
    def __init__(self) -> None:
        self.exporter = InMemorySpanExporter()
        self.provider = TracerProvider()
        self.provider.add_span_processor(SimpleSpanProcessor(self.exporter))
        self.answers: list[str] = []
        self.done, self.entered, self.gate = asyncio.Event(), asyncio.Event(), asyncio.Event()

    def register(self, system: ActorSystem) -> None:
        system.register("relay", lambda _: Relay(self.answers, self.done, self.entered, self.gate))

    def span(self, name: str) -> ReadableSpan:
        """`send Forward`: the span of that operation on a message of that type; else a span by its name."""
        operation, _, message_type = name.partition(" ")
        (found,) = [s for s in self.exporter.get_finished_spans()
                    if (s.attributes or {}).get("messaging.operation.name") == operation
                    and (s.attributes or {}).get("lessor.message.type") == message_type] \
            or [s for s in self.exporter.get_finished_spans() if s.name == name]
        return found


def context_of(span: ReadableSpan) -> SpanContext:
    context: SpanContext | None = span.context
    assert context is not None
    return context


def parent_of(child: ReadableSpan, parent: ReadableSpan) -> bool:
    return child.parent is not None and child.parent.span_id == context_of(parent).span_id


async def test_tell_then_ask_across_three_actors_is_one_trace() -> None:
    h = Harness()
    tracer = h.provider.get_tracer("test")
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        with tracer.start_as_current_span("watch event"):
            system.tell("relay/a", Start())
        await h.done.wait()
    assert h.answers == ["42"]
    root = h.span("watch event")
    # A tell has no span of its own: its handling is a child of the sender's span. An ask's send span
    # lasts until the reply.
    chain = [
        root,
        h.span("process Start"),
        h.span("process Forward"),
        h.span("send Question"),
        h.span("process Question"),
    ]
    assert {context_of(s).trace_id for s in chain} == {context_of(root).trace_id}
    for parent, child in itertools.pairwise(chain):
        assert parent_of(child, parent), f"{child.name} should be a child of {parent.name}"
    assert [s.kind for s in chain[1:]] == [SpanKind.CONSUMER, SpanKind.CONSUMER, SpanKind.PRODUCER, SpanKind.CONSUMER]
    assert not [s for s in h.exporter.get_finished_spans() if s.kind == SpanKind.PRODUCER
                and (s.attributes or {}).get("lessor.message.type") in ("Start", "Forward")]
    send = dict(h.span("send Question").attributes or {})
    process = dict(h.span("process Question").attributes or {})
    # Named by the step (the message type), low-cardinality; the object is in the attributes.
    assert (h.span("send Question").name, h.span("process Question").name) == ("send Question",
                                                                             "process Question")
    assert send["messaging.operation.type"] == "send"
    assert process == {
        "messaging.system": "lessor",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "relay/c",
        "messaging.destination.template": "relay/{name}",
        "messaging.message.id": send["messaging.message.id"],
        "lessor.message.type": "Question",
    }


async def test_a_coalesced_message_is_processed_under_the_newest_sender_and_links_the_others() -> None:
    h = Harness()
    tracer = h.provider.get_tracer("test")
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.tell("relay/d", "hold")
        await h.entered.wait()
        for version in (1, 2, 3):
            with tracer.start_as_current_span(f"event {version}"):
                system.tell("relay/d", Snapshot(version), coalesce="snapshot")
        h.gate.set()
        await h.done.wait()
    senders = [h.span(f"event {version}") for version in (1, 2, 3)]
    process = h.span("process Snapshot")
    assert parent_of(process, senders[2])
    assert [link.context.span_id for link in process.links] == [context_of(s).span_id for s in senders[:2]]


async def test_a_timer_delivery_continues_the_trace_that_armed_it_and_links_it() -> None:
    h = Harness()
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.tell("relay/t", Arm())
        await h.done.wait()
    armed_by, delivered = h.span("process Arm"), h.span("process WakeUp")
    assert parent_of(delivered, armed_by)
    assert [link.context.span_id for link in delivered.links] == [context_of(armed_by).span_id]


async def test_a_timer_armed_in_an_unrecorded_trace_starts_a_trace_of_its_own_when_it_fires() -> None:
    """Work that changed nothing goes unrecorded (a parent that is not sampled); a timer it re-armed must not
    hide what happens when it fires (an exporter going offline)."""
    h = Harness()
    quiet = NonRecordingSpan(SpanContext(0x1234, 0x5678, is_remote=False, trace_flags=TraceFlags(0)))
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        with trace.use_span(quiet):
            system.tell("relay/t", Arm())
        await h.done.wait()
    names = [s.name for s in h.exporter.get_finished_spans()]
    assert names == ["process WakeUp"], names  # the arming: not recorded; the firing: recorded
    delivered = h.span("process WakeUp")
    assert delivered.parent is None and not delivered.links
    assert context_of(delivered).trace_id != 0x1234


class Greeter(Actor):
    """Its start-up tells another actor: that work belongs to the trace of the message that woke it."""

    async def started(self) -> None:
        self.tell("relay/s", Forward())

    async def receive(self, message: Any) -> Any:
        return None


async def test_an_actors_start_up_runs_in_the_trace_of_the_message_that_activated_it() -> None:
    h = Harness()
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.register("greeter", lambda _: Greeter())
        system.tell("greeter/g", Start())
        await h.done.wait()
    start, told = h.span("start Start"), h.span("process Forward")
    assert start.name == "start greeter"  # the actor's kind: what starts, whichever message woke it
    assert parent_of(told, start)  # what start-up told is handled in the start-up's trace
    assert context_of(h.span("process Question")).trace_id == context_of(start).trace_id
    assert all(s.attributes and s.attributes["messaging.destination.template"] in (
        "greeter/{name}", "relay/{name}") for s in h.exporter.get_finished_spans())


@dataclass(frozen=True)
class Request:
    pass


@dataclass(frozen=True)
class Free:
    pass


@dataclass(frozen=True)
class Answer:
    pass


class Keeper(Actor):
    """Keeps a request's cause and answers it on another message's turn, as an exporter answers a waiting lease
    when another releases it."""

    def __init__(self, done: asyncio.Event, causes: list[object]) -> None:
        self.done, self.causes = done, causes
        self.waiting: Cause | None = None

    async def receive(self, message: Any) -> Any:
        if isinstance(message, Request):
            self.waiting = self.cause()
            self.causes.append(self.waiting)
        elif isinstance(message, Free):
            self.tell("keeper/asker", Answer(), on_behalf_of=self.waiting)
        elif isinstance(message, Answer):
            self.done.set()
        return None


async def test_an_answer_sent_on_behalf_of_a_kept_cause_continues_its_trace_and_links_the_turn_it_ran_on() -> None:
    h = Harness()
    causes: list[object] = []
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        system.register("keeper", lambda _: Keeper(h.done, causes))
        system.tell("keeper/k", Request())
        await asyncio.sleep(0.01)
        system.tell("keeper/k", Free())
        await h.done.wait()
    request, free, answer = h.span("process Request"), h.span("process Free"), h.span("process Answer")
    assert context_of(request).trace_id != context_of(free).trace_id  # two stories
    assert parent_of(answer, request)  # the answer goes on in the request's
    assert [link.context.span_id for link in answer.links] == [context_of(free).span_id]  # and says what freed it


async def test_without_tracing_there_is_no_cause_to_keep() -> None:
    causes: list[object] = []
    done = asyncio.Event()
    async with ActorSystem(registry=None) as system:
        system.register("keeper", lambda _: Keeper(done, causes))
        system.tell("keeper/k", Request())
        system.tell("keeper/k", Free())
        await asyncio.wait_for(done.wait(), scaled(5))
    assert causes == [None]


async def test_a_failed_or_killed_handling_shows_as_an_error_on_its_span() -> None:
    h = Harness()
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.tell("relay/f", "fail")
        await h.done.wait()
        system.tell("relay/k", "hold")
        await h.entered.wait()
        system.kill("relay/k")
        await asyncio.sleep(0.01)
    failed, killed = [[s for s in h.exporter.get_finished_spans() if s.name == "process str"
                       and (s.attributes or {})["messaging.destination.name"] == address] for address in ("relay/f",
                                                                                                       "relay/k")]
    assert [(s.status.status_code, s.status.description) for s in failed] == [(StatusCode.ERROR, "RuntimeError: boom")]
    assert [e.name for e in failed[0].events] == ["exception"]
    assert [(s.status.status_code, s.status.description) for s in killed] == [
        (StatusCode.ERROR, "cancelled (killed or shut down)")]
