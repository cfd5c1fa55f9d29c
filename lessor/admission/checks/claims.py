"""ResourceClaim checks: providers, templates and checks, lifespan, and what a bound claim may change.

A claim that fails these would sit with ``Valid`` False, or have its
update silently not applied; the user learns it from ``kubectl apply``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from functools import partial
from typing import Any

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Lookup
from lessor.admission.checks.fields import field_path, spec, spec_changed
from lessor.admission.checks.provided import (
    Entry,
    checks_result,
    entries,
    fetch_providers,
    providers_result,
    templates_result,
)
from lessor.jsonpatch import diff, filter_operations
from lessor.templates import format_timestamp, parse_duration, parse_timestamp


class ClaimChecker:
    name = "claim"
    check_names = ("claim-providers", "claim-templates", "claim-checks", "claim-lifespan", "claim-update-filters")

    def __init__(self, operator_namespace: str) -> None:
        self._providers_namespace = operator_namespace

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        claim = request["object"]
        resources_changed = spec_changed(request, "resources")
        lifespan_changed = spec_changed(request, "lifespan") and bool(spec(claim).get("lifespan"))
        if not (resources_changed or lifespan_changed):
            return {}
        namespace = self._providers_namespace
        resolved = entries(claim, await fetch_providers(claim, lookup, namespace), namespace)
        checks: dict[str, Check] = {}
        if resources_changed:
            checks["claim-providers"] = partial(providers_result, resolved)
            checks["claim-templates"] = partial(templates_result, resolved, claim)
            checks["claim-checks"] = partial(checks_result, resolved, claim)
            old = request.get("oldObject")
            if request["operation"] == "UPDATE" and ((old or {}).get("status") or {}).get("resourceHandle"):
                checks["claim-update-filters"] = partial(_update_filters, old, resolved)
        if lifespan_changed:
            checks["claim-lifespan"] = partial(_lifespan, claim, resolved)
        return checks


async def _lifespan(claim: Mapping[str, Any], resolved: Sequence[Entry]) -> CheckResult:
    """An end beyond the providers' maximum is not refused: the operator clamps it, so the user is told."""
    lifespan = spec(claim).get("lifespan") or {}
    causes: list[Cause] = []
    times: dict[str, dt.datetime] = {}
    for key in ("start", "end"):
        if lifespan.get(key) is not None:
            try:
                times[key] = parse_timestamp(lifespan[key])
            except (TypeError, ValueError) as err:
                causes.append(Cause(str(err), f"spec.lifespan.{key}"))
    if causes:
        return CheckResult.deny(*causes)
    end = times.get("end")
    if end is None:
        return CheckResult.ok()
    if "start" in times and end <= times["start"]:
        return CheckResult.deny(Cause("must be after spec.lifespan.start", "spec.lifespan.end"))
    now = dt.datetime.now(dt.UTC).replace(microsecond=0)
    created = claim["metadata"].get("creationTimestamp")
    counted_from = {"maximum": parse_timestamp(created) if created else now, "relativeMaximum": now}
    limits = []
    for entry in resolved:
        provider_lifespan = spec(entry.provider).get("lifespan") or {}
        for key, start in counted_from.items():
            if raw := provider_lifespan.get(key):
                try:
                    limit = start + parse_duration(raw)
                except (TypeError, ValueError):
                    continue  # the CRD's pattern keeps these well-formed
                limits.append((limit, f"{key} {raw} of ResourceProvider {entry.provider_name}"))
    if not limits:
        return CheckResult.ok()
    limit, reason = min(limits)
    if end <= limit:
        return CheckResult.ok()
    return CheckResult.ok(
        f"spec.lifespan.end {lifespan['end']} is beyond the {reason}: it will be clamped to {format_timestamp(limit)}"
    )


async def _update_filters(old: Mapping[str, Any], resolved: Sequence[Entry]) -> CheckResult:
    """Once bound, a template changes only where its provider's updateFilters allow."""
    old_resources = spec(old).get("resources") or []
    causes = []
    for entry in resolved:
        if entry.provider is None or entry.index >= len(old_resources):
            continue
        before = (old_resources[entry.index] or {}).get("template") or {}
        _, refused = filter_operations(diff(before, entry.template), spec(entry.provider).get("updateFilters"))
        causes += [
            Cause(f"{operation['op']} is not allowed once the claim is bound: no updateFilters entry of "
                  f"ResourceProvider {entry.provider_name} allows it",
                  field_path(f"{entry.field}.template", operation["path"]))
            for operation in refused
        ]
    return CheckResult.deny(*causes) if causes else CheckResult.ok()
