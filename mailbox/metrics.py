"""Prometheus metrics, counted in plain Python on the hot path and rendered only when scraped.

The client library's instruments take a lock and walk label dicts on every
update, which would cost more than delivering a message; so the runtime keeps
its own counters and a collector turns them into metric families at scrape
time. Depth and liveness are read from the live actors at scrape time too.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)

# Handling time buckets, seconds: actors answer in microseconds when they only
# touch their state and in seconds when they wait on the API server.
BUCKETS = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0)

# Kind label for dead letters to addresses whose kind is not registered.
NO_KIND = ""


class Handling:
    """A time histogram and a failure count for one (kind, message type); the cell updates it inline."""

    __slots__ = ("failed", "seconds", "buckets")

    def __init__(self) -> None:
        self.failed = 0
        self.seconds = 0.0
        self.buckets = [0] * (len(BUCKETS) + 1)  # the last one is +Inf


class KindStats:
    """Counters for one actor kind."""

    __slots__ = ("handling", "waiting", "restarts", "escalations", "passivations", "dead_letters", "slow_asks")

    def __init__(self) -> None:
        self.handling: dict[type, Handling] = {}  # by message class
        self.waiting = Handling()  # time in the mailbox, from post to the start of handling
        self.restarts: Counter[str] = Counter()  # by reason: crash, kill, requested
        self.escalations = 0
        self.passivations = 0
        self.dead_letters: Counter[str] = Counter()  # by reason
        self.slow_asks = 0  # asks without a deadline to this kind still unanswered after DEFAULT_ASK_TIMEOUT


class MailboxCollector:
    """A registry collector: `kinds` maps kind -> stats; `occupancy` yields (kind, depth) per live actor."""

    def __init__(self, kinds: Mapping[str, KindStats], occupancy: Callable[[], Iterable[tuple[str, int]]]) -> None:
        self._kinds = kinds
        self._occupancy = occupancy

    def describe(self) -> Iterator[Metric]:
        """The families without samples, so a registry can reject clashing names without a scrape."""
        return _families({}, ())

    def collect(self) -> Iterator[Metric]:
        return _families(self._kinds, self._occupancy())


def _families(kinds: Mapping[str, KindStats], occupancy: Iterable[tuple[str, int]]) -> Iterator[Metric]:
    live = GaugeMetricFamily("lessor_actors", "Live (active, not passivated) actors.", labels=["kind"])
    depth = GaugeMetricFamily("lessor_mailbox_depth", "Messages waiting in mailboxes.", labels=["kind"])
    handled = CounterMetricFamily(
        "lessor_messages_handled", "Messages handled, by outcome.", labels=["kind", "message_type", "outcome"]
    )
    seconds = HistogramMetricFamily(
        "lessor_message_handling_seconds", "Time spent handling one message.", labels=["kind", "message_type"]
    )
    waited = HistogramMetricFamily(
        "lessor_mailbox_queue_duration_seconds", "How long a message waited in its mailbox before its actor "
        "began handling it (as controller-runtime's workqueue_queue_duration_seconds), by actor kind.",
        labels=["kind"],
    )
    restarts = CounterMetricFamily("lessor_actor_restarts", "Actor restarts.", labels=["kind", "reason"])
    escalations = CounterMetricFamily(
        "lessor_actor_escalations", "Actors stopped for good by supervision.", labels=["kind"]
    )
    passivations = CounterMetricFamily("lessor_actor_passivations", "Idle actors passivated.", labels=["kind"])
    dead = CounterMetricFamily("lessor_dead_letters", "Messages not delivered.", labels=["kind", "reason"])
    slow = CounterMetricFamily(
        "lessor_mailbox_slow_asks", "Asks without a deadline (to a kind registered with ask_timeout=inf) still "
        "unanswered after 5 s: the asked actor is busy; its askers wait rather than fail.", labels=["kind"])
    if kinds:
        counts: Counter[str] = Counter()
        depths: Counter[str] = Counter()
        for kind, waiting in occupancy:
            counts[kind] += 1
            depths[kind] += waiting
        for kind, stats in kinds.items():
            if kind != NO_KIND:
                live.add_metric([kind], counts[kind])
                depth.add_metric([kind], depths[kind])
                escalations.add_metric([kind], stats.escalations)
                passivations.add_metric([kind], stats.passivations)
                waited.add_metric([kind], _cumulative(stats.waiting), stats.waiting.seconds)
                slow.add_metric([kind], stats.slow_asks)
            for message_type, h in _by_name(stats.handling).items():
                handled.add_metric([kind, message_type, "ok"], sum(h.buckets) - h.failed)
                handled.add_metric([kind, message_type, "error"], h.failed)
                seconds.add_metric([kind, message_type], _cumulative(h), h.seconds)
            for reason, count in stats.restarts.items():
                restarts.add_metric([kind, reason], count)
            for reason, count in stats.dead_letters.items():
                dead.add_metric([kind, reason], count)
    yield from (live, depth, handled, seconds, waited, restarts, escalations, passivations, dead, slow)


def _cumulative(h: Handling) -> list[tuple[str, float]]:
    """A histogram's buckets as Prometheus wants them: cumulative counts by upper bound."""
    cumulative, points = 0, []
    for bound, count in zip((*map(str, BUCKETS), "+Inf"), h.buckets, strict=True):
        cumulative += count
        points.append((bound, float(cumulative)))
    return points


def _by_name(handling: Mapping[type, Handling]) -> dict[str, Handling]:
    """Key by public class name (`_Decide` is `Decide`), the label value; classes sharing a name are summed
    rather than emitted twice."""
    named: dict[str, Handling] = {}
    for cls, h in handling.items():
        name = cls.__name__.lstrip("_")
        total = named.get(name)
        if total is None:
            named[name] = h
            continue
        merged = Handling()
        merged.failed = total.failed + h.failed
        merged.seconds = total.seconds + h.seconds
        merged.buckets = [a + b for a, b in zip(total.buckets, h.buckets, strict=True)]
        named[name] = merged
    return named
