"""Tracing: a conversation across actors is one trace, an actor's start-up and its timers included; a coalesced
message's span links the sends it replaced; names and attributes follow OpenTelemetry's messaging conventions."""

from __future__ import annotations

import asyncio
import itertools
from dataclasses import dataclass
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanContext, SpanKind

from lessor.mailbox import Actor, ActorSystem, Cause


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
    chain = [
        root,
        h.span("send Start"),
        h.span("process Start"),
        h.span("send Forward"),
        h.span("process Forward"),
        h.span("send Question"),
        h.span("process Question"),
    ]
    assert {context_of(s).trace_id for s in chain} == {context_of(root).trace_id}
    for parent, child in itertools.pairwise(chain):
        assert parent_of(child, parent), f"{child.name} should be a child of {parent.name}"
    assert [s.kind for s in chain[1:]] == [SpanKind.PRODUCER, SpanKind.CONSUMER] * 3
    send = dict(h.span("send Forward").attributes or {})
    process = dict(h.span("process Forward").attributes or {})
    assert (h.span("send Forward").name, h.span("process Forward").name) == ("send relay/{name}", "process relay/{name}")
    assert send["messaging.operation.type"] == "send"
    assert process == {
        "messaging.system": "lessor",
        "messaging.operation.name": "process",
        "messaging.operation.type": "process",
        "messaging.destination.name": "relay/b",
        "messaging.destination.template": "relay/{name}",
        "messaging.message.id": send["messaging.message.id"],
        "lessor.message.type": "Forward",
    }


async def test_a_coalesced_message_is_processed_under_the_newest_send_and_links_the_others() -> None:
    h = Harness()
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.tell("relay/d", "hold")
        await h.entered.wait()
        for version in (1, 2, 3):
            system.tell("relay/d", Snapshot(version), coalesce="snapshot")
        h.gate.set()
        await h.done.wait()
    sends = [s for s in h.exporter.get_finished_spans() if (s.attributes or {}).get("lessor.message.type") == "Snapshot"
             and s.kind == SpanKind.PRODUCER]
    process = h.span("process Snapshot")
    assert len(sends) == 3
    assert parent_of(process, sends[2])
    assert [link.context.span_id for link in process.links] == [context_of(s).span_id for s in sends[:2]]


async def test_a_timer_delivery_continues_the_trace_that_armed_it_and_links_it() -> None:
    h = Harness()
    async with ActorSystem(registry=None, tracer_provider=h.provider) as system:
        h.register(system)
        system.tell("relay/t", Arm())
        await h.done.wait()
    armed_by, fired, delivered = h.span("process Arm"), h.span("send WakeUp"), h.span("process WakeUp")
    assert parent_of(fired, armed_by)
    assert [link.context.span_id for link in fired.links] == [context_of(armed_by).span_id]
    assert parent_of(delivered, fired)


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
    sent, start, told = h.span("send Start"), h.span("start Start"), h.span("send Forward")
    assert start.name == "start greeter/{name}"
    assert parent_of(start, sent) and parent_of(told, start)
    assert context_of(h.span("process Question")).trace_id == context_of(sent).trace_id
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
    request, free, answer = h.span("process Request"), h.span("process Free"), h.span("send Answer")
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
        await asyncio.wait_for(done.wait(), 5)
    assert causes == [None]
