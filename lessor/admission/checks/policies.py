"""ExporterAccessPolicy checks: rules that could never apply, limits that could never be met, copies.

Once any policy exists in a namespace only the clients some policy admits
may lease there, so a policy that silently admits no one locks a lab out.
What is invalid is decided by `lessor.actors.leasing.validity.policy_errors`, the
function the operator's `Valid` condition comes from; these checks only
sort its errors by name, and add warnings.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lessor.actors.leasing.validity import policy_errors
from lessor.actors.validity import FieldError
from lessor.admission.checker import AdmissionRequest, Check, Lookup
from lessor.admission.results import CheckResult
from lessor.admission.checks.fields import deny_errors, grouped
from lessor.gateway.resources import POLICY
from lessor.model.views.leasing import PolicyView

_CHECKS = (
    ("policy-exporter-selector", lambda error: error.field.startswith("spec.exporterSelector")),
    ("policy-max-duration", lambda error: error.field.endswith(".maximumDuration")),
    ("policy-from", lambda error: ".from" in error.field),
)


class PolicyChecker:
    name = "policy"
    check_names = ("policy-exporter-selector", "policy-from", "policy-max-duration", "policy-rules",
                   "policy-duplicate")

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        policy = PolicyView.of(request["object"])
        others = [
            other
            for other in map(PolicyView.of, await lookup.list(POLICY.group, POLICY.kind, request["namespace"]))
            if other.name != policy.name
        ]
        errors = grouped(policy_errors(policy.body), _CHECKS, "policy-rules")
        return {
            "policy-exporter-selector": partial(_exporter_selector, policy.exporter_selector,
                                                errors["policy-exporter-selector"]),
            "policy-from": partial(deny_errors, errors["policy-from"]),
            "policy-max-duration": partial(deny_errors, errors["policy-max-duration"]),
            "policy-rules": partial(deny_errors, errors["policy-rules"]),
            "policy-duplicate": partial(_duplicate, policy, others),
        }


async def _exporter_selector(raw: Any, errors: Sequence[FieldError]) -> CheckResult:
    if errors:
        return await deny_errors(errors)
    if isinstance(raw, Mapping) and not raw.get("matchLabels") and not raw.get("matchExpressions"):
        return CheckResult.ok("spec.exporterSelector is empty: the policy applies to every exporter in the namespace")
    return CheckResult.ok()


async def _duplicate(policy: PolicyView, others: Sequence[PolicyView]) -> CheckResult:
    copies = sorted(other.name for other in others if other.spec == policy.spec)
    if copies:
        return CheckResult.ok(f"the same spec as ExporterAccessPolicy {', '.join(copies)} in this namespace")
    return CheckResult.ok()
