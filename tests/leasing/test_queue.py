"""The waiting queue of an exporter (rule 8): highest priority, then oldest, then name."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from hypothesis import given
from hypothesis import strategies as st

from lessor.actors.queue import WaitQueue, Waiter

T0 = datetime(2030, 1, 1, tzinfo=timezone.utc)


def waiter(name: str, priority: int = 0, age: int = 0, spot: bool = False) -> Waiter:
    """`age` in seconds after T0: smaller is older."""
    return Waiter(name, priority, T0 + timedelta(seconds=age), spot)


def serve_all(queue: WaitQueue) -> list[Waiter]:
    """Hand the exporter out until nobody waits, as the exporter actor does: offer to `best()`,
    and the accepted waiter is `remove`d."""
    served = []
    while (best := queue.best()) is not None:
        assert queue.remove(best.name) == best
        served.append(best)
    return served


def test_rule_8_highest_priority_then_oldest_then_name() -> None:
    queue = WaitQueue([
        waiter("young-high", 10, age=50),
        waiter("old-low", 1, age=0),
        waiter("old-high", 10, age=10),
        waiter("b-same", 5, age=20),
        waiter("a-same", 5, age=20),
    ])
    assert [w.name for w in queue] == ["old-high", "young-high", "a-same", "b-same", "old-low"]
    assert queue.peek() == waiter("old-high", 10, age=10)
    assert [w.name for w in serve_all(queue)] == ["old-high", "young-high", "a-same", "b-same", "old-low"]
    assert queue.best() is None and queue.peek() is None and not queue


def test_spot_is_carried_but_not_part_of_the_order() -> None:
    queue = WaitQueue([waiter("spot", 5, age=0, spot=True), waiter("regular", 5, age=1)])
    assert queue.peek() is not None and queue.peek().name == "spot" and queue.peek().spot  # type: ignore[union-attr]


def test_adding_a_name_again_replaces_it() -> None:
    queue = WaitQueue([waiter("a", 1), waiter("b", 2)])
    queue.add(waiter("a", 3))
    assert len(queue) == 2
    assert [w.name for w in queue] == ["a", "b"]
    assert list(queue) == [waiter("a", 3), waiter("b", 2)]


def test_remove() -> None:
    queue = WaitQueue([waiter("a", 1), waiter("b", 2), waiter("c", 3)])
    assert queue.remove("b") == waiter("b", 2)
    assert queue.remove("b") is None
    assert "b" not in queue and "a" in queue
    assert [w.name for w in queue] == ["c", "a"]


def test_best_with_a_filter() -> None:
    queue = WaitQueue([waiter("a", 9), waiter("b", 5), waiter("c", 1)])
    assert queue.best() == waiter("a", 9)
    assert queue.best(lambda w: w.priority < 9) == waiter("b", 5)
    assert queue.best(lambda w: False) is None
    assert len(queue) == 3  # best leaves waiters in place


def test_a_waiter_that_withdraws_is_never_served() -> None:
    queue = WaitQueue([waiter("a", 9), waiter("b", 5), waiter("c", 1)])
    assert queue.remove("zz") is None and "zz" not in queue
    queue.remove("a")
    assert [w.name for w in serve_all(queue)] == ["b", "c"]


def test_naive_and_aware_times_compare_as_utc() -> None:
    queue = WaitQueue([Waiter("aware", 0, T0 + timedelta(seconds=1)), Waiter("naive", 0, datetime(2030, 1, 1))])
    assert [w.name for w in queue] == ["naive", "aware"]


def test_iterating_is_a_snapshot() -> None:
    queue = WaitQueue([waiter("a"), waiter("b", age=1)])
    for entry in queue:
        queue.remove(entry.name)
    assert len(queue) == 0
    assert repr(WaitQueue([waiter("x")])) == "WaitQueue(['x'])"


_waiters = st.lists(
    st.builds(waiter, st.text("abcdef", min_size=1, max_size=3), st.integers(-3, 3), st.integers(0, 5)),
    max_size=30, unique_by=lambda w: w.name,
)


@given(_waiters, st.randoms(use_true_random=False))
def test_property_arrival_order_does_not_change_who_wins(waiters: list[Waiter], random: object) -> None:
    """The seed's concurrent requests: whatever order leases ask in, the same one gets the exporter."""
    shuffled = list(waiters)
    random.shuffle(shuffled)  # type: ignore[attr-defined]
    expected = sorted(waiters, key=lambda w: (-w.priority, w.created, w.name))
    assert serve_all(WaitQueue(shuffled)) == expected


@given(_waiters, st.data())
def test_property_removing_keeps_the_rest_in_order(waiters: list[Waiter], data: st.DataObject) -> None:
    queue = WaitQueue(waiters)
    gone = data.draw(st.sets(st.sampled_from([w.name for w in waiters])) if waiters else st.just(set()))
    for name in gone:
        queue.remove(name)
    kept = sorted((w for w in waiters if w.name not in gone), key=lambda w: w.key)
    assert list(queue) == kept
    assert queue.peek() == (kept[0] if kept else None)
    assert serve_all(queue) == kept


def test_may_take_is_the_one_rule_for_who_gets_an_exporter() -> None:
    from lessor.actors.exporter_state import Holder, may_take

    assert may_take(enabled=True, allow_disabled=False, holder=None, spot=False)
    assert may_take(enabled=True, allow_disabled=False, holder=None, spot=True)
    assert not may_take(enabled=False, allow_disabled=False, holder=None, spot=False)  # disabled
    assert may_take(enabled=False, allow_disabled=True, holder=None, spot=False)  # unless allowDisabled
    spot_holder, holder = Holder("s", 5, True), Holder("h", 20, False)
    assert may_take(enabled=True, allow_disabled=False, holder=spot_holder, spot=False)  # a non-spot lease evicts
    assert not may_take(enabled=True, allow_disabled=False, holder=spot_holder, spot=True)  # a spot one does not
    assert not may_take(enabled=True, allow_disabled=False, holder=holder, spot=False)  # nobody evicts a non-spot
