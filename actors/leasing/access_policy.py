"""ExporterAccessPolicies compiled, and what they approve: which exporters a client may lease, on what terms.

Pure functions over typed values. `compile_policy` compiles one policy
object; `PolicySet.of` gathers a namespace's compiled policies into the set
that leases resolve against. The operator's topology keeps one `PolicySet`
per namespace and rebuilds it only when one of its policies changes, so every
lease shares the set and its memos (`lessor/app/topology_questions.py`).
`compile_policies` does both at once for callers without the topology (the
webhook): with the caller's `PolicyMemo`, a policy object is compiled once per
(uid, resourceVersion) and a set is reused for the same versions. `approvals` answers, for one client
and requested duration, each exporter's best `Approval` (non-spot before
spot, then the highest priority) and the rules that admitted the client but
were too short. `resolution.resolve` ranks the approved exporters. A
broken part compiles to a rule or policy with a `problem` that admits no one
(`leasing/validity.policy_errors` is what reports broken policies to their authors).

A rule approves an exporter when its policy's `exporterSelector` matches the
exporter, one of the rule's `from[].clientSelector`s matches the client, and
the requested duration is within `maximumDuration` (an unbounded lease passes
no limit). No policy in the namespace is open access: every exporter at
priority 0, not spot.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.views.leasing import PolicyView
from lessor.model.selectors import NOTHING, Operator, Selector, SelectorError, parse_selector

from .exporter_state import ExporterState
from .spec import parse_go_duration

__all__ = [
    "OPEN_ACCESS",
    "AccessPolicy",
    "Approval",
    "PolicyMemo",
    "PolicySet",
    "Rule",
    "approvals",
    "compile_policies",
    "compile_policy",
    "too_short_for",
]


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
    """The policies of one namespace, compiled once, in name order. Immutable once built, shared by every lease.

    Which policies apply to an exporter depends only on its labels, so the
    answer is remembered per label set: thousands of leases resolved against
    the same exporters match each exporter's labels against the policies once.
    A label set not seen yet is matched only against the policies an index of
    the exporter selectors says can match it, not against every policy.
    """

    policies: tuple[AccessPolicy, ...] = ()
    _applying: dict[frozenset[tuple[str, str]], tuple[int, ...]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _relevant: dict[tuple[frozenset[tuple[str, str]], timedelta | None], dict[int, _Relevant]] = field(
        default_factory=dict, compare=False, repr=False
    )
    _by_client: list[_ClientIndex] = field(default_factory=list, compare=False, repr=False)
    _by_exporter: list[_ExporterIndex] = field(default_factory=list, compare=False, repr=False)

    @staticmethod
    def of(policies: Iterable[AccessPolicy]) -> PolicySet:
        """A set of compiled policies, put in name order (the order rules are tried and listed in)."""
        return PolicySet(tuple(sorted(policies, key=lambda policy: policy.name)))

    @property
    def open(self) -> bool:
        """No policy at all: open access at priority 0, not spot."""
        return not self.policies

    def applying_to(self, labels: Mapping[str, str]) -> tuple[int, ...]:
        """Positions (in `policies`) of the policies whose `exporterSelector` matches these labels."""
        key = frozenset(labels.items())
        found = self._applying.get(key)
        if found is None:
            if not self._by_exporter:
                self._by_exporter.append(_ExporterIndex.of(self.policies))
            policies = self.policies
            found = tuple(
                position for position in sorted(self._by_exporter[0].candidates(labels))
                if policies[position].exporters.matches(labels)
            )
            if len(self._applying) >= _MEMO_LIMIT:
                self._applying.clear()
            self._applying[key] = found
        return found

    def relevant_to(self, client_labels: Mapping[str, str], requested: timedelta | None) -> dict[int, _Relevant]:
        """Per policy (by position) with a rule admitting this client: its best approval for this duration and its
        rules too short. Only the policies a client-selector index says can admit the client are looked at, and
        the answer is remembered per client label set and duration, so a lease costs O(policies that can match)."""
        key = (frozenset(client_labels.items()), requested)
        found = self._relevant.get(key)
        if found is None:
            if not self._by_client:
                self._by_client.append(_ClientIndex.of(self.policies))
            found = {}
            for position in sorted(self._by_client[0].candidates(client_labels)):
                if (entry := _relevant(self.policies[position], client_labels, requested)) is not None:
                    found[position] = entry
            if len(self._relevant) >= _MEMO_LIMIT:
                self._relevant.clear()
            self._relevant[key] = found
        return found


@dataclass(frozen=True, slots=True)
class _ClientIndex:
    """Which policies can admit a client: by a label (key, value) every selector of a rule requires (an `In`
    requirement), plus the policies with a selector that requires none (`{}` or only other operators)."""

    by_label: dict[tuple[str, str], frozenset[int]]
    always: frozenset[int]

    @staticmethod
    def of(policies: Sequence[AccessPolicy]) -> _ClientIndex:
        by_label: dict[tuple[str, str], set[int]] = {}
        always: set[int] = set()
        for position, policy in enumerate(policies):
            if policy.problem is not None:
                continue
            for rule in policy.rules:
                if rule.problem is not None:
                    continue
                for selector in rule.clients:
                    if selector.nothing:
                        continue
                    requirement = next((r for r in selector.requirements if r.operator == Operator.IN), None)
                    if requirement is None:
                        always.add(position)
                    else:
                        for value in requirement.values:
                            by_label.setdefault((requirement.key, value), set()).add(position)
        return _ClientIndex({label: frozenset(found) for label, found in by_label.items()}, frozenset(always))

    def candidates(self, labels: Mapping[str, str]) -> set[int]:
        found = set(self.always)
        for label in labels.items():
            found.update(self.by_label.get(label, ()))
        return found


@dataclass(frozen=True, slots=True)
class _ExporterIndex:
    """Which policies' `exporterSelector` can match a label set. Each selector is filed under one positive
    requirement it cannot match without: an `In` (under each of its values) or an `Exists` (under its key),
    the one shared by the fewest policies; a selector without one (`{}`, negative-only) is always tried.
    Broken policies and nil selectors match nothing and are not filed at all."""

    by_label: dict[tuple[str, str], frozenset[int]]
    by_key: dict[str, frozenset[int]]
    always: frozenset[int]

    @staticmethod
    def of(policies: Sequence[AccessPolicy]) -> _ExporterIndex:
        filed = [(position, policy.exporters) for position, policy in enumerate(policies)
                 if policy.problem is None and not policy.exporters.nothing]
        shared: dict[tuple[str, str | None], int] = {}  # how many selectors require this pair (or key)
        for _, selector in filed:
            for requirement in selector.requirements:
                if requirement.operator == Operator.IN:
                    for value in requirement.values:
                        shared[requirement.key, value] = shared.get((requirement.key, value), 0) + 1
                elif requirement.operator == Operator.EXISTS:
                    shared[requirement.key, None] = shared.get((requirement.key, None), 0) + 1
        by_label: dict[tuple[str, str], set[int]] = {}
        by_key: dict[str, set[int]] = {}
        always: set[int] = set()
        for position, selector in filed:
            best, cost = None, 0
            for requirement in selector.requirements:
                if requirement.operator == Operator.IN:
                    here = sum(shared[requirement.key, value] for value in requirement.values)
                elif requirement.operator == Operator.EXISTS:
                    here = shared[requirement.key, None]
                else:
                    continue
                if best is None or here < cost:
                    best, cost = requirement, here
            if best is None:
                always.add(position)
            elif best.operator == Operator.IN:
                for value in best.values:
                    by_label.setdefault((best.key, value), set()).add(position)
            else:
                by_key.setdefault(best.key, set()).add(position)
        return _ExporterIndex({label: frozenset(found) for label, found in by_label.items()},
                              {key: frozenset(found) for key, found in by_key.items()}, frozenset(always))

    def candidates(self, labels: Mapping[str, str]) -> set[int]:
        found = set(self.always)
        for label in labels.items():
            if (filed := self.by_label.get(label)) is not None:
                found |= filed
            if (keyed := self.by_key.get(label[0])) is not None:
                found |= keyed
        return found


_Relevant = tuple[Approval | None, tuple[Rule, ...]]


def _relevant(policy: AccessPolicy, client_labels: Mapping[str, str], requested: timedelta | None) -> _Relevant | None:
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
    return (best, tuple(too_short)) if best is not None or too_short else None


_CACHE_LIMIT = 4_096


def _version(obj: Mapping[str, Any]) -> tuple[str, str, str] | None:
    metadata = mapping_at(obj, "metadata")
    uid, version = metadata.get("uid"), metadata.get("resourceVersion")
    if not isinstance(uid, str) or not isinstance(version, str) or not uid or not version:
        return None  # not from the API server (a test's or the webhook's draft): compile it afresh
    return uid, version, str(metadata.get("name") or "")


def _remember(cache: dict[Any, Any], key: Any, value: Any) -> None:
    if len(cache) >= _CACHE_LIMIT:
        cache.pop(next(iter(cache)))  # the oldest entry: versions only grow
    cache[key] = value


class PolicyMemo:
    """Policy versions and sets compiled before, kept by their caller (the webhook's lease checker), at most
    `_CACHE_LIMIT` of each: never process-wide, so two operators in one process share nothing (their API
    servers may well number their versions alike)."""

    __slots__ = ("compiled", "sets")

    def __init__(self) -> None:
        self.compiled: dict[tuple[str, str, str], AccessPolicy] = {}
        """Each policy version compiled once (immutable): keyed by (uid, resourceVersion, name)."""
        self.sets: dict[tuple[tuple[str, str, str], ...], PolicySet] = {}
        """Each set of policy versions compiled once, so its memos serve every check that sees the same versions."""


def compile_policies(objects: Iterable[Mapping[str, Any]], memo: PolicyMemo | None = None) -> PolicySet:
    """Compile ExporterAccessPolicy objects; broken parts admit no one and say why (admission refuses them).

    With a `memo`, objects from the API server (with uid and resourceVersion) are compiled once per version, and
    the same versions give back the same `PolicySet`; the result must be treated as immutable."""
    objects = list(objects)
    versions = [_version(obj) for obj in objects] if memo is not None else [None for _ in objects]
    whole = tuple(sorted(v for v in versions if v is not None)) if memo is not None and all(versions) else None
    if memo is not None and whole is not None and (known := memo.sets.get(whole)) is not None:
        return known
    compiled = []
    for obj, version in zip(objects, versions):
        policy = memo.compiled.get(version) if memo is not None and version is not None else None
        if policy is None:
            policy = compile_policy(PolicyView.of(obj))
            if memo is not None and version is not None:
                _remember(memo.compiled, version, policy)
        compiled.append(policy)
    result = PolicySet.of(compiled)
    if memo is not None and whole is not None:
        _remember(memo.sets, whole, result)
    return result


def compile_policy(policy: PolicyView) -> AccessPolicy:
    """One ExporterAccessPolicy, compiled; a broken part admits no one and says why."""
    name = policy.name
    problem = None
    try:
        exporters = parse_selector(policy.exporter_selector, "spec.exporterSelector")
    except SelectorError as err:
        exporters, problem = NOTHING, str(err)
    if policy.exporter_selector is None:
        problem = "spec.exporterSelector: missing: the policy applies to no exporter"
    rules = tuple(_compile_rule(name, index, raw) for index, raw in enumerate(policy.rules))
    return AccessPolicy(name, exporters, rules, problem)


def _compile_rule(policy: str, index: int, raw: Any) -> Rule:
    field = f"spec.policies[{index}]"
    if not isinstance(raw, Mapping):
        return Rule(policy, index, problem=f"{field}: must be an object")
    description = str(raw.get("description")) if isinstance(raw.get("description"), str) else ""
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
    exporters: Sequence[ExporterState], client_labels: Mapping[str, str], policies: PolicySet,
    requested: timedelta | None,
) -> tuple[dict[str, Approval], list[Rule]]:
    """Each exporter's best approval for this client and duration, and the rules closed only by `maximumDuration`.

    Per exporter the work is one `exporterSelector` match per policy that
    admits the client: the best approval of each policy is found once.
    """
    if policies.open:
        return {exporter.name: OPEN_ACCESS for exporter in exporters}, []
    relevant = policies.relevant_to(client_labels, requested)

    approved: dict[str, Approval] = {}
    hit: set[int] = set()
    for exporter in exporters:
        best = None
        for position in policies.applying_to(exporter.labels):
            entry = relevant.get(position)
            if entry is None:
                continue
            hit.add(position)
            approval = entry[0]
            if approval is not None and (best is None or approval.rank < best.rank):
                best = approval
        if best is not None:
            approved[exporter.name] = best
    closed = [rule for position in sorted(hit) for rule in relevant[position][1]]
    return approved, closed


def too_short_for(client_labels: Mapping[str, str], policies: PolicySet, requested: timedelta | None) -> list[Rule]:
    """The rules admitting the client, when every one of them is too short for `requested` (else none).

    Then `approvals` approves no exporter for this client and duration,
    whichever exporters there are: the lease can only end `DurationExceeded`
    (or `NoAccess`). The webhook refuses such a lease at admission; it does not
    know the exporters, so it refuses nothing that depends on them.
    """
    admitting = [rule for policy in policies.policies if policy.problem is None
                 for rule in policy.rules if rule.admits(client_labels)]
    if any(rule.allows(requested) for rule in admitting):
        return []
    return admitting
