"""The event recorder: `events.k8s.io/v1` Events written in the background, repeats aggregated,
writes rate-limited per object (the `Recorder` of `lessor.actors.events`).

The semantics are client-go's (tools/events and tools/record), reimplemented:

- **Aggregation.** Events are identical when they regard the same object (by
  uid) with the same type, reason, action and reporting controller; the note
  is not part of it (the API server keeps an Event's note immutable, and the
  object's condition shows the current message). An identical event within
  `window` of the last one becomes `series.count` + `series.lastObservedTime`
  of the Event already written, by a merge patch, instead of a new Event.
  Repeats recorded while a write for the same Event is queued or in flight
  share that write: a storm of N repeats costs one create and a few patches.
- **Rate limit.** Each regarded object has a token bucket (`burst` writes,
  refilled at `rate` per second; client-go's defaults are 25 and 1/300 s).
  A new Event without a token is dropped; a series update without one waits
  for the next token (its count keeps growing meanwhile, nothing is lost).
- **A storm budget per namespace** (the `Namespace` limit of Kubernetes'
  EventRateLimit admission plugin, applied before the write instead of
  refused after it): new Normal Events of one namespace share a token bucket
  (`namespace_burst`, refilled at `namespace_rate` per second). A Normal
  event without a namespace token is not written as an Event of its own: it
  is counted into one summary Event per namespace, kind, reason and action
  over the window, which regards the first object it summarises and whose
  `series.count` is how many it summarises; its count is written at most
  every `summary_every` seconds. Warnings never take a namespace token and are
  never summarised. In a quiet namespace the bucket never runs dry and
  nothing changes; the object's conditions say what each Event said.
- **Never in the way.** `record` does no I/O and never raises: it queues the
  Event's key on a bounded queue that `run` drains with a few writers (so
  that in a storm Events take a small share of the API server and catch up
  afterwards); when the queue is full the event is dropped. Drops, failures, aggregated repeats and
  summarised events are counted in `/metrics` (`lessor_events_*`); failures are logged at debug level.
"""

from __future__ import annotations

import asyncio
import functools
import itertools
import logging
import re
import socket
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Protocol

from opentelemetry import trace
from opentelemetry.trace import INVALID_SPAN_CONTEXT, SpanContext
from prometheus_client import CollectorRegistry, Counter, Gauge

from lessor.actors.api import Kind
from lessor.actors.events import NORMAL
from lessor.gateway import ApiError, Gateway, admitted
from lessor.gateway.resources import EVENT
from lessor.model.views import Meta

log = logging.getLogger(__name__)

REPORTING_CONTROLLER = "lessor.dev/operator"
_MAX_NAME = 253
_MAX_NOTE = 1024  # the API server refuses longer notes
_MAX_FIELD = 128  # reason, action, reportingInstance
_TRIM_SCAN = 64
_NAME_TAIL = re.compile(r"[^a-z0-9]+$")

ObjectKey = tuple[str, str, str, str]  # kind, namespace, name, uid
EventKey = tuple[ObjectKey, str, str, str]  # regarding, type, reason, action
"""A summary's key has the ObjectKey (kind, namespace, "", ""): no object has an empty name."""


class EventSink(Protocol):
    """Where Events go: the API server (`GatewaySink`), or a list in a unit test."""

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]: ...

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]: ...


class GatewaySink:
    """Writes through the gateway; `fence` (the leadership's) refuses a write when not leading, asked
    before the request and again when it is sent, as the actors' writes are: an Event of a deposed
    leader changes nothing that is leased, but it would tell `kubectl describe` readers something (a
    lease Ready, an eviction) that the new leader may have undone."""

    def __init__(self, gateway: Gateway, *, fence: Callable[[str], None] = lambda _: None) -> None:
        self.gateway = gateway
        self.fence = fence

    async def create(self, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
        what = f"create Event in {namespace}"
        await admitted(fence := functools.partial(self.fence, what))
        return await self.gateway.create(EVENT, namespace, body, fence=fence)

    async def patch(self, namespace: str, name: str, patch: dict[str, Any]) -> dict[str, Any]:
        what = f"patch Event {namespace}/{name}"
        await admitted(fence := functools.partial(self.fence, what))
        return await self.gateway.merge_patch(EVENT, namespace, name, patch, fence=fence)


def micro_time(moment: datetime) -> str:
    """metav1.MicroTime: RFC 3339 with microseconds, which `eventTime` and series times require."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class _Bucket:
    tokens: float
    updated: float

    def ready(self, now: float, burst: int, rate: float) -> bool:
        """Whether a token is there (refilled up to `now`), without taking it."""
        self.tokens = min(float(burst), self.tokens + (now - self.updated) * rate)
        self.updated = now
        return self.tokens >= 1

    def take(self, now: float, burst: int, rate: float) -> bool:
        if not self.ready(now, burst, rate):
            return False
        self.tokens -= 1
        return True


@dataclass
class _Series:
    """One Event as written (or about to be), and the repeats it has seen."""

    namespace: str
    body: dict[str, Any]
    observed: float  # monotonic time of the last occurrence
    last_observed: datetime
    count: int = 1
    name: str | None = None  # once created
    written: int = 0  # the count the API server has
    queued: bool = False
    cause: SpanContext = INVALID_SPAN_CONTEXT  # the span of the last occurrence: its write goes on in its trace


class EventRecorder:
    """Implements `lessor.actors.events.Recorder`; `run()` must be running for anything to be written."""

    def __init__(self, sink: EventSink, *, instance: str | None = None, registry: CollectorRegistry | None = None,
                 window: float = 360.0, burst: int = 25, rate: float = 1 / 300, namespace_burst: int = 20,
                 namespace_rate: float = 0.5, summary_every: float = 10.0, queue_size: int = 10_000,
                 max_series: int = 10_000, workers: int = 2, retry_every: float = 1.0) -> None:
        self.sink = sink
        self.instance = (instance or socket.gethostname())[:_MAX_FIELD]
        self.window, self.burst, self.rate = window, burst, rate
        self.namespace_burst, self.namespace_rate, self.summary_every = namespace_burst, namespace_rate, summary_every
        self.max_series, self.workers, self.retry_every = max_series, workers, retry_every
        self.queue: asyncio.Queue[EventKey] = asyncio.Queue(maxsize=queue_size)
        self.series: OrderedDict[EventKey, _Series] = OrderedDict()  # oldest occurrence first
        self.buckets: OrderedDict[ObjectKey, _Bucket] = OrderedDict()  # least recently used first
        self.namespaces: OrderedDict[str, _Bucket] = OrderedDict()  # the storm budgets, least recently used first
        self.waiting: set[EventKey] = set()  # series updates that wait for a token (or for room in the queue)
        self._serial = itertools.count()
        self._recorded = Counter("lessor_events_recorded", "Events recorded by actors, by type",
                                 ["type"], registry=registry)
        self._recorded_by: dict[str, Any] = {}
        self._aggregated = Counter("lessor_events_aggregated", "Repeats folded into an existing Event's series",
                                   registry=registry)
        self._summarised = Counter("lessor_events_summarised",
                                   "Normal events over their namespace's budget, counted into the namespace's "
                                   "summary Event of their reason instead of written, by reason",
                                   ["reason"], registry=registry)
        self._dropped = Counter("lessor_events_dropped", "Events not written, by why: queue_full or rate_limited",
                                ["reason"], registry=registry)
        Gauge("lessor_events_queued", "Event writes waiting for a writer", registry=registry) \
            .set_function(self.queue.qsize)
        self._failed = Counter("lessor_events_failed", "Event writes the API server refused or did not answer",
                               ["verb"], registry=registry)

    # --- recording: no I/O, never raises ------------------------------------------------

    def record(self, kind: Kind, obj: Mapping[str, Any] | None, type: str, reason: str, note: str,
               action: str) -> None:
        try:
            self._record(kind, obj, type, reason, note, action)
        except Exception:
            log.debug("recording an event failed", exc_info=True)

    def _record(self, kind: Kind, obj: Mapping[str, Any] | None, type: str, reason: str, note: str,
                action: str) -> None:
        meta = Meta.of(obj)
        name, namespace = meta.name, meta.namespace
        if not name or not namespace:
            log.debug("no event for %s without a name and namespace: %s %s", kind.kind, reason, note)
            return
        recorded = self._recorded_by.get(type)
        if recorded is None:  # `labels` takes a lock and builds its key each call: once per type
            recorded = self._recorded_by[type] = self._recorded.labels(type)
        recorded.inc()
        regarding: ObjectKey = (kind.kind, namespace, name, meta.uid)
        reason, action = reason[:_MAX_FIELD], action[:_MAX_FIELD]
        key: EventKey = (regarding, type, reason, action)
        now = time.monotonic()
        series = self.series.get(key)
        if series is not None and now - series.observed <= self.window:
            self._aggregated.inc()
            self._repeat(key, series, now)
            return
        budget = self._namespace(namespace, now) if type == NORMAL else None
        if budget is not None and not budget.ready(now, self.namespace_burst, self.namespace_rate):
            self._summarise(kind, meta, reason, note, action, now)
            return
        if not self._bucket(regarding, now):
            self._dropped.labels("rate_limited").inc()
            return
        if budget is not None:
            budget.take(now, self.namespace_burst, self.namespace_rate)
        self._start(key, kind, meta, type, reason, note, action, now)

    def _summarise(self, kind: Kind, meta: Meta, reason: str, note: str, action: str, now: float) -> None:
        """Count a Normal event over its namespace's budget into the namespace's summary of its reason."""
        self._summarised.labels(reason).inc()
        key: EventKey = ((kind.kind, meta.namespace, "", ""), NORMAL, reason, action)
        series = self.series.get(key)
        if series is not None and now - series.observed <= self.window:
            self._repeat(key, series, now)
            return
        # The note is immutable in the API: it cannot carry the count, `series.count` does.
        note = (f"{kind.kind}s {reason} past this namespace's Event budget are counted in this Event's "
                f"series.count, {meta.name} the first: {note}")
        self._start(key, kind, meta, NORMAL, reason, note, action, now)

    def _repeat(self, key: EventKey, series: _Series, now: float) -> None:
        """One more occurrence of a series: counted, and written with the next write of its Event."""
        series.count += 1
        series.observed, series.last_observed = now, datetime.now(UTC)
        series.cause = trace.get_current_span().get_span_context()
        self.series.move_to_end(key)
        if not series.queued and key not in self.waiting:
            self._schedule(key, series, now)

    def _start(self, key: EventKey, kind: Kind, meta: Meta, type: str, reason: str, note: str, action: str,
               now: float) -> None:
        """A new Event: queued for its create."""
        wall = datetime.now(UTC)
        body = self._event(kind, meta, type, reason, note, action, wall)
        self.series[key] = series = _Series(meta.namespace, body, now, wall,
                                            cause=trace.get_current_span().get_span_context())
        self.series.move_to_end(key)
        self._enqueue(key, series)
        self._trim()

    def _schedule(self, key: EventKey, series: _Series, now: float) -> None:
        """A series update: written when its bucket has a token, else retried by `run`."""
        if self._bucket(key[0], now):
            self.waiting.discard(key)
            self._enqueue(key, series)
        else:
            self.waiting.add(key)

    def _enqueue(self, key: EventKey, series: _Series) -> None:
        try:
            self.queue.put_nowait(key)
            series.queued = True
        except asyncio.QueueFull:
            self._dropped.labels("queue_full").inc()
            if series.name is None:
                self.series.pop(key, None)  # never written: forget it, so a repeat may try again
            else:
                self.waiting.add(key)  # its count is kept; retried like a rate-limited update

    def _bucket(self, regarding: ObjectKey, now: float) -> bool:
        """A token of the object's bucket; a summary's (no name) allows one write per `summary_every`."""
        burst, rate = (self.burst, self.rate) if regarding[2] else (1, 1 / self.summary_every)
        bucket = self.buckets.get(regarding)
        if bucket is None:
            bucket = self.buckets[regarding] = _Bucket(float(burst), now)
        else:
            self.buckets.move_to_end(regarding)
        return bucket.take(now, burst, rate)

    def _namespace(self, namespace: str, now: float) -> _Bucket:
        bucket = self.namespaces.get(namespace)
        if bucket is None:
            bucket = self.namespaces[namespace] = _Bucket(float(self.namespace_burst), now)
            while len(self.namespaces) > self.max_series:  # a forgotten budget starts full: errs on writing
                self.namespaces.popitem(last=False)
        else:
            self.namespaces.move_to_end(namespace)
        return bucket

    def _trim(self) -> None:
        """Forget the oldest series and buckets beyond `max_series`. Looks at a few of the oldest series per
        call, so a cache of queued series (which stay until written) never makes `record` slow. A forgotten
        bucket starts full again: the limit errs on the side of writing."""
        if len(self.series) > self.max_series:
            doomed = [key for key, series in itertools.islice(self.series.items(), _TRIM_SCAN) if not series.queued]
            for key in doomed[: len(self.series) - self.max_series]:
                del self.series[key]
                self.waiting.discard(key)
        while len(self.buckets) > self.max_series:  # least recently used first, as client-go's LRU cache
            self.buckets.popitem(last=False)

    def _event(self, kind: Kind, meta: Meta, type: str, reason: str, note: str, action: str,
               wall: datetime) -> dict[str, Any]:
        name, namespace = meta.name, meta.namespace
        regarding = {"apiVersion": kind.api_version, "kind": kind.kind, "namespace": namespace, "name": name}
        for key, value in (("uid", meta.uid), ("resourceVersion", meta.resource_version)):
            if value:
                regarding[key] = value
        if len(note.encode()) > _MAX_NOTE:  # the limit is in bytes
            note = note.encode()[: _MAX_NOTE - 3].decode(errors="ignore") + "…"
        suffix = f".{time.time_ns() + next(self._serial):x}"
        base = _NAME_TAIL.sub("", name[: _MAX_NAME - len(suffix)]) or "event"
        return {
            "apiVersion": "events.k8s.io/v1", "kind": "Event",
            "metadata": {"name": base + suffix, "namespace": namespace},
            "eventTime": micro_time(wall),
            "reportingController": REPORTING_CONTROLLER,
            "reportingInstance": self.instance,
            "action": action[:_MAX_FIELD], "reason": reason[:_MAX_FIELD], "type": type, "note": note,
            "regarding": regarding,
        }

    # --- writing ------------------------------------------------------------------------

    async def run(self) -> None:
        """Write what is queued, until cancelled; retry rate-limited series updates every `retry_every`."""
        async with asyncio.TaskGroup() as tasks:
            for i in range(self.workers):
                tasks.create_task(self._worker(), name=f"events writer {i}")
            tasks.create_task(self._retry_waiting(), name="events retry")

    async def _worker(self) -> None:
        while True:
            key = await self.queue.get()
            try:
                series = self.series.get(key)
                if series is not None:
                    series.queued = False
                    # In the trace of what recorded it (a lease's Ready), not a trace of its own each.
                    with trace.use_span(trace.NonRecordingSpan(series.cause)):
                        await self._write(key, series)
            except Exception:
                log.debug("writing an event failed", exc_info=True)
            finally:
                self.queue.task_done()

    async def _retry_waiting(self) -> None:
        while True:
            await asyncio.sleep(self.retry_every)
            now = time.monotonic()
            for key in list(self.waiting):
                series = self.series.get(key)
                if series is None:
                    self.waiting.discard(key)
                elif not series.queued:
                    self._schedule(key, series, now)

    async def _write(self, key: EventKey, series: _Series) -> None:
        count = series.count
        if series.name is None:
            body = dict(series.body)
            if count > 1:
                body["series"] = {"count": count, "lastObservedTime": micro_time(series.last_observed)}
            try:
                created = await self.sink.create(series.namespace, body)
            except Exception as error:  # refused, unreachable, timed out: never retried blindly
                self._failed.labels("create").inc()
                log.debug("creating event %s failed: %s", Meta.of(body).name, error)
                self.series.pop(key, None)
                return
            series.name = Meta.of(created).name or Meta.of(body).name
            series.written = count
            return
        if count <= series.written:
            return
        patch = {"series": {"count": count, "lastObservedTime": micro_time(series.last_observed)}}
        try:
            await self.sink.patch(series.namespace, series.name, patch)
        except Exception as error:  # refused, unreachable, timed out: never retried blindly
            self._failed.labels("patch").inc()
            log.debug("updating event %s failed: %s", series.name, error)
            if isinstance(error, ApiError) and error.not_found:
                self.series.pop(key, None)  # expired (event TTL) or deleted: the next repeat starts anew
            return
        series.written = count

    async def drain(self) -> None:
        """Wait until everything queued so far is written (tests, benchmarks, shutdown)."""
        await self.queue.join()
