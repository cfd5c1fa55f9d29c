"""ResourceClaim checks: providers, templates and checks, lifespan, and what a bound claim may change.

A claim that fails these would sit with ``Valid`` False, or have its
update silently not applied; the user learns it from ``kubectl apply``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lessor.actors.provisioning.claim_spec import lifespan_errors
from lessor.actors.provisioning.claim_updates import plan_claim_update
from lessor.actors.provisioning.throttle import Throttle
from lessor.actors.provisioning.provider import Provider, provider_from
from lessor.admission.checker import AdmissionRequest, Check, FailurePolicy, Lookup
from lessor.admission.results import Cause, CheckResult
from lessor.admission.checks.fields import name_problem, operator_field, spec_changed
from lessor.admission.checks.provided import (
    checks_result,
    providers_result,
    resolve_resources,
    templates_result,
)
from lessor.gateway.resources import HANDLE
from lessor.model.views.provisioning import ClaimView
from lessor.templates import format_timestamp, offload, parse_duration


class ClaimChecker:
    name = "claim"
    check_names = ("claim-providers", "claim-templates", "claim-checks", "claim-lifespan", "claim-update-filters")
    # A provider's validation.checks are its author's admission rules: a claim they could not judge in time
    # is refused, naming the check, not admitted unchecked. The rest the claim actor judges again (Valid).
    failure_policies = {"claim-checks": FailurePolicy.FAIL}

    def __init__(self, operator_namespace: str, throttle: Throttle | None = None) -> None:
        """`throttle`: the operator's (actors/provisioning/throttle.py), so the webhook's judgments count too."""
        self._providers_namespace = operator_namespace
        self._throttle = throttle

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        claim = request["object"]
        resources_changed = spec_changed(request, "resources", "provider")
        lifespan_changed = spec_changed(request, "lifespan") and bool(ClaimView.of(claim).lifespan_given)
        if not (resources_changed or lifespan_changed):
            return {}
        namespace = self._providers_namespace
        resolution, providers = await resolve_resources(claim, lookup, namespace, claim=True, throttle=self._throttle)
        checks: dict[str, Check] = {}
        if resources_changed:
            checks["claim-providers"] = partial(providers_result, resolution)
            checks["claim-templates"] = partial(templates_result, resolution)
            checks["claim-checks"] = partial(checks_result, resolution)
            old = request.get("oldObject")
            bound = ClaimView.of(old).handle_ref if old is not None else None
            if request["operation"] == "UPDATE" and bound is not None:
                handle = await _handle(bound, lookup, namespace)
                if handle is not None:  # gone: the claim binds anew, and nothing is updated
                    checks["claim-update-filters"] = partial(_update_filters, old or {}, claim, handle, providers,
                                                                      self._throttle)
        if lifespan_changed:
            checks["claim-lifespan"] = partial(_lifespan, claim, resolution.resolved_providers)
        return checks


async def _lifespan(claim: Mapping[str, Any], providers: Sequence[Provider]) -> CheckResult:
    """Times the operator refuses (`lifespan_errors`) are denied; an end beyond the providers' maximum is not:
    the operator clamps it, so the user is told."""
    if errors := lifespan_errors(claim):
        return CheckResult.deny(*(Cause(error.message, error.field) for error in errors))
    view = ClaimView.of(claim)  # its times are readable now: `lifespan_errors` found none unreadable
    asked_start, end = view.requested_start, view.requested_end
    if end is None:
        return CheckResult.ok()
    if asked_start is not None and end <= asked_start:
        return CheckResult.deny(Cause("must be after spec.lifespan.start", "spec.lifespan.end"))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    counted_from = {"maximum": view.meta.created or now, "relativeMaximum": now}
    limits = []
    for provider in providers:
        provider_lifespan = provider.view.lifespan
        for key, start in counted_from.items():
            if raw := provider_lifespan.get(key):
                try:
                    limit = start + parse_duration(raw)
                except (TypeError, ValueError):
                    continue  # the CRD's pattern keeps these well-formed
                limits.append((limit, f"{key} {raw} of ResourceProvider {provider.name}"))
    if not limits:
        return CheckResult.ok()
    limit, reason = min(limits)
    if end <= limit:
        return CheckResult.ok()
    return CheckResult.ok(
        f"spec.lifespan.end {view.requested_end_text} is beyond the {reason}: it will be clamped to "
        f"{format_timestamp(limit)}"
    )


async def _handle(bound: Mapping[str, Any], lookup: Lookup, namespace: str) -> Mapping[str, Any] | None:
    """The handle a bound claim's ``status.resourceHandle`` names (in the operator's namespace)."""
    name, where = bound.get("name"), bound.get("namespace") or namespace
    if not isinstance(name, str) or not isinstance(where, str) or name_problem(name) or name_problem(where):
        return None
    return await lookup.get(HANDLE.group, HANDLE.kind, where, name)


async def _update_filters(old: Mapping[str, Any], new: Mapping[str, Any], handle: Mapping[str, Any],
                          providers: Sequence[Mapping[str, Any]], throttle: Throttle | None) -> CheckResult:
    """Once bound, a claim changes only what the claim actor would apply to its handle.

    The rule is the operator's (`lessor.actors.claim_updates.plan_claim_update`):
    the change between the old and new *defaulted* templates, judged by the
    provider's ``updateFilters``, the identity rules and the handle's template.
    Each operation it would refuse is denied at its field.
    """
    by_name = {provider_from(p).name: provider_from(p) for p in providers}
    tenant = ClaimView.of(new).namespace
    plan = await offload(plan_claim_update, old, new, handle, by_name, key=tenant, now=dt.datetime.now(dt.UTC),
                         throttle=throttle)
    causes = [Cause(error.message, operator_field(error.field)) for error in plan.errors]
    return CheckResult.deny(*causes) if causes else CheckResult.ok()
