"""Policy resolution (actors/leasing/resolution.py, access_policy.py, exporter_state.py): every rule of the leasing issue and every corner case of the seed.

The seed (an analysis of an existing lease controller) lists what it gets
wrong; the tests named `test_seed_*` are those rows, answered the lessor way.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Mapping, Sequence
from datetime import datetime, timedelta, timezone
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lessor.model.views.leasing import ExporterView, LeaseView
from lessor.actors.leasing.spec import ConditionType, LeaseRequest, Reason, Verdict, parse_lease
from lessor.actors.leasing.access_policy import OPEN_ACCESS, PolicyMemo, PolicySet, approvals, compile_policies
from lessor.actors.leasing.exporter_state import ExporterState, ExporterStates, Holder
from lessor.actors.leasing.resolution import Candidate, Plan, State, resolve
from lessor.templates.timestamps import format_timestamp

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=timezone.utc)
HOUR = timedelta(hours=1)
QA = {"team": "qa"}
DEV = {"team": "dev"}


# --- builders ---------------------------------------------------------------------------------


def lease(name: str = "l1", **spec: Any) -> LeaseRequest:
    body: dict = {"clientRef": {"name": "alice"}}
    body.update(spec)
    request = parse_lease(LeaseView.of({"metadata": {"name": name, "creationTimestamp": "2030-01-01T00:00:00Z"}, "spec": body}))
    assert isinstance(request, LeaseRequest), request
    return request


def boards(board: str = "rpi4", **spec: Any) -> LeaseRequest:
    return lease(selector={"matchLabels": {"board": board}}, **spec)


def exporter(name: str, board: str = "rpi4", *, enabled: bool = True, online: bool = True, ready: bool = True,
             holder: Holder | None = None, **labels: str) -> ExporterState:
    return ExporterState(name, {"board": board, **labels}, enabled=enabled, online=online, ready=ready, holder=holder)


def rule(priority: int = 0, *clients: Mapping[str, str] | None, spot: bool = False, maximum: str | None = None,
         description: str = "") -> dict:
    entry: dict = {"priority": priority, "spotAccess": spot, "description": description,
                   "from": [{"clientSelector": {"matchLabels": dict(c)} if c is not None else {}}
                            for c in clients]}
    if maximum is not None:
        entry["maximumDuration"] = maximum
    return entry


def policy(name: str, exporters: Mapping[str, Any] | None, *rules: dict) -> dict:
    return {"metadata": {"name": name, "namespace": "lab"},
            "spec": {"exporterSelector": exporters, "policies": list(rules)}}


def policies(*objects: dict) -> PolicySet:
    return compile_policies(objects)


ALL = {}  # an empty exporterSelector: every exporter
RPI4 = {"matchLabels": {"board": "rpi4"}}


NO_POLICIES = PolicySet()


def plan(request: LeaseRequest, exporters: Sequence[ExporterState], policy_set: PolicySet = NO_POLICIES,
         client: Mapping[str, str] | None = QA, now: datetime = NOW) -> Plan:
    result = resolve(request, client, exporters, policy_set, now=now)
    assert isinstance(result, Plan), result
    return result


def verdict(request: LeaseRequest, exporters: Sequence[ExporterState], policy_set: PolicySet = NO_POLICIES,
            client: Mapping[str, str] | None = QA, now: datetime = NOW) -> Verdict:
    result = resolve(request, client, exporters, policy_set, now=now)
    assert isinstance(result, Verdict), result
    assert result.type is ConditionType.UNSATISFIABLE
    return result


def names(result: Plan) -> list[str]:
    return [candidate.exporter for candidate in result.candidates]


# --- exporters: online and ready ------------------------------------------------------------------


@pytest.mark.parametrize(("status", "ready"), [
    (None, True), ("", True), ("Available", True), ("Unspecified", True),
    ("Offline", False), ("BeforeLeaseHook", False), ("LeaseReady", False), ("AfterLeaseHook", False),
    ("Whatever", False),
])
def test_exporter_ready(status: str | None, ready: bool) -> None:
    assert ExporterView.of({"status": {"exporterStatus": status}}).ready is ready


def _seen(last_seen: datetime | None, exporter_status: str) -> ExporterView:
    return ExporterView.of({"status": {"exporterStatus": exporter_status,
                                       "lastSeen": format_timestamp(last_seen) if last_seen else None}})


def test_exporter_online_follows_the_heartbeat_and_offline() -> None:
    timeout = timedelta(seconds=60)
    assert _seen(NOW - timedelta(seconds=59), "Available").online(NOW, timeout)
    assert not _seen(NOW - timedelta(seconds=60), "Available").online(NOW, timeout)
    assert _seen(NOW + timedelta(seconds=5), "").online(NOW, timeout)  # skewed clock
    assert not _seen(NOW, "Offline").online(NOW, timeout)
    assert not _seen(None, "Available").online(NOW, timeout)
    assert _seen(NOW - timedelta(seconds=100), "LeaseReady").online(NOW, timedelta(minutes=5))


def test_exporter_view_from_object() -> None:
    obj = {"metadata": {"name": "e1", "labels": {"board": "rpi4"}},
           "status": {"lastSeen": format_timestamp(NOW - timedelta(seconds=10)), "exporterStatus": "LeaseReady",
                      "leaseRef": {"name": "other"}}}
    view = ExporterState.of(ExporterView.of(obj), now=NOW)
    assert (view.name, view.labels, view.enabled, view.online, view.ready) == ("e1", {"board": "rpi4"}, True,
                                                                                True, False)
    assert view.holder == Holder("other", 0, False)  # unknown terms: never evicted
    spot = Holder("other", 3, True)
    assert ExporterState.of(ExporterView.of(obj), now=NOW, holder=spot).holder == spot
    stale = ExporterState.of(ExporterView.of(obj), now=NOW + HOUR)
    assert not stale.online
    disabled = ExporterState.of(ExporterView.of({"metadata": {"name": "e2"}, "spec": {"enabled": False}}), now=NOW)
    assert not disabled.enabled and not disabled.online and disabled.ready and disabled.holder is None
    garbled = ExporterState.of(ExporterView.of({"metadata": {"name": "e3"}, "status": {"lastSeen": "yesterday"}}),
                               now=NOW)
    assert not garbled.online


def test_kept_exporter_states_are_what_of_answers_at_every_moment() -> None:
    """A state kept for the leases that resolve again must be the state of now: across the heartbeat's expiry
    (either way), a new version of the exporter, and a new version of its holding lease."""
    timeout = timedelta(seconds=60)
    obj = {"metadata": {"name": "e1", "labels": {"board": "rpi4"}},
           "status": {"lastSeen": format_timestamp(NOW), "exporterStatus": "Available", "leaseRef": {"name": "h"}}}
    holder = LeaseView.of({"metadata": {"name": "h"}, "status": {"priority": 5, "spotAccess": True}})
    kept = ExporterStates()
    view = ExporterView.of(obj)

    def check(exporter: ExporterView, holders: Mapping[str, LeaseView], now: datetime) -> ExporterState:
        state = kept.of("ns", exporter, holders, now=now, heartbeat_timeout=timeout)
        ref = exporter.held_by
        assert state == ExporterState.of(exporter, now=now, heartbeat_timeout=timeout,
                                         holder=None if ref is None else Holder(ref, *(
                                             (holders[ref].priority, holders[ref].spot) if ref in holders else ())))
        return state

    first = check(view, {"h": holder}, NOW)
    assert first.online and first.holder == Holder("h", 5, True)
    assert check(view, {"h": holder}, NOW + timeout - timedelta(microseconds=1)) is first  # kept
    assert not check(view, {"h": holder}, NOW + timeout).online  # expired on time, with no new version
    assert check(view, {"h": holder}, NOW).online  # and a clock read earlier is answered for its own time
    assert check(view, {}, NOW).holder == Holder("h")  # the holder gone from the world: unknown terms
    regranted = LeaseView.of({"metadata": {"name": "h"}, "status": {"priority": 7, "spotAccess": False}})
    assert check(view, {"h": regranted}, NOW).holder == Holder("h", 7, False)
    freed = ExporterView.of({**obj, "status": {"lastSeen": format_timestamp(NOW), "exporterStatus": "LeaseReady"}})
    assert check(freed, {"h": regranted}, NOW).holder is None
    assert not check(freed, {}, NOW).ready
    offline = ExporterView.of({**obj, "status": {"lastSeen": format_timestamp(NOW), "exporterStatus": "Offline"}})
    assert not check(offline, {}, NOW - HOUR).online


# --- rule 2: exporterRef and selector -----------------------------------------------------------


def test_rule_2_exporter_ref_to_a_missing_exporter_is_exporter_not_found() -> None:
    result = verdict(lease(exporterRef={"name": "ghost"}), [exporter("e1")])
    assert result.reason is Reason.EXPORTER_NOT_FOUND
    assert result.message.startswith("spec.exporterRef.name:") and "ghost" in result.message


def test_rule_2_exporter_ref_that_does_not_match_the_selector_is_selector_mismatch() -> None:
    result = verdict(lease(exporterRef={"name": "e1"}, selector={"matchLabels": {"board": "stm32"}}),
                     [exporter("e1", "rpi4")])
    assert result.reason is Reason.SELECTOR_MISMATCH
    assert "e1" in result.message and "board=stm32" in result.message


def test_rule_2_exporter_ref_that_matches_the_selector_is_fine() -> None:
    result = plan(lease(exporterRef={"name": "e1"}, selector=RPI4), [exporter("e1"), exporter("e2")])
    assert names(result) == ["e1"]


def test_rule_2_a_pinned_disabled_exporter_is_exporter_disabled() -> None:
    result = verdict(lease(exporterRef={"name": "e1"}), [exporter("e1", enabled=False)])
    assert result.reason is Reason.EXPORTER_DISABLED
    assert "spec.allowDisabled" in result.message


def test_rule_2_allow_disabled_lets_a_lease_pin_a_disabled_exporter() -> None:
    result = plan(lease(exporterRef={"name": "e1"}, allowDisabled=True), [exporter("e1", enabled=False)])
    assert names(result) == ["e1"]


def test_rule_2_a_selector_whose_exporters_are_all_disabled_is_all_disabled() -> None:
    exporters = [exporter("e1", enabled=False), exporter("e2", enabled=False), exporter("s1", "stm32")]
    result = verdict(boards(), exporters)
    assert result.reason is Reason.ALL_DISABLED
    assert "e1" in result.message and "e2" in result.message and result.message.startswith("spec.selector:")
    assert names(plan(boards(allowDisabled=True), exporters)) == ["e1", "e2"]


def test_rule_2_disabled_exporters_are_left_out_of_the_candidates() -> None:
    assert names(plan(boards(), [exporter("e1", enabled=False), exporter("e2")])) == ["e2"]


def test_rule_2_a_selector_matching_nothing_is_exporter_not_found() -> None:
    result = verdict(boards("stm32"), [exporter("e1", "rpi4")])
    assert result.reason is Reason.EXPORTER_NOT_FOUND
    assert result.message.startswith("spec.selector:") and "board=stm32" in result.message


def test_a_missing_client_is_no_access_even_with_open_access() -> None:
    result = verdict(boards(), [exporter("e1")], client=None)
    assert result.reason is Reason.NO_ACCESS
    assert "spec.clientRef.name" in result.message and "alice" in result.message


# --- rule 3: open access ------------------------------------------------------------------------


def test_rule_3_no_policy_is_open_access_at_priority_0_not_spot() -> None:
    result = plan(boards(duration="1000h"), [exporter("e2"), exporter("e1"), exporter("s1", "stm32")], client={})
    assert names(result) == ["e1", "e2"]
    assert all(c.priority == 0 and c.spot is False and c.policy is None for c in result.candidates)


def test_rule_3_a_policy_that_admits_no_one_still_closes_open_access() -> None:
    result = verdict(boards(), [exporter("e1")], policies(policy("p", ALL)))
    assert result.reason is Reason.NO_ACCESS


# --- rule 4: what a policy approves ---------------------------------------------------------------


def test_rule_4_a_policy_approves_matching_exporter_client_and_duration() -> None:
    result = plan(boards(duration="1h"), [exporter("e1")], policies(policy("p", RPI4, rule(7, QA, maximum="2h"))))
    (candidate,) = result.candidates
    assert (candidate.exporter, candidate.priority, candidate.spot, candidate.policy, candidate.rule) == \
        ("e1", 7, False, "p", 0)


def test_rule_4_the_client_must_match_a_from_entry() -> None:
    rules = policies(policy("p", RPI4, rule(7, DEV, {"team": "ops"})))
    assert verdict(boards(), [exporter("e1")], rules).reason is Reason.NO_ACCESS
    assert names(plan(boards(), [exporter("e1")], rules, client={"team": "ops"})) == ["e1"]


def test_rule_4_the_exporter_must_match_the_exporter_selector() -> None:
    rules = policies(policy("p", {"matchLabels": {"board": "stm32"}}, rule(7, QA)))
    assert verdict(boards(), [exporter("e1")], rules).reason is Reason.NO_ACCESS


def test_rule_4_an_empty_client_selector_admits_every_client() -> None:
    assert names(plan(boards(), [exporter("e1")], policies(policy("p", RPI4, rule(1, None))), client={})) == ["e1"]


def test_rule_4_a_duration_equal_to_the_maximum_is_within_it() -> None:
    assert names(plan(boards(duration="2h"), [exporter("e1")],
                      policies(policy("p", RPI4, rule(1, QA, maximum="2h"))))) == ["e1"]


def test_rule_4_an_end_only_lease_asks_for_the_time_until_its_end() -> None:
    rules = policies(policy("p", RPI4, rule(1, QA, maximum="2h")))
    soon = boards(endTime=format_timestamp(NOW + 2 * HOUR))
    assert names(plan(soon, [exporter("e1")], rules)) == ["e1"]
    assert verdict(soon, [exporter("e1")], rules, now=NOW - HOUR).reason is Reason.DURATION_EXCEEDED


def test_rule_4_a_window_asks_for_its_length() -> None:
    rules = policies(policy("p", RPI4, rule(1, QA, maximum="2h")))
    window = boards(beginTime=format_timestamp(NOW + 10 * HOUR), endTime=format_timestamp(NOW + 13 * HOUR))
    result = verdict(window, [exporter("e1")], rules)
    assert result.reason is Reason.DURATION_EXCEEDED and result.message.startswith("spec.endTime:")


def test_rule_4_an_unbounded_lease_passes_no_maximum_duration() -> None:
    rules = policies(policy("p", RPI4, rule(1, QA, maximum="1000h")))
    result = verdict(boards(), [exporter("e1")], rules)
    assert result.reason is Reason.DURATION_EXCEEDED
    assert "unbounded" in result.message and "1000h" in result.message


# --- rule 5: one approval per exporter, the best ----------------------------------------------------


def test_rule_5_an_exporter_approved_by_several_policies_is_considered_once_with_non_spot_first() -> None:
    rules = policies(policy("a", RPI4, rule(10, QA)), policy("b", ALL, rule(100, QA, spot=True)),
                     policy("c", ALL, rule(50, QA), rule(5, QA)))
    result = plan(boards(), [exporter("e1")], rules)
    (candidate,) = result.candidates
    assert (candidate.priority, candidate.spot, candidate.policy, candidate.rule) == (50, False, "c", 0)


def test_rule_5_spot_only_approvals_keep_the_highest_priority() -> None:
    rules = policies(policy("a", RPI4, rule(10, QA, spot=True), rule(30, QA, spot=True)))
    (candidate,) = plan(boards(), [exporter("e1")], rules).candidates
    assert (candidate.priority, candidate.spot) == (30, True)


# --- rule 6: DurationExceeded and NoAccess ---------------------------------------------------------


def test_rule_6_duration_exceeded_names_the_longest_duration_allowed() -> None:
    rules = policies(policy("short", RPI4, rule(10, QA, maximum="1h", description="quick checks")),
                     policy("long", ALL, rule(5, QA, maximum="2h30m", description="the QA day")))
    result = verdict(boards(duration="3h"), [exporter("e1")], rules)
    assert result.reason is Reason.DURATION_EXCEEDED
    assert result.message.startswith("spec.duration:")
    assert "2h30m" in result.message and "long" in result.message and "the QA day" in result.message
    assert "3h" in result.message


def test_rule_6_a_policy_without_a_limit_is_used_when_the_limited_ones_are_too_short() -> None:
    rules = policies(policy("a", RPI4, rule(10, QA, maximum="1h")), policy("b", RPI4, rule(5, QA)))
    (candidate,) = plan(boards(duration="2h"), [exporter("e1")], rules).candidates
    assert (candidate.priority, candidate.policy) == (5, "b")
    (candidate,) = plan(boards(duration="30m"), [exporter("e1")], rules).candidates
    assert (candidate.priority, candidate.policy) == (10, "a")


def test_rule_6_a_rule_too_short_that_would_not_admit_the_client_is_no_access() -> None:
    rules = policies(policy("p", RPI4, rule(10, DEV, maximum="1h")))
    assert verdict(boards(duration="2h"), [exporter("e1")], rules).reason is Reason.NO_ACCESS


def test_rule_6_a_rule_too_short_for_exporters_out_of_scope_is_no_access() -> None:
    rules = policies(policy("p", {"matchLabels": {"board": "stm32"}}, rule(10, QA, maximum="1h")))
    assert verdict(boards(duration="2h"), [exporter("e1"), exporter("s1", "stm32")], rules).reason \
        is Reason.NO_ACCESS


def test_rule_6_no_access_lists_the_policies_that_exist() -> None:
    rules = policies(policy("all-boards", ALL, rule(20, QA, description="QA comes first"),
                            rule(10, DEV, spot=True, description="developers, evictable")),
                     policy("locked", RPI4))
    result = verdict(boards(), [exporter("e1")], rules, client={"team": "sales"})
    assert result.reason is Reason.NO_ACCESS
    for text in ("all-boards", "QA comes first", "developers, evictable", "locked", "alice", "team=sales"):
        assert text in result.message


def test_rule_6_a_missing_client_is_no_access_that_says_the_lease_has_ended() -> None:
    """Unsatisfiable ends a lease, so its message says so: creating the Client later does not revive it."""
    result = verdict(boards(), [exporter("e1")], client=None)
    assert result.reason is Reason.NO_ACCESS
    assert result.message == ("spec.clientRef.name: there is no Client alice in the namespace; this lease has ended "
                              "and creating the Client will not revive it: create the Client alice, then a new lease")


def test_rule_6_no_access_names_the_pinned_exporter() -> None:
    result = verdict(lease(exporterRef={"name": "e1"}), [exporter("e1")], policies(policy("p", RPI4, rule(1, DEV))))
    assert "exporter e1" in result.message


# --- rule 7: pending reasons and the choice order -----------------------------------------------------


def test_rule_7_all_offline_is_pending_offline() -> None:
    result = plan(boards(), [exporter("e1", online=False), exporter("e2", online=False, holder=Holder("x"))])
    assert result.pending.reason is Reason.OFFLINE
    assert result.pending.type is ConditionType.PENDING
    assert not result.takeable
    assert "offline" in result.pending.message


def test_rule_7_offline_exporters_never_seen_are_no_news_but_stale_ones_are() -> None:
    from dataclasses import replace

    never = [replace(exporter("e1", online=False), seen=False), replace(exporter("e2", online=False), seen=False)]
    quiet = plan(boards(), never).pending
    assert quiet.reason is Reason.OFFLINE and not quiet.news  # a lab applied before its agents: no Event
    stale = plan(boards(), [never[0], exporter("e3", online=False)]).pending
    assert stale.reason is Reason.OFFLINE and stale.news  # one went quiet after reporting: worth an Event


def test_rule_7_all_not_ready_is_pending_not_ready() -> None:
    result = plan(boards(), [exporter("e1", ready=False), exporter("e2", ready=False, online=False)])
    assert result.pending.reason is Reason.NOT_READY
    assert not result.takeable


def test_rule_7_all_leased_is_pending_not_available() -> None:
    result = plan(boards(), [exporter("e1", holder=Holder("x")), exporter("e2", holder=Holder("y"), ready=False)])
    assert result.pending.reason is Reason.NOT_AVAILABLE
    assert not result.takeable
    assert [c.state for c in result.candidates] == [State.HELD, State.HELD]


def test_rule_7_a_mix_takes_the_reason_of_the_best_candidate() -> None:
    leased = exporter("a", holder=Holder("x"))
    not_ready = exporter("b", ready=False)
    offline = exporter("c", online=False)
    assert plan(boards(), [offline, not_ready, leased]).pending.reason is Reason.NOT_AVAILABLE
    assert plan(boards(), [offline, not_ready]).pending.reason is Reason.NOT_READY
    assert names(plan(boards(), [offline, not_ready, leased])) == ["a", "b", "c"]


def test_rule_7_pending_messages_carry_the_lease_controllers_phrases() -> None:
    """Scripts written for Jumpstarter's controller grep these words (docs/migrating.md)."""
    leased, not_ready, offline = exporter("a", holder=Holder("x")), exporter("b", ready=False), exporter("c", online=False)
    assert "but none of them are online (offline: c)" in plan(boards(), [offline]).pending.message
    assert "but none are ready for a new lease" in plan(boards(), [offline, not_ready]).pending.message
    assert "but all of them are already leased (leased: a)" in plan(boards(), [leased]).pending.message
    # Some are not leased but offline: the phrase stays, and the message does not claim they are all leased.
    mixed = plan(boards(), [offline, leased]).pending.message
    assert "but all of them are already leased or cannot be leased now (leased: a; offline: c)" in mixed


def test_rule_6_no_access_says_matching_policies_with_their_descriptions() -> None:
    rules = policies(policy("admins", RPI4, rule(20, {"role": "admin"}, description="Administrators only")),
                     policy("ci", RPI4, rule(5, {"role": "ci"}, description="CI pipelines only"), rule(1, {"x": "y"})),
                     policy("elsewhere", {"matchLabels": {"board": "stm32"}}, rule(1, QA)))
    message = verdict(boards(), [exporter("e1")], rules).message
    assert "none of them are approved by any policy for client alice" in message
    assert ('Matching policies: admins: policies[0] "Administrators only"; '
            'ci: policies[0] "CI pipelines only", policies[1]. ') in message
    assert message.endswith("Other policies in the namespace (they apply to none of these exporters): "
                            "elsewhere: policies[0]")
    # No policy applies to the exporters at all: no "Matching policies:", the namespace's policies instead.
    alone = verdict(boards(), [exporter("e1")], policies(policy("elsewhere", {"matchLabels": {"board": "x"}},
                                                                    rule(1, QA))))
    assert "Matching policies:" not in alone.message and "the policies in the namespace: elsewhere" in alone.message


def test_disabled_exporters_say_how_to_lease_them_anyway() -> None:
    pinned = verdict(lease(exporterRef={"name": "e1"}), [exporter("e1", enabled=False)])
    assert pinned.reason is Reason.EXPORTER_DISABLED
    assert "set spec.allowDisabled: true (jmp create lease --allow-disabled) to lease it anyway" in pinned.message
    every = verdict(boards(), [exporter("e1", enabled=False)])
    assert every.reason is Reason.ALL_DISABLED and "--allow-disabled" in every.message


def test_rule_7_free_before_leased_non_spot_before_spot_higher_priority_then_name() -> None:
    rules = policies(
        policy("low", {"matchLabels": {"tier": "low"}}, rule(1, QA)),
        policy("high", {"matchLabels": {"tier": "high"}}, rule(9, QA)),
        policy("spot", {"matchLabels": {"tier": "spot"}}, rule(50, QA, spot=True)),
    )
    exporters = [
        exporter("h-busy", tier="high", holder=Holder("x")),
        exporter("s-free", tier="spot"),
        exporter("l-free-b", tier="low"),
        exporter("l-free-a", tier="low"),
        exporter("h-free", tier="high"),
    ]
    result = plan(boards(), exporters, rules)
    assert names(result) == ["h-free", "l-free-a", "l-free-b", "s-free", "h-busy"]
    assert [c.state for c in result.candidates] == [State.FREE] * 4 + [State.HELD]
    assert result.takeable == result.candidates[:4]


def test_a_lease_that_already_holds_the_exporter_sees_it_free() -> None:
    result = plan(boards(), [exporter("e1", holder=Holder("l1"), ready=False)])
    (candidate,) = result.candidates
    assert candidate.state is State.FREE and candidate.holder == Holder("l1") and candidate.takeable


# --- rule 9: spot access -------------------------------------------------------------------------------


def test_rule_9_a_lease_with_only_spot_approvals_gets_a_free_exporter_as_spot() -> None:
    rules = policies(policy("p", RPI4, rule(10, DEV, spot=True)))
    result = plan(boards(), [exporter("e1")], rules, client=DEV)
    (candidate,) = result.takeable
    assert (candidate.exporter, candidate.spot, candidate.priority, candidate.state) == ("e1", True, 10, State.FREE)


def test_rule_9_a_non_spot_lease_without_a_free_exporter_evicts_the_lowest_priority_spot_holder() -> None:
    exporters = [
        exporter("e1", holder=Holder("spot-high", 30, True)),
        exporter("e2", holder=Holder("regular", 0, False)),
        exporter("e3", holder=Holder("spot-low", 5, True)),
        exporter("e4", holder=Holder("spot-mid", 10, True)),
    ]
    result = plan(boards(), exporters, policies(policy("p", RPI4, rule(0, QA))))
    assert names(result) == ["e3", "e4", "e1", "e2"]
    assert [(c.state, c.holder and c.holder.lease) for c in result.candidates] == [
        (State.EVICTABLE, "spot-low"), (State.EVICTABLE, "spot-mid"), (State.EVICTABLE, "spot-high"),
        (State.HELD, "regular")]
    assert [c.state for c in result.takeable] == [State.EVICTABLE] * 3
    assert result.pending.reason is Reason.NOT_AVAILABLE


def test_rule_9_a_free_exporter_comes_before_any_eviction() -> None:
    exporters = [exporter("a", holder=Holder("spot", 1, True)), exporter("b")]
    assert names(plan(boards(), exporters)) == ["b", "a"]


def test_rule_9_a_spot_lease_evicts_no_one() -> None:
    rules = policies(policy("p", RPI4, rule(99, DEV, spot=True)))
    result = plan(boards(), [exporter("e1", holder=Holder("other-spot", 1, True))], rules, client=DEV)
    (candidate,) = result.candidates
    assert candidate.state is State.HELD and not candidate.takeable
    assert not result.takeable


def test_rule_9_an_offline_spot_holder_is_not_evicted() -> None:
    result = plan(boards(), [exporter("e1", online=False, holder=Holder("s", 1, True))])
    assert result.candidates[0].state is State.OFFLINE and not result.takeable


# --- rule 10: scheduled leases -------------------------------------------------------------------------


def test_rule_10_a_begin_in_the_future_is_pending_scheduled() -> None:
    request = boards(beginTime=format_timestamp(NOW + HOUR), duration="1h")
    result = plan(request, [exporter("e1")])
    assert result.pending.reason is Reason.SCHEDULED
    assert result.scheduled_until == NOW + HOUR
    assert result.takeable == ()
    assert names(result) == ["e1"]
    assert "spec.beginTime" in result.pending.message


def test_rule_10_a_begin_derived_from_end_and_duration_is_scheduled_too() -> None:
    request = boards(endTime=format_timestamp(NOW + 3 * HOUR), duration="1h")
    result = plan(request, [exporter("e1")])
    assert result.pending.reason is Reason.SCHEDULED and result.scheduled_until == NOW + 2 * HOUR
    assert "spec.endTime - spec.duration" in result.pending.message


def test_rule_10_a_scheduled_lease_that_can_never_be_satisfied_ends_at_once() -> None:
    request = boards(beginTime=format_timestamp(NOW + HOUR), duration="4h")
    rules = policies(policy("p", RPI4, rule(1, QA, maximum="2h")))
    assert verdict(request, [exporter("e1")], rules).reason is Reason.DURATION_EXCEEDED


def test_rule_10_at_its_begin_the_lease_is_resolved_like_any_other() -> None:
    request = boards(beginTime=format_timestamp(NOW + HOUR), duration="1h")
    result = plan(request, [exporter("e1")], now=NOW + HOUR)
    assert result.scheduled_until is None and [c.exporter for c in result.takeable] == ["e1"]


# --- the seed's table of corner cases -------------------------------------------------------------------


def test_seed_maximum_duration_exceeded_by_all_policies_says_duration_not_no_access() -> None:
    rules = policies(policy("qa", RPI4, rule(20, QA, maximum="1h")))
    result = verdict(boards(duration="2h"), [exporter("e1")], rules)
    assert result.reason is Reason.DURATION_EXCEEDED
    assert "1h" in result.message and "2h" in result.message


def test_seed_short_max_duration_and_unlimited_policy_uses_the_unlimited_one() -> None:
    rules = policies(policy("a", RPI4, rule(10, QA, maximum="1h")), policy("b", RPI4, rule(5, QA)))
    (candidate,) = plan(boards(duration="2h"), [exporter("e1")], rules).candidates
    assert candidate.priority == 5 and candidate.policy == "b"


def test_seed_an_exporter_approved_by_several_policies_appears_once() -> None:
    rules = policies(policy("a", RPI4, rule(10, QA)), policy("b", RPI4, rule(100, QA, spot=True)),
                     policy("c", ALL, rule(1, QA), rule(2, None)))
    result = plan(boards(), [exporter("e1"), exporter("e2")], rules)
    assert names(result) == ["e1", "e2"]
    assert all((c.priority, c.spot) == (10, False) for c in result.candidates)


def test_seed_spot_eviction_is_reachable() -> None:
    rules = policies(policy("p", RPI4, rule(20, QA), rule(10, DEV, spot=True)))
    dev = plan(boards(), [exporter("e1")], rules, client=DEV)
    assert dev.takeable[0].spot is True  # spot-only is granted, not Unsatisfiable
    held = exporter("e1", holder=Holder("bob-lease", dev.takeable[0].priority, dev.takeable[0].spot))
    qa = plan(boards(), [held], rules)
    assert qa.takeable[0].state is State.EVICTABLE and qa.takeable[0].holder == held.holder


def test_seed_a_policy_with_an_empty_from_list_admits_no_one_and_says_so() -> None:
    rules = policies(policy("p", RPI4, {"priority": 5, "description": "forgot the clients", "from": []}))
    result = verdict(boards(), [exporter("e1")], rules)
    assert result.reason is Reason.NO_ACCESS
    assert "forgot the clients" in result.message and "admits no client" in result.message


def test_seed_an_empty_exporter_selector_matches_every_exporter() -> None:
    rules = policies(policy("p", ALL, rule(3, QA)))
    result = plan(boards(), [exporter("e1"), exporter("e2")], rules)
    assert names(result) == ["e1", "e2"] and all(c.priority == 3 for c in result.candidates)


def test_seed_a_missing_exporter_selector_matches_no_exporter() -> None:
    rules = policies(policy("p", None, rule(3, QA)))
    result = verdict(boards(), [exporter("e1")], rules)
    assert result.reason is Reason.NO_ACCESS and "spec.exporterSelector" in result.message


def test_seed_no_duration_and_no_end_is_unbounded_not_zero() -> None:
    limited = policies(policy("p", RPI4, rule(3, QA, maximum="1h")))
    assert verdict(boards(), [exporter("e1")], limited).reason is Reason.DURATION_EXCEEDED
    unlimited = policies(policy("p", RPI4, rule(3, QA, maximum="1h")), policy("q", RPI4, rule(1, QA)))
    assert plan(boards(), [exporter("e1")], unlimited).candidates[0].policy == "q"


def test_seed_a_scheduled_lease_rechecks_its_exporter_when_it_begins() -> None:
    request = boards(beginTime=format_timestamp(NOW + 2 * HOUR), duration="1h")
    before = plan(request, [exporter("e1")], now=NOW)
    assert before.pending.reason is Reason.SCHEDULED
    at_begin = plan(request, [exporter("e1", online=False)], now=NOW + 2 * HOUR)
    assert at_begin.pending.reason is Reason.OFFLINE and not at_begin.takeable


def test_seed_concurrent_requests_are_not_decided_here() -> None:
    # Resolution only orders candidates: two leases may both see e1 free. The
    # exporter actor is the single arbiter; the loser finds e1 held and waits.
    first = plan(lease("l1", selector=RPI4), [exporter("e1")])
    second = plan(lease("l2", selector=RPI4), [exporter("e1", holder=Holder("l1"))])
    assert first.takeable[0].exporter == "e1"
    assert second.pending.reason is Reason.NOT_AVAILABLE and not second.takeable


# --- broken policies fail closed -------------------------------------------------------------------------


@pytest.mark.parametrize("broken", [
    {"priority": 1, "maximumDuration": "1d", "from": [{"clientSelector": {}}]},
    {"priority": 1, "maximumDuration": "0s", "from": [{"clientSelector": {}}]},
    {"priority": "high", "from": [{"clientSelector": {}}]},
    {"priority": 1, "from": [{"clientSelector": {"matchExpressions": [{"key": "a", "operator": "In"}]}}]},
    {"priority": 1, "from": [{}]},
    "not a rule",
])
def test_a_broken_rule_admits_no_one(broken: Any) -> None:
    result = verdict(boards(), [exporter("e1")], policies(policy("p", RPI4, broken)))
    assert result.reason is Reason.NO_ACCESS and "admits no one" in result.message


def test_a_broken_exporter_selector_applies_to_no_exporter() -> None:
    rules = policies(policy("p", {"matchLabels": {"bad key!": "x"}}, rule(1, QA)))
    result = verdict(boards(), [exporter("e1")], rules)
    assert result.reason is Reason.NO_ACCESS and "ignored" in result.message


def test_policies_are_compiled_once_and_remember_matches_per_label_set() -> None:
    rules = policies(policy("a", RPI4, rule(1, QA)), policy("b", {"matchLabels": {"board": "stm32"}}, rule(1, QA)))
    assert rules.applying_to({"board": "rpi4"}) == (0,)
    assert rules.applying_to({"board": "stm32"}) == (1,)
    assert rules.applying_to({"board": "rpi4"}) is rules.applying_to({"board": "rpi4"})


def test_compiled_versions_are_remembered_per_memo_never_across_operators() -> None:
    """Two operators in one process (the tests run several) may be told the same (uid, resourceVersion) by their
    API servers for different policies: each keeps its own memo, so neither judges by the other's."""
    version = {"uid": "u1", "resourceVersion": "7"}
    rpi4 = policy("p", RPI4, rule(1, QA))
    stm32 = policy("p", {"matchLabels": {"board": "stm32"}}, rule(1, QA))
    for body in (rpi4, stm32):
        body["metadata"].update(version)
    first, second = PolicyMemo(), PolicyMemo()

    mine = compile_policies([rpi4], first)
    assert compile_policies([rpi4], first) is mine  # the same versions: compiled once
    theirs = compile_policies([stm32], second)
    assert mine.applying_to({"board": "rpi4"}) == (0,) and theirs.applying_to({"board": "rpi4"}) == ()
    assert compile_policies([stm32]).applying_to({"board": "stm32"}) == (0,)  # no memo: compiled afresh


def test_approvals_directly() -> None:
    rules = policies(policy("a", RPI4, rule(1, QA, maximum="1h"), rule(2, QA, spot=True)))
    approved, closed = approvals([exporter("e1")], QA, rules, 2 * HOUR)
    assert approved["e1"].spot and approved["e1"].priority == 2
    assert [(r.policy, r.index) for r in closed] == [("a", 0)]
    approved, _ = approvals([exporter("e1")], QA, PolicySet(), None)
    assert approved == {"e1": OPEN_ACCESS}


# --- properties -----------------------------------------------------------------------------------------

_BOARDS = ["rpi4", "stm32"]
_TEAMS = ["qa", "dev"]


@st.composite
def exporters_strategy(draw: st.DrawFn) -> list[ExporterState]:
    count = draw(st.integers(min_value=0, max_value=12))
    views = []
    for index in range(count):
        holder = draw(st.none() | st.builds(Holder, st.sampled_from(["h1", "h2", "l1"]),
                                            st.integers(-3, 3), st.booleans()))
        views.append(ExporterState(
            f"e{index:02d}", {"board": draw(st.sampled_from(_BOARDS)), "site": draw(st.sampled_from("ab"))},
            enabled=draw(st.booleans()), online=draw(st.booleans()), ready=draw(st.booleans()), holder=holder))
    return draw(st.permutations(views))


@st.composite
def policy_objects(draw: st.DrawFn) -> list[dict]:
    objects = []
    for index in range(draw(st.integers(min_value=0, max_value=4))):
        selector = draw(st.sampled_from([{}, RPI4, {"matchLabels": {"site": "a"}}, {"matchLabels": {"board": "stm32"}}]))
        rules = [
            rule(draw(st.integers(-5, 5)), *draw(st.lists(st.sampled_from([None, QA, DEV]), max_size=2)),
                 spot=draw(st.booleans()), maximum=draw(st.sampled_from([None, "30m", "1h", "2h"])))
            for _ in range(draw(st.integers(min_value=0, max_value=3)))
        ]
        objects.append(policy(f"p{index}", selector, *rules))
    return objects


_requests = st.sampled_from([
    lease(selector={"matchLabels": {"board": "rpi4"}}, duration="1h"),
    lease(selector={"matchExpressions": [{"key": "board", "operator": "Exists"}]}, duration="45m"),
    lease(selector={"matchLabels": {"site": "a"}}),
    lease(selector={"matchLabels": {"board": "stm32"}}, duration="3h", allowDisabled=True),
    lease(exporterRef={"name": "e00"}, duration="20m"),
])


def _rule_order(a: Candidate, b: Candidate) -> int:
    """Rules 7 and 9 written out as a comparison, independently of Candidate.sort_key."""
    tiers = [State.FREE, State.EVICTABLE, State.HELD, State.NOT_READY, State.OFFLINE]
    steps = [
        (tiers.index(a.state), tiers.index(b.state)),
        ((a.holder.priority if a.state is State.EVICTABLE else 0), (b.holder.priority if b.state is State.EVICTABLE
                                                                   else 0)),
        (a.spot, b.spot),
        (-a.priority, -b.priority),
        (a.exporter, b.exporter),
    ]
    for left, right in steps:
        if left != right:
            return -1 if left < right else 1
    return 0


def _brute_force_best(request: LeaseRequest, exporter_view: ExporterState, objects: list[dict],
                      client: Mapping[str, str]) -> tuple[bool, int] | None:
    """The best (spot, priority) by reading the raw policies directly; None when nothing approves."""
    from lessor.model.selectors import parse_selector
    best = None
    requested = request.requested_duration(NOW)
    for obj in objects:
        if not parse_selector(obj["spec"]["exporterSelector"]).matches(exporter_view.labels):
            continue
        for entry in obj["spec"]["policies"]:
            if not any(parse_selector(f["clientSelector"]).matches(client) for f in entry["from"]):
                continue
            limit = entry.get("maximumDuration")
            limits = {"30m": timedelta(minutes=30), "1h": HOUR, "2h": 2 * HOUR}
            if limit is not None and (requested is None or requested > limits[limit]):
                continue
            found = (entry["spotAccess"], -entry["priority"])
            best = found if best is None or found < best else best
    return None if best is None else (best[0], -best[1])


@settings(max_examples=150, deadline=None)
@given(_requests, exporters_strategy(), policy_objects(), st.sampled_from([QA, DEV, {}]))
def test_property_candidates(request: LeaseRequest, exporters: list[ExporterState], objects: list[dict],
                             client: Mapping[str, str]) -> None:
    result = resolve(request, client, exporters, compile_policies(objects), now=NOW)
    if isinstance(result, Verdict):
        assert result.type in (ConditionType.INVALID, ConditionType.UNSATISFIABLE)
        assert result.reason in {Reason.EXPORTER_NOT_FOUND, Reason.SELECTOR_MISMATCH, Reason.EXPORTER_DISABLED,
                                 Reason.ALL_DISABLED, Reason.NO_ACCESS, Reason.DURATION_EXCEEDED}
        return
    candidates = list(result.candidates)
    # An exporter appears at most once.
    assert len({c.exporter for c in candidates}) == len(candidates)
    # The order is the rule's, and the rule's order is total (no two candidates tie).
    assert candidates == sorted(candidates, key=functools.cmp_to_key(_rule_order))
    assert all(_rule_order(a, b) != 0 for a, b in zip(candidates, candidates[1:]))
    # Every candidate is in scope, usable, and carries its best approval.
    by_name = {e.name: e for e in exporters}
    for candidate in candidates:
        view = by_name[candidate.exporter]
        assert request.selector is None or request.selector.matches(view.labels)
        assert view.enabled or request.allow_disabled
        if objects:
            assert _brute_force_best(request, view, objects, client) == (candidate.spot, candidate.priority)
        assert candidate.takeable == (candidate.state in (State.FREE, State.EVICTABLE))
        if candidate.state is State.EVICTABLE:
            assert candidate.holder is not None and candidate.holder.spot and not candidate.spot
    # No approved, usable exporter is missing.
    scope = [e for e in exporters if (request.exporter_ref is None or e.name == request.exporter_ref)
             and (request.selector is None or request.selector.matches(e.labels))
             and (e.enabled or request.allow_disabled)]
    approved = [e for e in scope if not objects or _brute_force_best(request, e, objects, client) is not None]
    assert sorted(c.exporter for c in candidates) == sorted(e.name for e in approved)
    assert result.pending.reason is candidates[0].state.pending


@settings(max_examples=100, deadline=None)
@given(_requests, exporters_strategy(), st.sampled_from([QA, DEV, {}]))
def test_property_no_policies_approves_every_usable_matching_exporter_at_0_not_spot(
        request: LeaseRequest, exporters: list[ExporterState], client: Mapping[str, str]) -> None:
    result = resolve(request, client, exporters, PolicySet(), now=NOW)
    if isinstance(result, Verdict):
        assert result.reason in {Reason.EXPORTER_NOT_FOUND, Reason.SELECTOR_MISMATCH, Reason.EXPORTER_DISABLED,
                                 Reason.ALL_DISABLED}
        return
    expected = {e.name for e in exporters if (request.exporter_ref is None or e.name == request.exporter_ref)
                and (request.selector is None or request.selector.matches(e.labels))
                and (e.enabled or request.allow_disabled)}
    assert {c.exporter for c in result.candidates} == expected
    assert all(c.priority == 0 and not c.spot for c in result.candidates)


@settings(max_examples=100, deadline=None)
@given(exporters_strategy(), policy_objects(), st.sampled_from(["10m", "30m", "1h", "2h", "5h"]))
def test_property_asking_for_less_time_never_loses_an_approval(exporters: list[ExporterState], objects: list[dict],
                                                               duration: str) -> None:
    compiled = compile_policies(objects)
    long = resolve(boards(duration=duration), QA, exporters, compiled, now=NOW)
    short = resolve(boards(duration="1m"), QA, exporters, compiled, now=NOW)
    if isinstance(long, Plan):
        assert isinstance(short, Plan)
        assert {c.exporter for c in long.candidates} <= {c.exporter for c in short.candidates}


def test_the_client_index_finds_every_policy_a_brute_force_scan_admits() -> None:
    """`relevant_to` looks only at the policies its client-selector index offers; it must miss none."""
    rng = random.Random(12)
    teams, tiers = ["a", "b", "c"], ["gold", "silver"]

    def selector() -> dict[str, Any]:
        match rng.randrange(5):
            case 0:
                return {}
            case 1:
                return {"matchLabels": {"team": rng.choice(teams)}}
            case 2:
                return {"matchExpressions": [{"key": "tier", "operator": "In", "values": rng.sample(tiers, 2)}]}
            case 3:
                return {"matchExpressions": [{"key": "team", "operator": "NotIn", "values": [rng.choice(teams)]}]}
            case _:
                return {"matchLabels": {"team": rng.choice(teams), "tier": rng.choice(tiers)}}

    objects = [policy(f"p{i:02d}", ALL, *({"priority": rng.randrange(5), "from": [{"clientSelector": selector()}]}
                                        for _ in range(rng.randrange(1, 3))))
               for i in range(40)]
    compiled = compile_policies(objects)
    for _ in range(50):
        labels = {key: rng.choice(values) for key, values in (("team", teams), ("tier", tiers)) if rng.random() < 0.8}
        admitting = {position for position, p in enumerate(compiled.policies)
                     if any(rule.admits(labels) for rule in p.rules)}
        assert set(compiled.relevant_to(labels, None)) == admitting
