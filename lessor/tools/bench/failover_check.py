"""The invariants of `lessor bench failover`, judged from what the bench recorded: a watch history of the
Exporters and Leases, the API server's audit log of the replicas' writes, and the objects at the end.

Pure functions over plain data (no API server), so that tests/bench/test_failover_check.py can feed them
synthetic histories and audit records.

What a *sample* is: the state of every Exporter and Lease of the lab right after one watch event, the
events of both kinds merged in resourceVersion order (one etcd, so one order). Each write the server
accepted is one sample, and a state that never existed in etcd is never a sample. A violation is counted
in every sample where it holds, however short: the contract says no moment shows an exporter Ready for
two leases or a lease named by two exporters, and the operator orders its writes so (the evicted lease
ends before the winner is told Granted). So the hand-over of a spot eviction in flight (the exporter
already names the winner while the evicted lease is still Ready on it) is not a double booking: one
lease is Ready, one exporter names each lease. It only counts as stranded if it is still so at the end.
"""

from __future__ import annotations

import datetime as dt
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any
from lessor.model.labels import LEASE_ENDED

GROUP_LABEL = "failover.lessor.dev/group"
PRIORITY_LABEL = "failover.lessor.dev/priority"
SPOT_LABEL = "failover.lessor.dev/spot"
LEADER_LEASE = "lessor-leader"
WRITE_VERBS = ("create", "update", "patch", "delete")
FREE_STATUSES = ("", "Available", "Unspecified")


# --- the objects, slimmed to what the invariants read --------------------------------------------


def _condition(obj: Mapping[str, Any], type_: str) -> tuple[str, str] | None:
    for c in (obj.get("status") or {}).get("conditions") or ():
        if c.get("type") == type_:
            return c.get("status", ""), c.get("reason", "")
    return None


def slim_exporter(obj: Mapping[str, Any]) -> dict[str, Any]:
    """An Exporter as the invariants need it (the history holds thousands of these)."""
    status = obj.get("status") or {}
    online = _condition(obj, "Online")
    return {"name": obj["metadata"]["name"], "group": (obj["metadata"].get("labels") or {}).get(GROUP_LABEL, ""),
            "leaseRef": (status.get("leaseRef") or {}).get("name") or None,
            "free": (online is not None and online[0] == "True" and (obj.get("spec") or {}).get("enabled", True)
                     is not False and (status.get("exporterStatus") or "") in FREE_STATUSES)}


def slim_lease(obj: Mapping[str, Any]) -> dict[str, Any]:
    """A Lease as the invariants need it; group, priority and spot come from the bench's own labels, so
    that a lease the operator never judged still has them."""
    labels = obj["metadata"].get("labels") or {}
    status = obj.get("status") or {}
    ready, pending = _condition(obj, "Ready"), _condition(obj, "Pending")
    return {"name": obj["metadata"]["name"], "group": labels.get(GROUP_LABEL, ""),
            "priority": int(labels.get(PRIORITY_LABEL) or 0), "spot": labels.get(SPOT_LABEL) == "true",
            "ready": ready is not None and ready[0] == "True", "readyReason": ready[1] if ready else "",
            "pending": pending is not None and pending[0] == "True",
            "exporterRef": (status.get("exporterRef") or {}).get("name") or None,
            "ended": bool(status.get("ended")), "endedLabel": labels.get(LEASE_ENDED) == "true"}


@dataclass(frozen=True)
class Observed:
    """One watch event: `kind` Exporter or Lease, `type` ADDED, MODIFIED or DELETED, `obj` slimmed;
    `seen` is the bench's monotonic clock when it arrived (episode lengths), `rv` orders the samples."""

    rv: int
    seen: float
    kind: str
    type: str
    obj: dict[str, Any]


# --- the watch history ---------------------------------------------------------------------------


@dataclass
class Episodes:
    """One kind of violation across the history: samples that show it, the objects it hit, and how
    long each object showed it (from the first sample that shows it to the first that does not)."""

    samples: int = 0
    objects: set[str] = field(default_factory=set)
    longest: float = 0.0
    _open: dict[str, float] = field(default_factory=dict)

    def update(self, now: set[str], seen: float) -> None:
        if now:
            self.samples += 1
        for key in now - self._open.keys():
            self._open[key] = seen
            self.objects.add(key)
        for key in self._open.keys() - now:
            self.longest = max(self.longest, seen - self._open.pop(key))

    @property
    def open(self) -> set[str]:
        return set(self._open)

    def close(self, seen: float) -> None:
        for start in self._open.values():
            self.longest = max(self.longest, seen - start)
        self._open.clear()

    def report(self) -> dict[str, Any]:
        return {"samples": self.samples, "objects": len(self.objects), "longest_seconds": round(self.longest, 2),
                "first": sorted(self.objects)[:5]}


@dataclass
class HistoryReport:
    samples: int = 0
    double_ready: Episodes = field(default_factory=Episodes)
    """Exporters Ready (Ready=True, status.exporterRef naming it, not ended) for two live leases."""
    double_named: Episodes = field(default_factory=Episodes)
    """Leases that two exporters' status.leaseRef name."""
    inversions: list[str] = field(default_factory=list)
    """Grants to a lease while a higher-priority lease of its group had been waiting for `grace`."""
    grants: int = 0
    """Leases that turned Ready on an exporter (a lease granted again after a failover counts again)."""

    def report(self) -> dict[str, Any]:
        return {"samples": self.samples, "exporter_ready_for_two_leases": self.double_ready.report(),
                "lease_named_by_two_exporters": self.double_named.report(),
                "priority_inversions": {"grants": len(self.inversions), "first": self.inversions[:5]}}


_REFS = {"Lease": "exporterRef", "Exporter": "leaseRef"}
"""What an event of each kind may change: the exporter a lease is Ready on, the lease an exporter names."""


def scan_history(events: Iterable[Observed], grace: float = 2.0) -> HistoryReport:
    """Replay the history sample by sample (see the module's docstring). A grant is a priority inversion
    when, at the sample where it was decided, a lease of the same group with a higher priority had been
    Pending (live, not ended, no exporter in its status and none naming it: a lease already committed is
    not waiting) for at least `grace` seconds: a lease judged a moment ago may not have reached the
    exporter's queue yet. A grant is decided when an exporter first names the lease (its commit), not when
    the lease turns Ready: a leader stopped between the two leaves the Ready to the next one, and a lease
    that arrived in between did not lose the exporter to it."""
    result = HistoryReport()
    exporters: dict[str, dict[str, Any]] = {}
    leases: dict[str, dict[str, Any]] = {}
    ready_on: dict[str, set[str]] = defaultdict(set)  # exporter -> live leases Ready on it
    named_by: dict[str, set[str]] = defaultdict(set)  # lease -> exporters whose leaseRef names it
    waiting: dict[str, float] = {}  # lease -> seen when it started waiting
    committed: dict[str, float] = {}  # lease -> seen when an exporter began to name it
    last_seen = 0.0

    def ready_exporter(lease: dict[str, Any] | None) -> str | None:
        if lease and lease["ready"] and lease["exporterRef"] and not lease["ended"]:
            return str(lease["exporterRef"])
        return None

    def is_waiting(lease: dict[str, Any] | None) -> bool:
        return bool(lease and lease["pending"] and not lease["ready"] and not lease["ended"]
                    and not lease["exporterRef"])

    for event in sorted(events, key=lambda e: e.rv):
        name, last_seen = event.obj["name"], event.seen
        result.samples += 1
        if event.kind == "Exporter":
            old = exporters.pop(name, None)
            if old and old["leaseRef"]:
                named_by[old["leaseRef"]].discard(name)
            if event.type != "DELETED":
                exporters[name] = event.obj
                if event.obj["leaseRef"]:
                    named_by[event.obj["leaseRef"]].add(name)
                    committed.setdefault(event.obj["leaseRef"], event.seen)
            if old and old["leaseRef"] and not named_by[old["leaseRef"]]:
                committed.pop(old["leaseRef"], None)  # no longer named (a heartbeat that still names it is not)
        else:
            old = leases.pop(name, None)
            new = event.obj if event.type != "DELETED" else None
            if (was := ready_exporter(old)) is not None:
                ready_on[was].discard(name)
            if (now := ready_exporter(new)) is not None:
                ready_on[now].add(name)
                if was is None and new is not None:
                    result.grants += 1
                    _inversion(result, new, leases, {n: t for n, t in waiting.items() if not named_by.get(n)},
                               committed.get(name, event.seen), grace)
            if new is not None:
                leases[name] = new
            if is_waiting(new):
                waiting.setdefault(name, event.seen)
            else:
                waiting.pop(name, None)
        ref = _REFS[event.kind]
        touched = {str(x[ref]) for x in (old, event.obj) if x and x.get(ref)}
        ready_keys = touched if event.kind == "Lease" else set()
        named_keys = touched if event.kind == "Exporter" else set()
        result.double_ready.update({e for e in ready_keys | result.double_ready.open if len(ready_on[e]) > 1},
                                   event.seen)
        result.double_named.update({x for x in named_keys | result.double_named.open if len(named_by[x]) > 1},
                                   event.seen)
    result.double_ready.close(last_seen)
    result.double_named.close(last_seen)
    return result


def _inversion(result: HistoryReport, granted: dict[str, Any], leases: Mapping[str, dict[str, Any]],
               waiting: Mapping[str, float], seen: float, grace: float) -> None:
    for other, since in waiting.items():
        lease = leases.get(other)
        if (lease and lease["group"] == granted["group"] and lease["priority"] > granted["priority"]
                and seen - since >= grace):
            result.inversions.append(f"{granted['name']} (priority {granted['priority']}) got "
                                     f"{granted['exporterRef']} while {other} (priority {lease['priority']}) "
                                     f"had waited {seen - since:.1f}s")
            return


# --- the end state -------------------------------------------------------------------------------


def stranded(exporters: Iterable[Mapping[str, Any]], leases: Iterable[Mapping[str, Any]]) -> dict[str, list[str]]:
    """What must not be left once the attack is over and the operator had time to settle, by kind
    (objects given whole, as listed)."""
    ex = {e["name"]: e for e in map(slim_exporter, exporters)}
    ls = {x["name"]: x for x in map(slim_lease, leases)}
    found: dict[str, list[str]] = {k: [] for k in (
        "exporter_names_deleted_lease", "exporter_names_ended_lease", "exporter_names_lease_of_other_exporter",
        "lease_ready_on_exporter_not_naming_it", "lease_torn", "lease_waits_beside_free_exporter",
        "spot_holds_while_non_spot_waits", "ended_lease_without_label")}
    for e in ex.values():
        ref = e["leaseRef"]
        if ref is None:
            continue
        lease = ls.get(ref)
        if lease is None:
            found["exporter_names_deleted_lease"].append(f"{e['name']} -> {ref}")
        elif lease["ended"]:
            found["exporter_names_ended_lease"].append(f"{e['name']} -> {ref}")
        elif lease["exporterRef"] not in (None, e["name"]):
            found["exporter_names_lease_of_other_exporter"].append(f"{e['name']} -> {ref} (on {lease['exporterRef']})")
    free_groups = {e["group"] for e in ex.values() if e["free"] and e["leaseRef"] is None}
    spot_held = {x["group"] for x in ls.values() if x["spot"] and x["ready"] and not x["ended"]}
    for x in ls.values():
        if x["ended"]:
            if not x["endedLabel"]:
                found["ended_lease_without_label"].append(x["name"])
            continue
        if x["ready"] and x["exporterRef"] and (ex.get(x["exporterRef"]) or {}).get("leaseRef") != x["name"]:
            found["lease_ready_on_exporter_not_naming_it"].append(f"{x['name']} on {x['exporterRef']}")
        if x["exporterRef"] and not x["ready"]:
            found["lease_torn"].append(f"{x['name']} on {x['exporterRef']} ({x['readyReason'] or 'no Ready'})")
        if not x["ready"] and not x["exporterRef"]:
            if x["group"] in free_groups:
                found["lease_waits_beside_free_exporter"].append(x["name"])
            elif not x["spot"] and x["group"] in spot_held:
                found["spot_holds_while_non_spot_waits"].append(x["name"])
    return found


# --- the audit log -------------------------------------------------------------------------------


def _epoch(stamp: str) -> float:
    return dt.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()


@dataclass(frozen=True)
class Write:
    """One accepted write of a replica, from its audit event (stage ResponseComplete)."""

    user: str
    verb: str
    what: str  # resource[/subresource], e.g. exporters/status
    name: str
    received: float  # requestReceivedTimestamp, epoch seconds
    done: float  # stageTimestamp: the write was accepted before this

    @property
    def election(self) -> bool:
        return self.what == "leases.coordination.k8s.io" and self.name == LEADER_LEASE


REVIEW_GROUPS = frozenset({"authentication.k8s.io", "authorization.k8s.io"})
"""`create` of a SelfSubjectReview, TokenReview or SubjectAccessReview is a question, answered and not stored."""


def writes(audit: Iterable[Mapping[str, Any]], users: Iterable[str]) -> list[Write]:
    """The replicas' accepted (2xx) writes, by the time they were answered."""
    wanted = set(users)
    found = []
    for event in audit:
        user = (event.get("user") or {}).get("username", "")
        code = (event.get("responseStatus") or {}).get("code", 0)
        if (user not in wanted or event.get("stage") != "ResponseComplete" or event.get("verb") not in WRITE_VERBS
                or not 200 <= code < 300):
            continue
        ref = event.get("objectRef") or {}
        if ref.get("apiGroup") in REVIEW_GROUPS:
            continue  # a review (who am I, may I) stores nothing: not a write of anyone's state
        what = ref.get("resource", "") + (f".{ref['apiGroup']}" if ref.get("apiGroup") == "coordination.k8s.io"
                                          else "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
        found.append(Write(user, event["verb"], what, ref.get("name", ""), _epoch(event["requestReceivedTimestamp"]),
                           _epoch(event["stageTimestamp"])))
    return sorted(found, key=lambda w: w.done)


@dataclass
class Term:
    """A run of one replica's accepted writes of the leader Lease (acquire, renewals, release) with no
    other replica's in between; `first_write` is its first other write (None: it wrote nothing)."""

    user: str
    start: float
    renewals: list[float] = field(default_factory=list)  # requestReceived of each
    first_write: float | None = None


def terms(accepted: list[Write]) -> list[Term]:
    found: list[Term] = []
    for w in accepted:
        if w.election:
            if not found or found[-1].user != w.user:
                found.append(Term(w.user, w.done))
            found[-1].renewals.append(w.received)
    for w in accepted:
        if not w.election and (term := _term_of(found, w)) is not None and term.first_write is None:
            term.first_write = w.done
    return found


def _term_of(all_terms: list[Term], w: Write) -> Term | None:
    """The writer's latest term begun before the write was answered."""
    return next((t for t in reversed(all_terms) if t.user == w.user and t.start <= w.done), None)


def late_writes(accepted: list[Write], renew_deadline: float) -> dict[str, Any]:
    """Writes accepted from a replica after another replica's first write as leader, where "another"
    means a term that began after the writer's own latest term. Lateness: seconds past the writer's
    renew deadline (its term's last renewal as received plus `renew_deadline`)."""
    all_terms = terms(accepted)
    late: list[tuple[Write, float | None]] = []
    for w in accepted:
        if w.election:
            continue
        mine = _term_of(all_terms, w)
        newer = [t for t in all_terms if t.user != w.user and t.first_write is not None and t.first_write < w.done
                 and (mine is None or t.start > mine.start)]
        if not newer:
            continue
        renewals = [r for r in (mine.renewals if mine else ()) if r <= w.done]
        late.append((w, w.done - (renewals[-1] + renew_deadline) if renewals else None))
    by_what: dict[str, int] = defaultdict(int)
    for w, _ in late:
        by_what[f"{w.verb} {w.what}"] += 1
    past = [s for _, s in late if s is not None]
    return {"count": len(late), "by_request": dict(sorted(by_what.items())),
            "worst_seconds_past_renew_deadline": round(max(past), 2) if past else None,
            "first": [f"{w.user.rsplit(':', 1)[-1]} {w.verb} {w.what} {w.name}" for w, _ in late[:5]],
            "terms": len(all_terms)}


def writes_per_grant(accepted: list[Write], grants: int, since: float = 0.0) -> dict[str, Any]:
    """The replicas' accepted writes from `since` (the storm's first create, epoch seconds) per grant, by request,
    Events included (issue 37 counts them: at most 3). The leader Lease's renewals are not the work's, and the
    first start's writes (a condition per exporter, client and policy: one each) come before the work: both are
    left out, the start's counted apart by request."""
    by_what: dict[str, int] = defaultdict(int)
    before: dict[str, int] = defaultdict(int)
    for w in accepted:
        if not w.election:
            (before if w.done < since else by_what)[f"{w.verb} {w.what}"] += 1
    total, events = sum(by_what.values()), sum(v for k, v in by_what.items() if k.split()[1].startswith("events"))
    per = max(grants, 1)
    return {"per_grant": round(total / per, 3), "events_per_grant": round(events / per, 3), "grants": grants,
            "writes": total, "by_request_per_grant": {k: round(v / per, 3) for k, v in sorted(by_what.items())},
            "writes_before_storm": dict(sorted(before.items()))}


def failovers(accepted: list[Write], signals: Iterable[tuple[float, str]]) -> list[float | None]:
    """For each (wall-clock time, user) signal sent to the leader: seconds until another replica's first
    accepted write (not of the leader Lease); None if none came."""
    found: list[float | None] = []
    for at, user in signals:
        first = next((w.done for w in accepted if not w.election and w.user != user and w.done > at), None)
        found.append(round(first - at, 2) if first is not None else None)
    return found
