"""The words of a lease's `Pending` and `Unsatisfiable` conditions: what the user reads, nothing decided here.

`resolution` decides the reason; these functions say it, naming the
field to change and listing what was considered (a few names, then "and N
more"), so a message stays short in a namespace of thousands.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING

from lessor.templates.timestamps import format_timestamp

from .spec import LeaseRequest, Reason, format_go_duration

if TYPE_CHECKING:
    from .access_policy import AccessPolicy, PolicySet, Rule
    from .exporter_state import ExporterState
    from .resolution import Candidate, State

__all__ = [
    "ALLOW_DISABLED_HINT",
    "describe_rule",
    "duration_exceeded_message",
    "list_labels",
    "list_names",
    "no_access_message",
    "no_client_message",
    "pending_message",
    "scheduled_message",
]

_LISTED = 5  # names listed in a message before "and N more"
_POLICIES_LISTED = 10

_WAITS = {
    Reason.NOT_AVAILABLE: "the lease waits, queued by priority then age",
    Reason.NOT_READY: "the lease waits for one to report Available",
    Reason.OFFLINE: "the lease waits for one to come online",
}
# Jumpstarter's controller says these words, and users' scripts and runbooks grep for them (docs/migrating.md):
# each Pending message carries its reason's phrase verbatim.
_PHRASES = {
    Reason.OFFLINE: "but none of them are online",
    Reason.NOT_READY: "but none are ready for a new lease",
    Reason.NOT_AVAILABLE: "but all of them are already leased",
}
ALLOW_DISABLED_HINT = "set spec.allowDisabled: true (jmp create lease --allow-disabled) to lease {} anyway"


def pending_message(candidates: Sequence[Candidate], reason: Reason) -> str:
    """How many exporters are approved, the reason's phrase, every candidate's state (best first), and what the
    lease waits for. `NotAvailable` says "or cannot be leased now" too when some candidates are offline or not
    ready, so the phrase is never the whole of a false statement."""
    by_state: dict[State, list[str]] = {}
    for candidate in candidates:
        by_state.setdefault(candidate.state, []).append(candidate.exporter)
    states = "; ".join(f"{state.words}: {list_names(by_state[state])}"
                       for state in sorted(by_state, key=lambda state: state.value))
    count = len(candidates)
    phrase = _PHRASES[reason]
    if reason is Reason.NOT_AVAILABLE and any(not candidate.takeable and candidate.state.pending is not reason
                                              for candidate in candidates):
        phrase += " or cannot be leased now"
    subject = f"{count} approved exporter{'' if count == 1 else 's'} for this lease"
    return f"{subject}, {phrase} ({states}); {_WAITS[reason]}"


def scheduled_message(request: LeaseRequest) -> str:
    """A lease whose begin is in the future: where that begin comes from."""
    assert request.begin is not None
    if "beginTime" in request.given:
        where = f"spec.beginTime: the lease begins at {format_timestamp(request.begin)}"
    else:
        where = f"spec.endTime - spec.duration: the lease begins at {format_timestamp(request.begin)}"
    return f"{where}; it is resolved again then"


def duration_exceeded_message(request: LeaseRequest, longest: Rule, now: datetime) -> str:
    """The lease asks for longer than every rule that admits its client; `longest` is the most generous."""
    assert longest.maximum is not None
    asked = request.describe_duration(now)
    field = "spec.endTime" if "endTime" in request.given and "duration" not in request.given else "spec.duration"
    return (f"{field}: the lease asks for {asked}, longer than the policies that admit client {request.client} "
            f"allow: the longest allowed is {format_go_duration(longest.maximum)} ({longest.where})")


def no_client_message(request: LeaseRequest) -> str:
    """The Client named by `spec.clientRef` does not exist: `NoAccess`, which ends the lease like every
    `Unsatisfiable`. Said outright, because creating the Client later does not bring this lease back."""
    return (f"spec.clientRef.name: there is no Client {request.client} in the namespace; this lease has ended "
            f"and creating the Client will not revive it: create the Client {request.client}, then a new lease")


def no_access_message(
    request: LeaseRequest, client_labels: Mapping[str, str], usable: Sequence[ExporterState], policies: PolicySet,
) -> str:
    """No rule admits the client to any usable exporter: the policies that apply to those exporters
    ("Matching policies:", Jumpstarter's words, with each rule and its description), then the others."""
    what = (f"exporter {usable[0].name} exists" if request.exporter_ref is not None
            else f"{len(usable)} exporter{' matches' if len(usable) == 1 else 's match'} spec.selector "
                 f"({request.selector})")
    matching = [policy for policy in policies.policies
                if policy.problem is None and any(policy.exporters.matches(e.labels) for e in usable)]
    others = [policy for policy in policies.policies if policy not in matching]
    text = (f"spec.clientRef.name: {what}, but none of them are approved by any policy for client {request.client} "
            f"(labels {list_labels(client_labels)})")
    if matching:
        text += ". Matching policies: " + _list_policies(matching)
    if others:
        text += (". Other policies in the namespace (they apply to none of these exporters): "
                 if matching else ". No policy applies to these exporters; the policies in the namespace: ")
        text += _list_policies(others)
    return text


def _list_policies(policies: Sequence[AccessPolicy]) -> str:
    """Each policy with its rules (descriptions quoted), `; ` between policies; a few, then "and N more"."""
    listed = []
    for policy in policies[:_POLICIES_LISTED]:
        rules = [describe_rule(rule) for rule in policy.rules] or ["no rules"]
        broken = f" (ignored: {policy.problem})" if policy.problem else ""
        listed.append(f"{policy.name}{broken}: {', '.join(rules)}")
    more = len(policies) - _POLICIES_LISTED
    if more > 0:
        listed.append(f"and {more} more")
    return "; ".join(listed)


def describe_rule(rule: Rule) -> str:
    text = f"policies[{rule.index}]"
    if rule.description:
        text += f' "{rule.description}"'
    if rule.problem:
        text += f" (admits no one: {rule.problem})"
    return text


def summarize_policy(policy: AccessPolicy) -> str:
    """What a valid policy grants, for its `Valid` message (the Message column of `kubectl get eap`)."""
    rules = [_summarize_rule(rule) for rule in policy.rules]
    return (f"exporters {str(policy.exporters) or 'all'}: " + " | ".join(rules)) if rules else "no rules: admits no one"


def _summarize_rule(rule: Rule) -> str:
    clients = " or ".join(str(selector) or "any client" for selector in rule.clients)
    terms = [f"priority {rule.priority}"] + (["spot"] if rule.spot else [])
    if rule.maximum is not None:
        terms.append(f"up to {format_go_duration(rule.maximum)}")
    return f"{describe_rule(rule)}: {clients}, {', '.join(terms)}"


def list_labels(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items())) or "none"


def list_names(names: Sequence[str]) -> str:
    shown = ", ".join(sorted(names)[:_LISTED])
    return shown + (f" and {len(names) - _LISTED} more" if len(names) > _LISTED else "")


