"""Jumpstarter's "Scheduled Leases" specs (controller/internal/controller/lease_controller_test.go, the
`Describe("Scheduled Leases")` block, its `It`s numbered sc01 to sc37 in order), on lessor: the peer's leases
through `lessor convert`, the peer's expectations read from lessor's status.

The peer's times are whole seconds from now (`time.Now().Truncate(time.Second).Add(...)`); so are these,
with a few seconds more where the peer relies on a reconcile call that lessor's actors replace (every
check waits for the state, within a limit scaled by the run's slowness). The namespace has a policy admitting
everyone (`Lab.admit_everyone`): the same access as the peer's none, decided without lessor's 3 s
open-access wait, so the begin and end times are not raced by it.

Where the peer asks `LeaseFromProtobuf` or `ReconcileLeaseTimeFields` (its gRPC layer) to refuse a time
combination, lessor's rule is the CRD-level one shared by the operator and the webhook
(`actors/leasing/spec.py`): without the webhook (the `operator` fixture runs none) the lease is created and
ends `Invalid`/`InvalidDuration`, with the message the webhook would deny it with, naming the field.
sc25 ("updating BeginTime on a lease that has already started") checks only a precondition of the peer's
gRPC `UpdateLease` and asserts nothing of the controller: it has no counterpart here.
"""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import EXPORTER, LEASE
from tests.polling import gone
from tests.slowness import scaled

from .lab import (
    DUT_A, DUT_B, ENDED, Lab, at, condition, ended, exporter_of, has, lease_of, message, parse, ready, status_time,
)

pytestmark = pytest.mark.usefixtures("operator")
SECOND = dt.timedelta(seconds=1)


@pytest.fixture
async def lab(kube: Gateway, namespace: str) -> Lab:
    made = Lab(kube, namespace)
    await asyncio.gather(made.standard(), made.admit_everyone())
    return made


scheduled = has("Pending", "Scheduled")


def within(seconds: float) -> dt.timedelta:
    """A bound on what the operator's speed decides, scaled by the run's slowness."""
    return dt.timedelta(seconds=scaled(seconds))


def now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


# sc01 "creating lease with Duration only (immediate lease): acquire exporter immediately, set effective begin"
async def test_sc01_a_duration_only_lease_begins_at_once(lab: Lab) -> None:
    before = now().replace(microsecond=0)
    await lab.lease(duration="2s")
    got = await lab.until("lease1", ready)
    after = now()
    assert "beginTime" not in got["spec"] and "endTime" not in got["spec"]
    assert before <= status_time(got, "beginTime") <= after
    assert exporter_of(got) in DUT_A


# sc02 "creating lease with BeginTime + Duration (scheduled lease): wait until BeginTime before acquiring"
async def test_sc02_begin_and_duration_wait_for_the_begin(lab: Lab) -> None:
    begin = at(3)
    await lab.lease(beginTime=begin, duration="1s")
    waiting = await lab.until("lease1", scheduled)
    assert exporter_of(waiting) is None and "beginTime" not in waiting["status"]
    got = await lab.until("lease1", ready)
    assert status_time(got, "beginTime") >= parse(begin)


# sc03 "creating lease with BeginTime + EndTime (without Duration): calculate Duration and wait until BeginTime"
async def test_sc03_begin_and_end_wait_for_the_begin(lab: Lab) -> None:
    # The peer writes spec.duration itself ("for now, we need to set it manually"); lessor needs no duration.
    begin, end = at(3), at(4)
    await lab.lease(beginTime=begin, endTime=end)
    assert exporter_of(await lab.until("lease1", scheduled)) is None
    got = await lab.until("lease1", ready)
    assert status_time(got, "beginTime") >= parse(begin)
    assert status_time(got, "endTime") == parse(end)


# sc04 "creating lease with EndTime only (immediate lease with fixed end time): acquire at once, end at EndTime"
async def test_sc04_an_end_only_lease_begins_at_once_and_ends_at_the_end(lab: Lab) -> None:
    end = at(3)
    await lab.lease(endTime=end)
    got = await lab.until("lease1", ready)
    assert got["spec"]["endTime"] == end
    done = await lab.until("lease1", ended)
    assert has("Ready", "Expired", "False")(done)
    assert status_time(done, "endTime") == parse(end)
    assert status_time(done, "endTime") - status_time(done, "beginTime") <= 3 * SECOND


# sc05 "creating lease with EndTime + Duration (calculated future BeginTime): wait before acquiring"
async def test_sc05_end_and_duration_give_a_future_begin(lab: Lab) -> None:
    end = at(4)
    await lab.lease(endTime=end, duration="1s")
    waiting = await lab.until("lease1", scheduled)
    assert exporter_of(waiting) is None
    assert "spec.endTime - spec.duration" in message(waiting, "Pending")
    got = await lab.until("lease1", ready)
    assert status_time(got, "beginTime") >= parse(end) - SECOND


# sc06 "EndTime + Duration: should start immediately when calculated BeginTime is in the past"
async def test_sc06_a_begin_in_the_past_starts_at_once_and_begins_now(lab: Lab) -> None:
    await lab.lease(beginTime=at(-10), endTime=at(20), duration="30s")
    got = await lab.until("lease1", ready)
    # status.beginTime is when the exporter was acquired, not the requested begin.
    assert abs(status_time(got, "beginTime") - now()) <= within(3)
    assert status_time(got, "endTime") > now()


# sc07 "creating lease with BeginTime + EndTime + Duration (all three specified): validate and use the values"
async def test_sc07_three_times_that_agree_are_used(lab: Lab) -> None:
    begin, end = at(3), at(4)
    await lab.lease(beginTime=begin, endTime=end, duration="1s")
    await lab.until("lease1", scheduled)
    got = await lab.until("lease1", ready)
    assert (got["spec"]["beginTime"], got["spec"]["endTime"], got["spec"]["duration"]) == (begin, end, "1s")


# sc08 "all three specified: should reject when Duration conflicts with EndTime - BeginTime"
async def test_sc08_a_duration_that_conflicts_with_begin_and_end_is_refused(lab: Lab) -> None:
    await lab.lease(beginTime=at(3), endTime=at(4), duration="2s")
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    assert message(got, "Invalid").startswith("spec.duration: 2s does not match spec.endTime - spec.beginTime")
    assert exporter_of(got) is None and ended(got)


# sc09 "creating lease with BeginTime already in the past: should start immediately without requeuing"
async def test_sc09_a_begin_in_the_past_starts_at_once(lab: Lab) -> None:
    # The peer's numbers: begun 2 s ago, 1 s long, so the window was over before the lease was created. The
    # peer acquires an exporter at once and sets the begin; so does lessor, and the lease then ends at its end.
    await lab.lease(beginTime=at(-2), duration="1s")
    granted = await lab.until("lease1", lambda o: exporter_of(o) is not None or ended(o))
    assert exporter_of(granted) in DUT_A and "beginTime" in granted["status"], granted["status"]
    over = await lab.until("lease1", ended)
    assert has("Ready", "Expired", "False")(over), over["status"]
    # A window still open starts at once and runs to its end.
    await lab.lease("lease2", beginTime=at(-2), duration="30s")
    got = await lab.until("lease2", ready)
    assert exporter_of(got) in DUT_A


# sc10 "lease expires based on Spec.EndTime: end at EndTime even if Duration would suggest later"
async def test_sc10_the_end_time_wins_over_a_longer_duration(lab: Lab) -> None:
    end = at(3)
    await lab.lease(endTime=end, duration="10s")
    await lab.until("lease1", ready)
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == parse(end)
    assert status_time(done, "endTime") - status_time(done, "beginTime") < 3 * SECOND + SECOND


# sc11 "lease with BeginTime expires based on BeginTime + Duration"
async def test_sc11_a_scheduled_lease_ends_at_begin_plus_duration(lab: Lab) -> None:
    begin = at(2)
    await lab.lease(beginTime=begin, duration="2s")
    await lab.until("lease1", ready)
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == parse(begin) + 2 * SECOND
    assert abs(status_time(done, "endTime") - status_time(done, "beginTime") - 2 * SECOND) <= SECOND


# sc12 "lease without BeginTime expires based on Status.BeginTime + Duration"
async def test_sc12_an_immediate_lease_ends_at_its_actual_begin_plus_duration(lab: Lab) -> None:
    await lab.lease(duration="2s")
    began = status_time(await lab.until("lease1", ready), "beginTime")
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == began + 2 * SECOND
    assert now() >= began + 2 * SECOND


# sc13 "checking EffectiveDuration on active lease": the peer's active lease has no status.endTime.
async def test_sc13_an_active_lease_shows_its_begin_and_planned_end(lab: Lab) -> None:
    # Deliberate difference, documented in docs/api.md ("When the lease ends or ended"): lessor writes the
    # planned end into status.endTime at the grant, so `kubectl get` shows it; the peer computes an effective
    # duration in its gRPC layer instead. The time held so far is now - status.beginTime in both.
    await lab.lease(duration="10s")
    got = await lab.until("lease1", ready)
    assert not ended(got)
    assert status_time(got, "endTime") == status_time(got, "beginTime") + 10 * SECOND
    assert dt.timedelta(0) <= now() - status_time(got, "beginTime") <= within(3)


# sc14 "multiple leases with different BeginTimes: acquire exporters at their respective BeginTimes"
async def test_sc14_leases_with_different_begins_acquire_at_their_own(lab: Lab) -> None:
    await lab.lease("lease1", duration="30s")
    first = exporter_of(await lab.until("lease1", ready))
    begin = at(3)
    await lab.lease("lease2", beginTime=begin, duration="2s")
    assert exporter_of(await lab.until("lease2", scheduled)) is None
    second = await lab.until("lease2", ready)
    assert status_time(second, "beginTime") >= parse(begin)
    assert {first, exporter_of(second)} == set(DUT_A)


# sc15 "creating lease with BeginTime after EndTime: should reject with validation error"
async def test_sc15_an_end_before_the_begin_is_refused(lab: Lab) -> None:
    await lab.lease(beginTime=at(3), endTime=at(2))
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    assert message(got, "Invalid").startswith("spec.endTime:") and "must be after spec.beginTime" in \
        message(got, "Invalid")


# sc16 "creating lease with BeginTime but zero Duration and no EndTime: reject, 'duration is required'"
async def test_sc16_a_begin_without_a_length_is_refused_duration_is_required(lab: Lab) -> None:
    await lab.lease(beginTime=at(2))
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    text = message(got, "Invalid")
    assert text.startswith("spec.duration:") and "duration is required" in text
    assert exporter_of(got) is None and ended(got)


# sc17 "creating lease with EndTime already in the past: should create but expire immediately"
async def test_sc17_an_end_in_the_past_expires_at_once(lab: Lab) -> None:
    await lab.lease(endTime=at(-1))
    got = await lab.until("lease1", ended)
    assert has("Ready", "Expired", "False")(got)
    assert (got.get("status") or {}).get("endTime")


# sc18 "creating lease with BeginTime in past but EndTime in future: start immediately and run until EndTime"
async def test_sc18_a_window_already_open_starts_at_once_and_runs_to_its_end(lab: Lab) -> None:
    end = at(3)
    await lab.lease(beginTime=at(-1), endTime=end, duration="4s")
    got = await lab.until("lease1", ready)
    assert not ended(got) and exporter_of(got) in DUT_A
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == parse(end)


# sc19 "releasing a scheduled lease before it starts: should cancel the scheduled lease"
async def test_sc19_releasing_a_scheduled_lease_cancels_it(lab: Lab) -> None:
    await lab.lease(beginTime=at(30), duration="1s")
    await lab.until("lease1", scheduled)
    await lab.patch("lease1", {"release": True})
    got = await lab.until("lease1", ended)
    assert has("Ready", "Released", "False")(got) and exporter_of(got) is None


# sc20 "releasing an active lease early: EffectiveDuration matching actual time held"
async def test_sc20_an_early_release_ends_at_the_release(lab: Lab) -> None:
    await lab.lease(duration="10s")
    await lab.until("lease1", ready)
    await lab.patch("lease1", {"release": True})
    got = await lab.until("lease1", ended)
    held = status_time(got, "endTime") - status_time(got, "beginTime")
    assert dt.timedelta(0) <= held <= within(2), held


# sc21 "creating lease with BeginTime very close to EndTime: should work with minimal duration"
async def test_sc21_a_one_second_window_is_granted_and_ends(lab: Lab) -> None:
    await lab.lease(beginTime=at(2), endTime=at(3), duration="1s")
    await lab.until("lease1", ready)
    assert has("Ready", "Expired", "False")(await lab.until("lease1", ended))


# sc22 "lease expires between reconciliation calls: should be marked as ended in next reconcile"
async def test_sc22_an_expired_lease_is_marked_ended(lab: Lab) -> None:
    await lab.lease(duration="1s")
    assert not ended(await lab.until("lease1", ready))
    assert ended(await lab.until("lease1", has("Ready", "Expired", "False")))


# sc23 "an ended lease has the ended label: should be a no-op on subsequent reconciles"
async def test_sc23_an_ended_lease_has_the_ended_label_and_stays_as_it_is(lab: Lab) -> None:
    # The label is lessor's `lessor.dev/lease-ended` (docs/migrating.md), the peer's `jumpstarter.dev/lease-ended`.
    await lab.lease(duration="1s")
    got = await lab.until("lease1", lambda o: ended(o) and (o["metadata"].get("labels") or {}).get(ENDED) == "true")
    version = got["metadata"]["resourceVersion"]
    await asyncio.sleep(1)
    assert (await lab.get("lease1"))["metadata"]["resourceVersion"] == version


# sc24 "an ended lease is missing the ended label: should backfill the label on the next reconcile"
async def test_sc24_the_ended_label_is_put_back(lab: Lab) -> None:
    await lab.lease(duration="1s")
    await lab.until("lease1", lambda o: (o["metadata"].get("labels") or {}).get(ENDED) == "true")
    await lab.kube.merge_patch(LEASE, lab.namespace, "lease1", {"metadata": {"labels": {ENDED: None}}})
    await lab.until("lease1", lambda o: (o["metadata"].get("labels") or {}).get(ENDED) == "true")


# sc26 "updating EndTime on a scheduled lease before it starts: update EndTime and recalculate Duration"
async def test_sc26_a_new_end_before_the_start_is_used(lab: Lab) -> None:
    begin = at(4)
    await lab.lease(beginTime=begin, endTime=at(5), duration="1s")
    await lab.until("lease1", scheduled)
    new_end = at(7)
    await lab.patch("lease1", {"endTime": new_end, "duration": None})
    got = await lab.until("lease1", ready)
    assert status_time(got, "endTime") == parse(new_end)


# sc27 "extending an active lease by updating EndTime: should extend the lease duration"
async def test_sc27_a_later_end_extends_an_active_lease(lab: Lab) -> None:
    await lab.lease(endTime=at(2))
    await lab.until("lease1", ready)
    new_end = at(5)
    await lab.patch("lease1", {"endTime": new_end})
    await lab.until("lease1", lambda o: (o.get("status") or {}).get("endTime") == new_end)
    done = await lab.until("lease1", ended)
    assert has("Ready", "Expired", "False")(done) and now() >= parse(new_end)


# sc28 "shortening an active lease by updating Duration: should shorten the lease duration"
async def test_sc28_a_shorter_duration_shortens_an_active_lease(lab: Lab) -> None:
    await lab.lease(duration="30s")
    began = status_time(await lab.until("lease1", ready), "beginTime")
    await lab.patch("lease1", {"duration": "1s"})
    done = await lab.until("lease1", ended, timeout=10)
    assert status_time(done, "endTime") == began + SECOND


# sc29 "updating scheduled lease EndTime before it starts: should allow update and adjust timing"
async def test_sc29_a_shorter_end_before_the_start_is_used(lab: Lab) -> None:
    begin = at(4)
    await lab.lease(beginTime=begin, endTime=at(14), duration="10s")
    await lab.until("lease1", scheduled)
    new_end = at(5)
    await lab.patch("lease1", {"endTime": new_end, "duration": None})
    await lab.until("lease1", ready)
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == parse(new_end)


# sc30 "updating a lease with all three fields to maintain consistency: should allow valid updates"
async def test_sc30_three_times_updated_consistently_are_accepted(lab: Lab) -> None:
    begin = at(30)
    await lab.lease(beginTime=begin, endTime=at(32), duration="2s")
    await lab.until("lease1", scheduled)
    new_end = at(33)
    patched = await lab.patch("lease1", {"duration": "3s", "endTime": new_end})
    assert (patched["spec"]["duration"], patched["spec"]["endTime"]) == ("3s", new_end)
    generation = patched["metadata"]["generation"]
    got = await lab.until("lease1", lambda o: (condition(o, "Pending") or {}).get("observedGeneration") == generation)
    assert scheduled(got) and not ended(got)


# sc31 "updating a lease with all three fields to create conflict: should reject updates that break consistency"
async def test_sc31_three_times_updated_inconsistently_are_refused(lab: Lab) -> None:
    await lab.lease(beginTime=at(30), endTime=at(32), duration="2s")
    await lab.until("lease1", scheduled)
    await lab.patch("lease1", {"duration": "5s"})
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    assert message(got, "Invalid").startswith("spec.duration: 5s does not match")


# sc32 "updating active lease Duration when all three fields exist: update both Duration and EndTime"
async def test_sc32_an_active_lease_shortened_by_duration_and_end_together(lab: Lab) -> None:
    begin = at(2)
    await lab.lease(beginTime=begin, endTime=at(32), duration="30s")
    await lab.until("lease1", ready)
    new_end = (parse(begin) + 3 * SECOND).strftime("%Y-%m-%dT%H:%M:%SZ")
    await lab.patch("lease1", {"duration": "3s", "endTime": new_end})
    done = await lab.until("lease1", ended)
    assert status_time(done, "endTime") == parse(new_end)


# sc33 "two scheduled leases compete for the same exporter: first at its BeginTime, second after it is released"
async def test_sc33_two_scheduled_leases_take_the_exporter_in_turn(lab: Lab) -> None:
    await lab.lease("lease1", dut="b", beginTime=at(2), duration="30s")
    await lab.lease("lease2", dut="b", beginTime=at(4), duration="30s")
    assert exporter_of(await lab.until("lease1", ready)) == DUT_B
    waiting = await lab.until("lease2", has("Pending", "NotAvailable"))
    assert exporter_of(waiting) is None
    await lab.patch("lease1", {"release": True})
    await lab.until("lease1", ended)
    assert exporter_of(await lab.until("lease2", ready)) == DUT_B


# sc34 "deleting a scheduled lease before it starts: should delete successfully without acquiring exporter"
async def test_sc34_a_scheduled_lease_deleted_before_its_begin_takes_nothing(lab: Lab) -> None:
    await lab.lease(beginTime=at(5), duration="1s")
    await lab.until("lease1", scheduled)
    await lab.kube.delete(LEASE, lab.namespace, "lease1")
    await gone(lab.kube, LEASE, lab.namespace, "lease1")
    for name in DUT_A:
        assert lease_of(await lab.get(name, EXPORTER)) is None


# sc35 "updating scheduled lease to make BeginTime in the past: should start immediately after update"
async def test_sc35_moving_the_begin_into_the_past_starts_the_lease(lab: Lab) -> None:
    # The peer moves the begin 100 ms into the past with a 1 s duration: a window that closes within the
    # second, which lessor, rounding the end down to the second (docs/migrating.md), would end at once.
    # A window still open is the peer's point: 10 s here.
    future = at(30)
    await lab.lease(beginTime=future, duration="10s")
    await lab.until("lease1", scheduled)
    await lab.patch("lease1", {"beginTime": at(-1)})
    got = await lab.until("lease1", ready)
    assert status_time(got, "beginTime") < parse(future)


# sc36 "creating lease with negative Duration: should reject with validation error"
async def test_sc36_a_negative_duration_is_refused(lab: Lab) -> None:
    await lab.lease(duration="-1s")
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    assert message(got, "Invalid") == "spec.duration: must be positive, not -1s"


# sc37 "creating lease with EndTime and negative Duration: should reject with validation error"
async def test_sc37_an_end_with_a_negative_duration_is_refused(lab: Lab) -> None:
    await lab.lease(endTime=at(1), duration="-2s")
    got = await lab.until("lease1", has("Invalid", "InvalidDuration"))
    assert "spec.duration: must be positive" in message(got, "Invalid")


async def test_times_lessor_writes_are_whole_seconds(lab: Lab) -> None:
    """What both peers' suites parse (`%Y-%m-%dT%H:%M:%SZ`, as `metav1.Time` writes): no microseconds."""
    await lab.lease(duration="1h")
    got = await lab.until("lease1", ready)
    for text in (got["status"]["beginTime"], got["status"]["endTime"],
                 *(found["lastTransitionTime"] for found in got["status"]["conditions"])):
        parse(text)  # ValueError on `...:02.433598Z`
    exporter = await lab.until(exporter_of(got) or "", lambda e: condition(e, "Online") is not None, res=EXPORTER)
    parse(condition(exporter, "Online")["lastTransitionTime"])  # type: ignore[index]
