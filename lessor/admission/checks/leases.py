"""Lease checks: something to select, a consistent time window, a known client, within the policies.

These are the mistakes that otherwise end a lease at once as ``Invalid``
or ``Unsatisfiable``; refusing them at admission tells the user while they
are still looking at the manifest.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import partial
from typing import Any

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Lookup
from lessor.admission.checks.fields import selector_causes, spec, spec_changed
from lessor.gateway.resources import CLIENT, POLICY
from lessor.selectors import SelectorError, parse_selector
from lessor.templates import format_duration, parse_duration, parse_timestamp

_TIME_KEYS = ("duration", "beginTime", "endTime")


class LeaseChecker:
    name = "lease"
    check_names = ("lease-selector", "lease-duration", "lease-client", "lease-max-duration")

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
        client_name = (lease.get("clientRef") or {}).get("name", "")
        client, policies = await asyncio.gather(
            lookup.get(CLIENT.group, CLIENT.kind, namespace, client_name),
            lookup.list(POLICY.group, POLICY.kind, namespace),
        )
        if client_changed:
            checks["lease-client"] = partial(_client, client_name, namespace, client)
        if client is not None:  # without a client, lease-client has said it all
            checks["lease-max-duration"] = partial(_within_policies, lease, client, policies)
        return checks


async def _selector(lease: Mapping[str, Any]) -> CheckResult:
    raw, pinned = lease.get("selector"), lease.get("exporterRef")
    if raw is not None:
        try:
            selector = parse_selector(raw, "spec.selector")
        except SelectorError as err:
            return CheckResult.deny(*selector_causes(err))
        if not selector.empty or pinned:
            return CheckResult.ok()
        problem = "an empty selector would match every exporter"
    elif pinned:
        return CheckResult.ok()
    else:
        problem = "the lease selects no exporter"
    return CheckResult.deny(Cause(
        f"{problem}: select exporters by label (matchLabels or matchExpressions) or name one in spec.exporterRef",
        "spec.selector",
    ))


@dataclass(frozen=True)
class _Window:
    duration: dt.timedelta | None
    begin: dt.datetime | None
    end: dt.datetime | None

    def requested(self, now: dt.datetime) -> dt.timedelta | None:
        """How long the lease asks for; None is unbounded (neither a duration nor an end).

        Without a begin, a lease starts when it is granted: now at the earliest.
        """
        if self.duration is not None:
            return self.duration
        if self.end is not None:
            return self.end - (self.begin or now)
        return None


def _window(lease: Mapping[str, Any]) -> tuple[_Window, list[Cause]]:
    causes: list[Cause] = []

    def parsed(key: str, parse: Callable[[str], Any]) -> Any:
        if lease.get(key) is None:
            return None
        try:
            return parse(lease[key])
        except (TypeError, ValueError) as err:
            causes.append(Cause(str(err), f"spec.{key}"))
            return None

    window = _Window(parsed("duration", parse_duration), parsed("beginTime", parse_timestamp),
                     parsed("endTime", parse_timestamp))
    return window, causes


async def _times(lease: Mapping[str, Any]) -> CheckResult:
    """Any two of duration, beginTime and endTime give the third, so three must agree."""
    window, causes = _window(lease)
    duration, begin, end = window.duration, window.begin, window.end
    if duration is not None and duration <= dt.timedelta(0):
        causes.append(Cause(f"must be positive, not {lease['duration']}", "spec.duration"))
    if begin is not None and end is not None:
        if end <= begin:
            causes.append(Cause("must be after spec.beginTime", "spec.endTime"))
        elif duration is not None and duration > dt.timedelta(0) and end - begin != duration:
            causes.append(Cause(
                f"{lease['duration']} does not match spec.endTime - spec.beginTime ({format_duration(end - begin)}): "
                "give any two of duration, beginTime and endTime, or three that agree",
                "spec.duration",
            ))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()


async def _client(name: str, namespace: str, client: Mapping[str, Any] | None) -> CheckResult:
    if client is not None:
        return CheckResult.ok()
    return CheckResult.ok(f"spec.clientRef.name: there is no Client {name} in namespace {namespace}")


async def _within_policies(
    lease: Mapping[str, Any], client: Mapping[str, Any], policies: Sequence[Mapping[str, Any]]
) -> CheckResult:
    """Deny only when every policy that would admit the client caps the lease below what it asks."""
    window, causes = _window(lease)
    if causes:
        return CheckResult.ok()  # lease-duration reports them
    labels = (client.get("metadata") or {}).get("labels") or {}
    limits = list(_limits_for(labels, policies))
    if not limits or any(limit is None for limit, _ in limits):
        return CheckResult.ok()  # no policy admits the client (not this check's concern), or one sets no limit
    caps = [(limit, where) for limit, where in limits if limit is not None]
    requested = window.requested(dt.datetime.now(dt.UTC))
    if requested is not None and any(requested <= limit for limit, _ in caps):
        return CheckResult.ok()
    longest, where = max(caps, key=lambda cap: cap[0])
    client_name = client["metadata"]["name"]
    allowed = f"the longest the policies let client {client_name} lease is {format_duration(longest)} ({where})"
    if requested is None:
        return CheckResult.deny(Cause(
            f"without spec.duration or spec.endTime the lease asks for unbounded time, but {allowed}",
            "spec.duration",
        ))
    if lease.get("duration") is not None:
        return CheckResult.deny(Cause(f"{lease['duration']} is too long: {allowed}", "spec.duration"))
    return CheckResult.deny(Cause(
        f"spec.endTime asks for {format_duration(requested)}, too long: {allowed}", "spec.endTime"
    ))


def _limits_for(
    labels: Mapping[str, str], policies: Sequence[Mapping[str, Any]]
) -> Iterator[tuple[dt.timedelta | None, str]]:
    """The maximumDuration (None: no limit) of every policy entry whose ``from`` matches the client."""
    for policy in policies:
        for index, entry in enumerate(spec(policy).get("policies") or ()):
            if not isinstance(entry, Mapping) or not any(
                _matches(source, labels) for source in entry.get("from") or ()
            ):
                continue
            where = f"ExporterAccessPolicy {policy['metadata']['name']}, policies[{index}]"
            if entry.get("maximumDuration") is None:
                yield None, where
                continue
            try:
                yield parse_duration(entry["maximumDuration"]), where
            except (TypeError, ValueError):
                continue  # a broken entry admits no one; the policy's own checks refuse it


def _matches(source: Any, labels: Mapping[str, str]) -> bool:
    if not isinstance(source, Mapping):
        return False
    try:
        return parse_selector(source.get("clientSelector")).matches(labels)
    except SelectorError:
        return False
