"""Policy resolution: which exporters a lease may have, through which policy, in what order.

Pure functions over typed values. The caller (the lease actor) gathers a
snapshot: the lease's request, the client's labels, the exporters of the
namespace as `ExporterView`s, and the namespace's policies compiled once into
a `PolicySet`; `resolve` answers with a terminal `Verdict` (the lease ends
`Invalid`/`Unsatisfiable`) or a `Plan`: the candidates in the order to ask
their exporter actors, and the `Pending` reason to show if none can be taken.

The rules, in the order they are applied (docs/leasing.md has them with
their reasons and the corner cases of the seed analysis):

- `exporterRef` pins one exporter: `ExporterNotFound`, `SelectorMismatch`,
  `ExporterDisabled` (unless `allowDisabled`). A selector matching no
  exporter is `ExporterNotFound`; one whose exporters are all disabled,
  `AllDisabled`.
- No policy in the namespace: every usable exporter is approved at
  priority 0, not spot. A missing Client is admitted by nothing (`NoAccess`).
- A policy rule approves an exporter when the policy's `exporterSelector`
  matches it, one of the rule's `from[].clientSelector`s matches the
  client, and the requested duration is within `maximumDuration` (an
  unbounded lease passes no limit). Each exporter keeps its best approval:
  non-spot before spot, then the highest priority.
- No approval: `DurationExceeded` when some rule admitted the client to a
  usable exporter but was too short (naming the longest limit), else
  `NoAccess` (listing the policies that exist).
- Candidates: free, then evictable (a spot holder, when this lease's
  approval is not spot; lowest-priority holder first), then leased, then
  free but not ready, then offline; within each, non-spot before spot,
  higher priority, then name. The `Pending` reason is the one of the first
  candidate's group: `NotAvailable`, `NotReady` or `Offline`; a begin in
  the future makes it `Scheduled`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import Enum
from typing import Any

from lessor.selectors import NOTHING, Selector, SelectorError, parse_selector
from lessor.templates.timestamps import format_timestamp, parse_timestamp

from .lease_spec import ConditionType, LeaseRequest, Reason, Verdict, format_go_duration, parse_go_duration

__all__ = [
    "OPEN_ACCESS",
    "READY_STATUSES",
    "AccessPolicy",
    "Approval",
    "Candidate",
    "ExporterView",
    "Holder",
    "Pending",
    "Plan",
    "PolicySet",
    "Rule",
    "State",
    "Verdict",
    "approvals",
    "compile_policies",
    "exporter_online",
    "exporter_ready",
    "resolve",
]

DEFAULT_HEARTBEAT_TIMEOUT = timedelta(seconds=60)
READY_STATUSES = frozenset({"Available", "Unspecified", ""})
"""`status.exporterStatus` values that mean ready for a new lease (absent counts as empty)."""

_LISTED = 5  # names listed in a message before "and N more"
_POLICIES_LISTED = 10


# --- exporters -------------------------------------------------------------------------------


def exporter_ready(exporter_status: str | None) -> bool:
    """`Available`, `Unspecified` or empty (or absent) mean ready; anything else (hooks running, Offline) not."""
    return (exporter_status or "") in READY_STATUSES


def exporter_online(
    last_seen: datetime | None, exporter_status: str | None, *, now: datetime,
    timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT,
) -> bool:
    """Online while the heartbeat is newer than `timeout` and the agent does not say `Offline`.

    A `lastSeen` ahead of `now` (clock skew) counts as fresh; no `lastSeen` as never seen.
    """
    if last_seen is None or exporter_status == "Offline":
        return False
    return now - last_seen < timeout


@dataclass(frozen=True, slots=True)
class Holder:
    """The lease that holds an exporter now, with the priority and spot flag it was granted with."""

    lease: str
    priority: int = 0
    spot: bool = False


@dataclass(frozen=True, slots=True)
class ExporterView:
    """What resolution needs to know of one exporter."""

    name: str
    labels: Mapping[str, str]
    enabled: bool = True
    online: bool = True
    ready: bool = True
    holder: Holder | None = None

    @classmethod
    def from_object(
        cls, exporter: Mapping[str, Any], *, now: datetime,
        heartbeat_timeout: timedelta = DEFAULT_HEARTBEAT_TIMEOUT, holder: Holder | None = None,
    ) -> ExporterView:
        """A view of an Exporter object at `now`.

        `holder` comes from the holding Lease's status; without it, a
        `status.leaseRef.name` is taken as a non-spot holder at priority 0,
        so a holder whose terms are unknown is never evicted.
        """
        metadata = exporter.get("metadata") or {}
        spec = exporter.get("spec") or {}
        status = exporter.get("status") or {}
        exporter_status = status.get("exporterStatus")
        exporter_status = exporter_status if isinstance(exporter_status, str) else ""
        try:
            last_seen = parse_timestamp(status["lastSeen"]) if isinstance(status.get("lastSeen"), str) else None
        except ValueError:
            last_seen = None
        if holder is None:
            lease_ref = status.get("leaseRef")
            name = lease_ref.get("name") if isinstance(lease_ref, Mapping) else None
            holder = Holder(name) if isinstance(name, str) and name else None
        return cls(
            name=metadata.get("name", ""),
            labels=metadata.get("labels") or {},
            enabled=spec.get("enabled") is not False,
            online=exporter_online(last_seen, exporter_status, now=now, timeout=heartbeat_timeout),
            ready=exporter_ready(exporter_status),
            holder=holder,
        )


# --- policies --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Approval:
    """The terms on which a lease may have an exporter: through one policy rule, or open access."""

    priority: int = 0
    spot: bool = False
    policy: str | None = None  # None: open access, no policy in the namespace
    rule: int | None = None
    description: str = ""

    @property
    def rank(self) -> tuple[bool, int, str, int]:
        """Smaller is better: non-spot before spot, then the highest priority (then a fixed tie-break)."""
        return (self.spot, -self.priority, self.policy or "", self.rule or 0)

    @property
    def where(self) -> str:
        if self.policy is None:
            return "open access (no ExporterAccessPolicy in the namespace)"
        return _where(self.policy, self.rule or 0, self.description)


OPEN_ACCESS = Approval()


def _where(policy: str, index: int, description: str) -> str:
    text = f"ExporterAccessPolicy {policy}, policies[{index}]"
    return f'{text} "{description}"' if description else text


@dataclass(frozen=True, slots=True)
class Rule:
    """One entry of `spec.policies[]`, compiled. A rule with a `problem` admits no one."""

    policy: str
    index: int
    description: str = ""
    priority: int = 0
    spot: bool = False
    maximum: timedelta | None = None
    clients: tuple[Selector, ...] = ()
    problem: str | None = None

    @property
    def approval(self) -> Approval:
        return Approval(self.priority, self.spot, self.policy, self.index, self.description)

    @property
    def where(self) -> str:
        return _where(self.policy, self.index, self.description)

    def admits(self, client_labels: Mapping[str, str]) -> bool:
        """An empty `from` admits no client; `clientSelector: {}` admits every client."""
        if self.problem is not None:
            return False
        for selector in self.clients:
            if selector.matches(client_labels):
                return True
        return False

    def allows(self, requested: timedelta | None) -> bool:
        """Within `maximumDuration`; an unbounded request (None) passes no limit."""
        return self.maximum is None or (requested is not None and requested <= self.maximum)


@dataclass(frozen=True, slots=True)
class AccessPolicy:
    """One ExporterAccessPolicy, compiled. A missing or broken `exporterSelector` matches no exporter."""

    name: str
    exporters: Selector
    rules: tuple[Rule, ...] = ()
    problem: str | None = None


_MEMO_LIMIT = 65_536


@dataclass(frozen=True, slots=True)
class PolicySet:
    """The policies of one namespace, compiled once, in name order.

    Which policies apply to an exporter depends only on its labels, so the
    answer is remembered per label set: thousands of leases resolved against
    the same exporters match each exporter's labels against the policies once.
    """

    policies: tuple[AccessPolicy, ...] = ()
    _applying: dict[frozenset[tuple[str, str]], tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )

    @property
    def open(self) -> bool:
        """No policy at all: open access at priority 0, not spot."""
        return not self.policies

    def applying_to(self, labels: Mapping[str, str]) -> tuple[int, ...]:
        """Positions (in `policies`) of the policies whose `exporterSelector` matches these labels."""
        key = frozenset(labels.items())
        found = self._applying.get(key)
        if found is None:
            found = tuple(
                position for position, policy in enumerate(self.policies)
                if policy.problem is None and policy.exporters.matches(labels)
            )
            if len(self._applying) >= _MEMO_LIMIT:
                self._applying.clear()
            self._applying[key] = found
        return found


def compile_policies(objects: Iterable[Mapping[str, Any]]) -> PolicySet:
    """Compile ExporterAccessPolicy objects; broken parts admit no one and say why (admission refuses them)."""
    compiled = [_compile_policy(obj) for obj in objects]
    compiled.sort(key=lambda policy: policy.name)
    return PolicySet(tuple(compiled))


def _compile_policy(obj: Mapping[str, Any]) -> AccessPolicy:
    name = str((obj.get("metadata") or {}).get("name") or "")
    spec = obj.get("spec") if isinstance(obj.get("spec"), Mapping) else {}
    problem = None
    try:
        exporters = parse_selector(spec.get("exporterSelector"), "spec.exporterSelector")
    except SelectorError as err:
        exporters, problem = NOTHING, str(err)
    if spec.get("exporterSelector") is None:
        problem = "spec.exporterSelector: missing: the policy applies to no exporter"
    raw_rules = spec.get("policies")
    rules = tuple(
        _compile_rule(name, index, raw) for index, raw in enumerate(raw_rules if isinstance(raw_rules, list) else ())
    )
    return AccessPolicy(name, exporters, rules, problem)


def _compile_rule(policy: str, index: int, raw: Any) -> Rule:
    field = f"spec.policies[{index}]"
    if not isinstance(raw, Mapping):
        return Rule(policy, index, problem=f"{field}: must be an object")
    description = raw.get("description") if isinstance(raw.get("description"), str) else ""
    problems: list[str] = []
    priority = raw.get("priority", 0)
    if priority is None:
        priority = 0
    if not isinstance(priority, int) or isinstance(priority, bool):
        problems.append(f"{field}.priority: must be an integer")
        priority = 0
    spot = raw.get("spotAccess") is True
    maximum = None
    if raw.get("maximumDuration") is not None:
        try:
            maximum = parse_go_duration(raw["maximumDuration"], f"{field}.maximumDuration")
        except ValueError as err:
            problems.append(str(err))
        else:
            if maximum <= timedelta(0):
                problems.append(f"{field}.maximumDuration: must be positive, not {raw['maximumDuration']}")
    clients: list[Selector] = []
    sources = raw.get("from")
    for position, source in enumerate(sources if isinstance(sources, list) else ()):
        where = f"{field}.from[{position}].clientSelector"
        try:
            clients.append(parse_selector(source.get("clientSelector") if isinstance(source, Mapping) else None, where))
        except SelectorError as err:
            problems.append(str(err))
    if not problems and all(selector.nothing for selector in clients):
        # Not malformed, but it can never apply: say so where NoAccess lists the policies.
        problems.append(f"{field}.from: empty: the rule admits no client" if not clients else
                        f"{field}.from: no entry has a clientSelector: the rule admits no client")
    return Rule(policy, index, description, priority, spot, maximum, tuple(clients),
                "; ".join(problems) if problems else None)


def approvals(
    exporters: Sequence[ExporterView], client_labels: Mapping[str, str], policies: PolicySet,
    requested: timedelta | None,
) -> tuple[dict[str, Approval], list[Rule]]:
    """Each exporter's best approval for this client and duration, and the rules closed only by `maximumDuration`.

    Per exporter the work is one `exporterSelector` match per policy that
    admits the client: the best approval of each policy is found once.
    """
    if policies.open:
        return {exporter.name: OPEN_ACCESS for exporter in exporters}, []
    # Per policy (by position): its best approval for this client and duration, and its rules too short.
    relevant: list[tuple[Approval | None, list[Rule]] | None] = []
    for policy in policies.policies:
        best: Approval | None = None
        too_short: list[Rule] = []
        for rule in policy.rules:
            if not rule.admits(client_labels):
                continue
            if not rule.allows(requested):
                too_short.append(rule)
                continue
            approval = rule.approval
            if best is None or approval.rank < best.rank:
                best = approval
        relevant.append((best, too_short) if best is not None or too_short else None)

    approved: dict[str, Approval] = {}
    hit = [False] * len(relevant)
    for exporter in exporters:
        best = None
        for position in policies.applying_to(exporter.labels):
            entry = relevant[position]
            if entry is None:
                continue
            hit[position] = True
            approval = entry[0]
            if approval is not None and (best is None or approval.rank < best.rank):
                best = approval
        if best is not None:
            approved[exporter.name] = best
    closed = [rule for position, entry in enumerate(relevant) if hit[position] and entry for rule in entry[1]]
    return approved, closed


# --- resolution ------------------------------------------------------------------------------


class State(Enum):
    """Where a candidate stands for this lease, best first."""

    FREE = 0  # online, ready and unheld (or held by this very lease): can be granted now
    EVICTABLE = 1  # held by a spot lease and this lease's approval is not spot: can be taken by eviction
    HELD = 2  # leased to someone this lease cannot evict: wait in its queue
    NOT_READY = 3  # unheld but its exporterStatus is not ready (hooks running)
    OFFLINE = 4  # no recent heartbeat, or exporterStatus Offline

    @property
    def pending(self) -> Reason:
        """The Pending reason when the best candidate is in this state and cannot be had."""
        if self is State.OFFLINE:
            return Reason.OFFLINE
        if self is State.NOT_READY:
            return Reason.NOT_READY
        return Reason.NOT_AVAILABLE  # free or evictable ones that were taken first end up leased


@dataclass(frozen=True, slots=True)
class Candidate:
    exporter: str
    priority: int
    spot: bool
    state: State
    holder: Holder | None = None
    policy: str | None = None
    rule: int | None = None

    @property
    def free(self) -> bool:
        return self.state is State.FREE

    @property
    def takeable(self) -> bool:
        return self.state is State.FREE or self.state is State.EVICTABLE

    @property
    def evicts(self) -> str | None:
        """The spot lease to evict to take this exporter, if that is how it is taken."""
        return self.holder.lease if self.state is State.EVICTABLE and self.holder else None

    @property
    def sort_key(self) -> tuple[int, int, bool, int, str]:
        """State first (free before leased), lowest-priority spot holder first among evictions,
        then non-spot before spot, higher priority, name."""
        holder_priority = self.holder.priority if self.state is State.EVICTABLE and self.holder else 0
        return (self.state.value, holder_priority, self.spot, -self.priority, self.exporter)


@dataclass(frozen=True, slots=True)
class Pending:
    reason: Reason
    message: str

    type = ConditionType.PENDING


@dataclass(frozen=True, slots=True)
class Plan:
    """The candidates, best first, and the Pending reason if none of them can be had now.

    With `scheduled_until` set the lease is `Scheduled`: take nothing before
    then, and resolve again at that time (exporters change meanwhile).
    """

    candidates: tuple[Candidate, ...]
    pending: Pending
    scheduled_until: datetime | None = None

    @property
    def takeable(self) -> tuple[Candidate, ...]:
        if self.scheduled_until is not None:
            return ()
        return tuple(candidate for candidate in self.candidates if candidate.takeable)


def resolve(
    request: LeaseRequest,
    client_labels: Mapping[str, str] | None,
    exporters: Iterable[ExporterView],
    policies: PolicySet,
    *,
    now: datetime,
) -> Verdict | Plan:
    """Resolve a valid lease request against a snapshot of its namespace.

    `client_labels` is None when the Client named by `spec.clientRef` does not exist.
    """
    usable = _usable(request, exporters)
    if isinstance(usable, Verdict):
        return usable
    if client_labels is None:
        return Verdict(ConditionType.UNSATISFIABLE, Reason.NO_ACCESS,
                       f"spec.clientRef.name: there is no Client {request.client} in the namespace")

    requested = request.requested_duration(now)
    approved, closed = approvals(usable, client_labels, policies, requested)
    if not approved:
        if closed:
            return _duration_exceeded(request, closed, now)
        return _no_access(request, client_labels, usable, policies)

    candidates = []
    for exporter in usable:
        approval = approved.pop(exporter.name, None)  # pop: a name given twice is a candidate once
        if approval is None:
            continue
        state = _state(exporter, approval, own=request.name)
        candidates.append(Candidate(exporter.name, approval.priority, approval.spot, state, exporter.holder,
                                    approval.policy, approval.rule))
    candidates.sort(key=lambda candidate: candidate.sort_key)
    ordered = tuple(candidates)

    if request.scheduled(now):
        assert request.begin is not None
        if "beginTime" in request.given:
            where = f"spec.beginTime: the lease begins at {format_timestamp(request.begin)}"
        else:
            where = f"spec.endTime - spec.duration: the lease begins at {format_timestamp(request.begin)}"
        pending = Pending(Reason.SCHEDULED, f"{where}; it is resolved again then")
        return Plan(ordered, pending, request.begin)
    return Plan(ordered, _pending(ordered))


def _usable(request: LeaseRequest, exporters: Iterable[ExporterView]) -> list[ExporterView] | Verdict:
    unsatisfiable = ConditionType.UNSATISFIABLE
    if request.exporter_ref is not None:
        name = request.exporter_ref
        pinned = next((exporter for exporter in exporters if exporter.name == name), None)
        if pinned is None:
            return Verdict(unsatisfiable, Reason.EXPORTER_NOT_FOUND,
                           f"spec.exporterRef.name: there is no exporter {name} in the namespace")
        if request.selector is not None and not request.selector.matches(pinned.labels):
            return Verdict(unsatisfiable, Reason.SELECTOR_MISMATCH,
                           f"spec.exporterRef.name: exporter {name} (labels {_labels(pinned.labels)}) does not "
                           f"match spec.selector ({request.selector})")
        if not pinned.enabled and not request.allow_disabled:
            return Verdict(unsatisfiable, Reason.EXPORTER_DISABLED,
                           f"spec.exporterRef.name: exporter {name} is disabled (spec.enabled: false); "
                           "set spec.allowDisabled to lease it anyway")
        return [pinned]
    selector = request.selector
    assert selector is not None, "parse_lease refuses a lease with neither selector nor exporterRef"
    matching = [exporter for exporter in exporters if selector.matches(exporter.labels)]
    if not matching:
        return Verdict(unsatisfiable, Reason.EXPORTER_NOT_FOUND,
                       f"spec.selector: no exporter in the namespace matches {selector}")
    if request.allow_disabled:
        return matching
    enabled = [exporter for exporter in matching if exporter.enabled]
    if not enabled:
        return Verdict(unsatisfiable, Reason.ALL_DISABLED,
                       f"spec.selector: every exporter matching {selector} is disabled "
                       f"({_names([exporter.name for exporter in matching])}); "
                       "set spec.allowDisabled to lease them anyway")
    return enabled


def _state(exporter: ExporterView, approval: Approval, *, own: str) -> State:
    if not exporter.online:
        return State.OFFLINE
    holder = exporter.holder
    if holder is not None and holder.lease != own:
        return State.EVICTABLE if holder.spot and not approval.spot else State.HELD
    if holder is None and not exporter.ready:
        return State.NOT_READY
    return State.FREE


_WORDS = {
    State.FREE: "free a moment ago",
    State.EVICTABLE: "leased with spot access",
    State.HELD: "leased",
    State.NOT_READY: "not ready for a new lease (hooks running)",
    State.OFFLINE: "offline",
}
_WAITS = {
    Reason.NOT_AVAILABLE: "the lease waits, queued by priority then age",
    Reason.NOT_READY: "the lease waits for one to report Available",
    Reason.OFFLINE: "the lease waits for one to come online",
}


def _pending(candidates: Sequence[Candidate]) -> Pending:
    """The reason of the best candidate's state, with every candidate's state in the message."""
    reason = candidates[0].state.pending
    by_state: dict[State, list[str]] = {}
    for candidate in candidates:
        by_state.setdefault(candidate.state, []).append(candidate.exporter)
    states = "; ".join(f"{_WORDS[state]}: {_names(by_state[state])}" for state in State if state in by_state)
    subject = "the approved exporter cannot" if len(candidates) == 1 else \
        f"none of the {len(candidates)} approved exporters can"
    return Pending(reason, f"{subject} be granted now ({states}); {_WAITS[reason]}")


def _duration_exceeded(request: LeaseRequest, closed: Sequence[Rule], now: datetime) -> Verdict:
    longest = max(closed, key=lambda rule: (rule.maximum or timedelta(0), rule.priority))
    assert longest.maximum is not None
    asked = request.describe_duration(now)
    field = "spec.endTime" if "endTime" in request.given and "duration" not in request.given else "spec.duration"
    return Verdict(
        ConditionType.UNSATISFIABLE, Reason.DURATION_EXCEEDED,
        f"{field}: the lease asks for {asked}, longer than the policies that admit client {request.client} "
        f"allow: the longest allowed is {format_go_duration(longest.maximum)} ({longest.where})",
    )


def _no_access(
    request: LeaseRequest, client_labels: Mapping[str, str], usable: Sequence[ExporterView], policies: PolicySet,
) -> Verdict:
    what = (f"exporter {usable[0].name}" if request.exporter_ref is not None
            else f"any of the {len(usable)} exporters matching spec.selector ({request.selector})")
    listed = []
    for policy in policies.policies[:_POLICIES_LISTED]:
        rules = [_describe_rule(rule) for rule in policy.rules] or ["no rules"]
        broken = f" (ignored: {policy.problem})" if policy.problem else ""
        listed.append(f"{policy.name}{broken}: {'; '.join(rules)}")
    more = len(policies.policies) - _POLICIES_LISTED
    if more > 0:
        listed.append(f"and {more} more")
    return Verdict(
        ConditionType.UNSATISFIABLE, Reason.NO_ACCESS,
        f"spec.clientRef.name: no ExporterAccessPolicy admits client {request.client} "
        f"(labels {_labels(client_labels)}) to {what}; the policies in the namespace: " + " | ".join(listed),
    )


def _describe_rule(rule: Rule) -> str:
    text = f"policies[{rule.index}]"
    if rule.description:
        text += f' "{rule.description}"'
    if rule.problem:
        text += f" (admits no one: {rule.problem})"
    return text


def _labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) or "none"


def _names(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")
