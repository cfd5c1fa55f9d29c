"""ExporterAccessPolicy checks: rules that could never apply, limits that could never be met, copies.

Once any policy exists in a namespace only the clients some policy admits
may lease there, so a policy that silently admits no one locks a lab out.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Lookup
from lessor.admission.checks.fields import selector_causes, spec
from lessor.gateway.resources import POLICY
from lessor.selectors import SelectorError, parse_selector
from lessor.templates import parse_duration


class PolicyChecker:
    name = "policy"
    check_names = ("policy-exporter-selector", "policy-from", "policy-max-duration", "policy-duplicate")

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        policy = request["object"]
        others = [
            other
            for other in await lookup.list(POLICY.group, POLICY.kind, request["namespace"])
            if other["metadata"]["name"] != policy["metadata"].get("name")
        ]
        rules = [(i, rule) for i, rule in enumerate(spec(policy).get("policies") or ()) if isinstance(rule, Mapping)]
        return {
            "policy-exporter-selector": partial(_exporter_selector, spec(policy).get("exporterSelector")),
            "policy-from": partial(_from, rules),
            "policy-max-duration": partial(_max_duration, rules),
            "policy-duplicate": partial(_duplicate, spec(policy), others),
        }


async def _exporter_selector(raw: Any) -> CheckResult:
    field = "spec.exporterSelector"
    if raw is None:
        return CheckResult.deny(Cause("missing: the policy would apply to no exporter; {} applies it to all", field))
    try:
        selector = parse_selector(raw, field)
    except SelectorError as err:
        return CheckResult.deny(*selector_causes(err))
    if selector.empty:
        return CheckResult.ok(f"{field} is empty: the policy applies to every exporter in the namespace")
    return CheckResult.ok()


async def _from(rules: Sequence[tuple[int, Mapping[str, Any]]]) -> CheckResult:
    """An empty ``from``, or a source without a clientSelector, matches no client: it can never apply."""
    causes: list[Cause] = []
    for i, rule in rules:
        field = f"spec.policies[{i}].from"
        sources = rule.get("from") or []
        if not sources:
            causes.append(Cause("empty: the rule would admit no client; list clientSelectors, {} admits all", field))
        for j, source in enumerate(sources):
            raw = source.get("clientSelector") if isinstance(source, Mapping) else None
            if raw is None:
                causes.append(Cause("missing: this entry matches no client; {} matches all",
                                    f"{field}[{j}].clientSelector"))
                continue
            try:
                parse_selector(raw, f"{field}[{j}].clientSelector")
            except SelectorError as err:
                causes.extend(selector_causes(err))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()


async def _max_duration(rules: Sequence[tuple[int, Mapping[str, Any]]]) -> CheckResult:
    causes: list[Cause] = []
    for i, rule in rules:
        raw = rule.get("maximumDuration")
        if raw is None:
            continue
        field = f"spec.policies[{i}].maximumDuration"
        try:
            if parse_duration(raw) <= dt.timedelta(0):
                causes.append(Cause(f"must be positive, not {raw} (leave it out for no limit)", field))
        except (TypeError, ValueError) as err:
            causes.append(Cause(str(err), field))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()


async def _duplicate(policy: Mapping[str, Any], others: Sequence[Mapping[str, Any]]) -> CheckResult:
    copies = sorted(other["metadata"]["name"] for other in others if spec(other) == policy)
    if copies:
        return CheckResult.ok(f"the same spec as ExporterAccessPolicy {', '.join(copies)} in this namespace")
    return CheckResult.ok()
