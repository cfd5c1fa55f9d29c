"""The invariant checker of `lessor bench failover` over synthetic histories and audit records (no API
server): each kind of violation is counted, and what the contract allows is not."""

from __future__ import annotations

import datetime as dt
from typing import Any

from lessor.tools.bench.failover_check import (
    GROUP_LABEL, PRIORITY_LABEL, SPOT_LABEL, Observed, failovers, late_writes, scan_history, slim_exporter,
    slim_lease, stranded, writes, writes_per_grant,
)

SA = "system:serviceaccount:lessor-system:"


def exporter(name: str, lease: str | None = None, group: str = "g0", free: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "labels": {GROUP_LABEL: group}},
            "status": {"leaseRef": {"name": lease} if lease else None, "exporterStatus": "Available",
                       "conditions": [{"type": "Online", "status": "True" if free else "False"}]}}


def lease(name: str, *, on: str | None = None, ready: bool = False, pending: bool = False, ended: bool = False,
          label: bool = True, priority: int = 20, spot: bool = False, group: str = "g0",
          reason: str = "") -> dict[str, Any]:
    conditions = []
    if ready or reason:
        conditions.append({"type": "Ready", "status": "True" if ready else "False", "reason": reason or "Ready"})
    if pending:
        conditions.append({"type": "Pending", "status": "True", "reason": "NotAvailable"})
    labels = {GROUP_LABEL: group, PRIORITY_LABEL: str(priority), SPOT_LABEL: "true" if spot else "false"}
    if ended and label:
        labels["lessor.dev/lease-ended"] = "true"
    return {"metadata": {"name": name, "labels": labels},
            "status": {"exporterRef": {"name": on} if on else None, "ended": ended, "conditions": conditions}}


class History:
    """Events at increasing resourceVersions, one second apart."""

    def __init__(self) -> None:
        self.events: list[Observed] = []

    def exporter(self, obj: dict[str, Any], type_: str = "MODIFIED") -> History:
        return self._add("Exporter", type_, slim_exporter(obj))

    def lease(self, obj: dict[str, Any], type_: str = "MODIFIED") -> History:
        return self._add("Lease", type_, slim_lease(obj))

    def _add(self, kind: str, type_: str, obj: dict[str, Any]) -> History:
        n = len(self.events) + 1
        self.events.append(Observed(100 + n, float(n), kind, type_, obj))
        return self


def test_a_clean_grant_and_a_spot_eviction_in_flight_are_no_violation() -> None:
    h = (History().exporter(exporter("e1"), "ADDED").lease(lease("spot", pending=True, spot=True, priority=10))
         .exporter(exporter("e1", "spot")).lease(lease("spot", on="e1", ready=True, spot=True, priority=10))
         .lease(lease("gold", pending=True, priority=30))
         # the exporter commits the gold lease: the spot lease is still Ready on it, for a moment
         .exporter(exporter("e1", "gold"))
         .lease(lease("spot", on="e1", ended=True, reason="Evicted", spot=True, priority=10))
         .lease(lease("gold", on="e1", ready=True, priority=30)))
    report = scan_history(h.events)
    assert report.samples == 8
    assert report.double_ready.samples == 0 and report.double_named.samples == 0
    assert report.inversions == []


def test_double_ready_and_double_named_count_samples_objects_and_duration() -> None:
    h = (History().lease(lease("a", on="e1", ready=True), "ADDED").exporter(exporter("e1", "a"), "ADDED")
         .lease(lease("b", on="e1", ready=True), "ADDED")  # 3: e1 Ready for a and b
         .exporter(exporter("e2", "b"), "ADDED")  # 4
         .exporter(exporter("e3", "b"), "ADDED")  # 5: b named by e2 and e3
         .lease(lease("a", on="e1", ended=True, reason="Released"))  # 6: e1 Ready for b only
         .exporter(exporter("e3")))  # 7: b named by e2 only
    report = scan_history(h.events)
    assert (report.double_ready.samples, len(report.double_ready.objects)) == (3, 1)
    assert report.double_ready.longest == 3.0  # from event 3 to event 6
    assert (report.double_named.samples, report.double_named.objects, report.double_named.longest) == (2, {"b"}, 2.0)


def test_a_deleted_lease_is_no_longer_ready_and_an_open_episode_lasts_to_the_end() -> None:
    h = (History().lease(lease("a", on="e1", ready=True), "ADDED").lease(lease("b", on="e1", ready=True), "ADDED")
         .lease(lease("b", on="e1", ready=True), "DELETED")
         .exporter(exporter("e1", "x"), "ADDED").exporter(exporter("e2", "x"), "ADDED").exporter(exporter("e4")))
    report = scan_history(h.events)
    assert report.double_ready.samples == 1
    assert report.double_named.samples == 2 and report.double_named.longest == 1.0  # open until the last event


def test_events_are_replayed_in_resource_version_order() -> None:
    h = History().lease(lease("a", on="e1", ready=True), "ADDED").lease(lease("b", on="e1", ready=True), "ADDED")
    h.events[0], h.events[1] = h.events[1], h.events[0]  # arrived out of order from two watches
    assert scan_history(h.events).double_ready.samples == 1


def test_priority_inversion_needs_a_higher_priority_lease_of_the_group_waiting_past_the_grace() -> None:
    h = (History().lease(lease("gold", pending=True, priority=30), "ADDED")  # waits from t=1
         .lease(lease("other-group", pending=True, priority=30, group="g1"), "ADDED")
         .lease(lease("silver", pending=True, priority=20), "ADDED")
         .lease(lease("silver", on="e1", ready=True, priority=20)))  # t=4: gold waited 3 s
    assert len(scan_history(h.events, grace=2.0).inversions) == 1
    assert scan_history(h.events, grace=5.0).inversions == []  # gold may not have reached the queue yet
    fair = (History().lease(lease("silver", pending=True, priority=20), "ADDED")
            .lease(lease("spot", pending=True, priority=10, spot=True, group="g1"), "ADDED")
            .lease(lease("silver", on="e1", ready=True, priority=20)))
    assert scan_history(fair.events, grace=0.0).inversions == []
    committed = (History().lease(lease("gold", pending=True, priority=30), "ADDED")
                 .exporter(exporter("e2", "gold"), "ADDED")  # committed, its Ready not written yet
                 .lease(lease("silver", pending=True, priority=20), "ADDED")
                 .lease(lease("silver", on="e1", ready=True, priority=20)))
    assert scan_history(committed.events, grace=0.0).inversions == []
    # A spot lease committed before gold arrived, its Ready written by the next leader after gold waited:
    # decided at the commit, when nothing of higher priority waited (bench failover, stop mode, session 15).
    before = (History().lease(lease("spot", pending=True, priority=10, spot=True), "ADDED")
              .exporter(exporter("e1", "spot"), "ADDED")  # t=2: committed, then the leader is stopped
              .lease(lease("gold", pending=True, priority=30), "ADDED")  # t=3
              .exporter(exporter("e1", "spot"))  # a heartbeat: still named, still decided at t=2
              .lease(lease("gold", pending=True, priority=30))
              .lease(lease("spot", on="e1", ready=True, priority=10, spot=True)))  # t=6: gold waited 3 s
    assert scan_history(before.events, grace=2.0).inversions == []
    after = (History().lease(lease("gold", pending=True, priority=30), "ADDED")  # t=1
             .lease(lease("spot", pending=True, priority=10, spot=True), "ADDED")
             .lease(lease("gold", pending=True, priority=30))
             .exporter(exporter("e1", "spot"), "ADDED")  # t=4: committed while gold had waited 3 s
             .lease(lease("spot", on="e1", ready=True, priority=10, spot=True)))
    assert len(scan_history(after.events, grace=2.0).inversions) == 1


def test_stranded_end_states_by_kind() -> None:
    exporters = [exporter("e1", "gone"), exporter("e2", "old"), exporter("e3", "held"), exporter("e4", "held"),
                 exporter("e5", "torn"), exporter("free", group="g1"), exporter("offline", group="g2", free=False),
                 exporter("spotty", "spot", group="g3")]
    leases = [lease("old", ended=True, reason="Released"), lease("held", on="e4", ready=True),
              lease("unnamed", on="e9", ready=True), lease("torn", on="e5", pending=True, reason="Pending"),
              lease("waits", pending=True, group="g1"), lease("waits-offline", pending=True, group="g2"),
              lease("spot", on="spotty", ready=True, spot=True, priority=10, group="g3"),
              lease("gold", pending=True, priority=30, group="g3"),
              lease("unlabelled", ended=True, label=False, reason="Expired")]
    left = stranded(exporters, leases)
    assert left == {
        "exporter_names_deleted_lease": ["e1 -> gone"],
        "exporter_names_ended_lease": ["e2 -> old"],
        "exporter_names_lease_of_other_exporter": ["e3 -> held (on e4)"],
        "lease_ready_on_exporter_not_naming_it": ["unnamed on e9"],
        "lease_torn": ["torn on e5 (Pending)"],
        "lease_waits_beside_free_exporter": ["waits"],
        "spot_holds_while_non_spot_waits": ["gold"],
        "ended_lease_without_label": ["unlabelled"],
    }
    assert not any(stranded([exporter("e1", "a")], [lease("a", on="e1", ready=True)]).values())


T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)


def audit(user: str, at: float, resource: str, *, name: str = "x", code: int = 200, verb: str = "patch",
          subresource: str = "", took: float = 0.01) -> dict[str, Any]:
    def stamp(s: float) -> str:
        return (T0 + dt.timedelta(seconds=s)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    group = "coordination.k8s.io" if resource == "leases-coord" else "lessor.dev"
    ref = {"resource": "leases" if resource == "leases-coord" else resource, "apiGroup": group, "name": name,
           **({"subresource": subresource} if subresource else {})}
    return {"stage": "ResponseComplete", "user": {"username": SA + user}, "verb": verb, "objectRef": ref,
            "responseStatus": {"code": code}, "requestReceivedTimestamp": stamp(at - took), "stageTimestamp": stamp(at)}


def renew(user: str, at: float) -> dict[str, Any]:
    return audit(user, at, "leases-coord", name="lessor-leader", verb="update")


def test_late_writes_of_a_deposed_leader_and_failover_times() -> None:
    records = [
        renew("r1", 0), audit("r1", 1, "exporters", subresource="status"), renew("r1", 2),
        renew("r2", 20),  # r2 took over (r1 paused after renewing at 2 s: its deadline is 12 s)
        audit("r1", 20.5, "leases", subresource="status"),  # before r2's first write: not counted
        audit("r2", 21, "leases", subresource="status"),  # r2's first write as leader
        audit("r1", 25, "exporters", subresource="status"),  # late, 13 s past r1's deadline
        audit("r1", 26, "leases", subresource="status", code=409),  # refused: not counted
        audit("r1", 26.5, "leases", verb="delete"),
        audit("other", 27, "leases", subresource="status"),  # not a replica
        audit("r2", 28, "exporters", subresource="status"),
        renew("r1", 40), audit("r1", 41, "leases", subresource="status"),  # r1 leads again: legitimate
        {**audit("r1", 42, "leases"), "stage": "ResponseStarted"},
        {**audit("r1", 27.5, "selfsubjectreviews", verb="create"),  # a question, not a write: not counted
         "objectRef": {"resource": "selfsubjectreviews", "apiGroup": "authentication.k8s.io"}},
    ]
    accepted = writes(records, [SA + "r1", SA + "r2", SA + "r3"])
    late = late_writes(accepted, renew_deadline=10.0)
    assert late["count"] == 2
    assert late["by_request"] == {"delete leases": 1, "patch exporters/status": 1}
    assert late["worst_seconds_past_renew_deadline"] == 14.51  # 26.5 - (2 - 0.01 + 10)
    assert late["terms"] == 3
    assert failovers(accepted, [(T0.timestamp() + 5, SA + "r1"), (T0.timestamp() + 100, SA + "r2")]) == [16.0, None]


def test_a_replica_that_never_led_but_writes_after_a_leader_is_late_without_a_deadline() -> None:
    records = [renew("r1", 0), audit("r1", 1, "leases", subresource="status"),
               audit("r3", 2, "exporters", subresource="status")]
    late = late_writes(writes(records, [SA + "r1", SA + "r3"]), renew_deadline=10.0)
    assert late["count"] == 1 and late["worst_seconds_past_renew_deadline"] is None


def test_writes_per_grant_count_events_and_leave_out_the_election_and_the_start() -> None:
    h = (History().lease(lease("a", pending=True)).exporter(exporter("e1", "a")).lease(lease("a", on="e1", ready=True))
         .lease(lease("b", pending=True)).exporter(exporter("e2", "b")).lease(lease("b", on="e2", ready=True))
         .lease(lease("b", on="e2", ready=True)))  # still Ready: not a grant again
    grants = scan_history(h.events).grants
    assert grants == 2
    records = [renew("r1", 0), renew("r1", 2), renew("r1", 4), audit("r1", 0.5, "exporters", subresource="status"),
               *(audit("r1", 1 + i, "leases", subresource="status") for i in range(3)),
               *(audit("r1", 1 + i, "exporters", subresource="status") for i in range(2)),
               audit("r1", 5, "events", verb="create"), audit("r1", 6, "events"),
               audit("r1", 7, "leases", subresource="status", code=409)]  # refused: not a write
    found = writes_per_grant(writes(records, [SA + "r1"]), grants, since=T0.timestamp() + 0.75)
    assert found["per_grant"] == 3.5 and found["events_per_grant"] == 1.0 and found["writes"] == 7
    assert found["writes_before_storm"] == {"patch exporters/status": 1}  # the start's Online, before the storm
    assert found["by_request_per_grant"] == {"create events": 0.5, "patch events": 0.5, "patch exporters/status": 1.0,
                                             "patch leases/status": 1.5}
