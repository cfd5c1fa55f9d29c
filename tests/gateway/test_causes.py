"""Which of lessor's own writes a watch event reports (lessor/gateway/causes.py): the trace of a write goes on
at its event, whether the event comes after the answer or before it, and nothing is kept without bound."""

from __future__ import annotations

from opentelemetry.trace import SpanContext

from lessor.gateway.causes import WriteCauses, key_of


def span(n: int) -> SpanContext:
    return SpanContext(trace_id=n, span_id=n, is_remote=False)


def obj(name: str, version: str, namespace: str = "ns", generate: str | None = None) -> dict[str, object]:
    metadata = {"name": name, "namespace": namespace, "resourceVersion": version}
    if generate:
        metadata["generateName"] = generate
    return {"metadata": metadata}


def test_an_event_after_the_answer_is_caused_by_the_write_once() -> None:
    causes = WriteCauses()
    key, write = key_of("Lease", "ns", None, "l1"), span(1)
    causes.writing(key, write)
    causes.wrote(key, obj("l1", "7"), write)
    assert causes.cause_of("Lease", obj("l1", "6")) is None  # an older version: somebody else's
    assert causes.cause_of("Lease", obj("l1", "7")) == span(1)
    assert causes.cause_of("Lease", obj("l1", "7")) is None and len(causes) == 0
    assert causes.cause_of("Exporter", obj("l1", "7")) is None


def test_an_event_before_the_answer_is_caused_by_the_write_in_flight_even_a_generated_name() -> None:
    causes = WriteCauses()
    key = key_of("ResourceHandle", "ops", {"metadata": {"generateName": "guid-"}})
    write = span(2)
    causes.writing(key, write)
    assert causes.cause_of("ResourceHandle", obj("guid-x1", "9", "ops", generate="guid-")) == span(2)
    assert causes.cause_of("ResourceHandle", obj("guid-x1", "9", "other", generate="guid-")) is None
    causes.wrote(key, None, write)  # failed: nothing is left
    assert len(causes) == 0


def test_writes_whose_event_never_comes_are_forgotten_oldest_first() -> None:
    causes = WriteCauses(capacity=3)
    for n in range(5):
        key = key_of("Exporter", "ns", None, f"e{n}")
        causes.wrote(key, obj(f"e{n}", "1"), span(n + 1))
    assert len(causes) == 3
    assert causes.cause_of("Exporter", obj("e0", "1")) is None
    assert causes.cause_of("Exporter", obj("e4", "1")) == span(5)
