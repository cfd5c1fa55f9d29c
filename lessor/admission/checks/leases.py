"""Lease checks: something to select, a consistent time window, a known client, within the policies.

These are the mistakes that otherwise end a lease at once as ``Invalid``
or ``Unsatisfiable``; refusing them at admission tells the user while they
are still looking at the manifest.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lessor.actors.leasing.access_policy import PolicyMemo, compile_policies, too_short_for
from lessor.actors.leasing.resolution import duration_exceeded
from lessor.actors.leasing.spec import Verdict, parse_lease, selection_problems, time_problems
from lessor.admission.checker import AdmissionRequest, Check, Lookup
from lessor.admission.results import CheckResult
from lessor.admission.checks.fields import problem_cause, ref_name, selector_causes, spec, spec_changed
from lessor.gateway.resources import CLIENT, POLICY
from lessor.model.selectors import SelectorError, parse_selector
from lessor.model.views.leasing import ClientView, LeaseView

_TIME_KEYS = ("duration", "beginTime", "endTime")


class LeaseChecker:
    name = "lease"
    check_names = ("lease-selector", "lease-duration", "lease-client", "lease-max-duration")

    def __init__(self) -> None:
        self._policies = PolicyMemo()  # this webhook's compiled policy versions, bounded

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        lease = spec(request["object"])
        checks: dict[str, Check] = {}
        if spec_changed(request, "selector", "exporterRef"):
            checks["lease-selector"] = partial(_selector, lease)
        timing = spec_changed(request, *_TIME_KEYS)
        if timing:
            checks["lease-duration"] = partial(_times, lease)
        client_changed = spec_changed(request, "clientRef")
        if not (timing or client_changed):
            return checks
        namespace = request["namespace"]
        client_name = ref_name(lease.get("clientRef"))
        client, policies = await asyncio.gather(
            lookup.get(CLIENT.group, CLIENT.kind, namespace, client_name),
            lookup.list(POLICY.group, POLICY.kind, namespace),
        )
        if client_changed:
            checks["lease-client"] = partial(_client, client_name, namespace, client)
        if client is not None:  # without a client, lease-client has said it all
            checks["lease-max-duration"] = partial(_within_policies, request["object"], client, policies,
                                                       self._policies)
        return checks


async def _selector(lease: Mapping[str, Any]) -> CheckResult:
    """The operator's rule (`selection_problems`); a malformed selector is named at its expression."""
    problems = selection_problems(lease)
    try:
        parse_selector(lease.get("selector"), "spec.selector")
    except SelectorError as err:
        others = [problem_cause(p) for p in problems if not p.startswith("spec.selector")]
        return CheckResult.deny(*others, *selector_causes(err))
    return _denied(problems)


async def _times(lease: Mapping[str, Any]) -> CheckResult:
    """The operator's rule (`time_problems`): any two of duration, beginTime and endTime give the third."""
    return _denied(time_problems(lease))


def _denied(problems: Sequence[str]) -> CheckResult:
    """The operator's problems, each ``field: message``, as causes naming the field."""
    return CheckResult.deny(*(problem_cause(problem) for problem in problems)) if problems else CheckResult.ok()


async def _client(name: str, namespace: str, client: Mapping[str, Any] | None) -> CheckResult:
    if client is not None:
        return CheckResult.ok()
    return CheckResult.ok(f"spec.clientRef.name: there is no Client {name} in namespace {namespace}: the lease "
                          f"will end at once (Unsatisfiable, NoAccess), and creating the Client later will not "
                          f"revive it; create the Client first")


async def _within_policies(
    lease: Mapping[str, Any], client: Mapping[str, Any], policies: Sequence[Mapping[str, Any]], memo: PolicyMemo
) -> CheckResult:
    """Deny only when every policy rule that admits the client is too short for what the lease asks.

    The operator's objects decide: `parse_lease` reads the request, `compile_policies`
    and `too_short_for` find the rules, and `duration_exceeded` words the verdict
    the lease would end with. A lease the operator cannot read is lease-selector's
    or lease-duration's to refuse.
    """
    request = parse_lease(LeaseView.of(lease))
    if isinstance(request, Verdict):
        return CheckResult.ok()
    labels = ClientView.of(client).labels
    now = dt.datetime.now(dt.UTC)
    closed = too_short_for(labels, compile_policies(policies, memo), request.requested_duration(now))
    if not closed:
        return CheckResult.ok()
    return CheckResult.deny(problem_cause(duration_exceeded(request, closed, now).message))
