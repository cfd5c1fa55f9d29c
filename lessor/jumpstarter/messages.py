"""Lessor's objects as the protocol's messages, and a client's requests as the Lease spec it asks for."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import grpc
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, kubernetes_pb2

from lessor.actors.leasing.spec import format_go_duration, parse_go_duration
from lessor.model.fields import timestamp
from lessor.model.selectors import SelectorError, format_selector, parse_selector
from lessor.model.times import format_time
from lessor.model.views.leasing import LeaseView
from lessor.model.views.meta import strings

from .guard import Refusal, invalid
from .names import resource, selector_from_text

# status.exporterStatus ↔ the protocol's enum (the names the lease controller writes).
STATUS_NAMES = {
    "EXPORTER_STATUS_UNSPECIFIED": "Unspecified",
    "EXPORTER_STATUS_OFFLINE": "Offline",
    "EXPORTER_STATUS_AVAILABLE": "Available",
    "EXPORTER_STATUS_BEFORE_LEASE_HOOK": "BeforeLeaseHook",
    "EXPORTER_STATUS_LEASE_READY": "LeaseReady",
    "EXPORTER_STATUS_AFTER_LEASE_HOOK": "AfterLeaseHook",
    "EXPORTER_STATUS_BEFORE_LEASE_HOOK_FAILED": "BeforeLeaseHookFailed",
    "EXPORTER_STATUS_AFTER_LEASE_HOOK_FAILED": "AfterLeaseHookFailed",
}
STATUS_VALUES = {text: common_pb2.ExporterStatus.Value(enum) for enum, text in STATUS_NAMES.items()}


def _time(value: Any) -> Any:
    when = timestamp(value)
    if when is None:
        return None
    stamp = kubernetes_pb2.Time()
    stamp.seconds = int(when.timestamp())
    return stamp


def _conditions(lease: LeaseView) -> list[Any]:
    found = []
    for condition in lease.conditions:
        message = kubernetes_pb2.Condition(type=condition.type, status=condition.status,
                                           reason=condition.reason, message=condition.message)
        if condition.observed_generation is not None:
            message.observedGeneration = condition.observed_generation
        if (when := _time(condition.last_transition)) is not None:
            message.lastTransitionTime.CopyFrom(when)
        found.append(message)
    return found


def _timestamp_pb(field: Any, when: datetime | None) -> None:
    if when is not None:
        field.FromDatetime(when.astimezone(UTC).replace(tzinfo=None))


def _requested_duration(lease: LeaseView) -> timedelta | None:
    """`spec.duration`, or None when absent or unreadable (the lease then shows itself Invalid; the CLI shows
    no duration)."""
    if not lease.duration_text:
        return None
    try:
        return parse_go_duration(lease.duration_text, "spec.duration")
    except ValueError:
        return None


def lease_message(lease: LeaseView) -> Any:
    """A Lease as the CLI reads it (`jumpstarter.client.v1.Lease`)."""
    namespace = lease.namespace
    message = client_pb2.Lease(
        name=resource(namespace, "leases", lease.name),
        selector=format_selector(lease.selector) if lease.selector else "",
        client=resource(namespace, "clients", lease.client or ""),
        exporter_name=lease.requested_exporter or "",
        allow_disabled=lease.allow_disabled,
        conditions=_conditions(lease),
    )
    if (holder := lease.exporter) is not None:
        message.exporter = resource(namespace, "exporters", holder)
    for key, value in lease.tags.items():
        message.tags[key] = value
    if (duration := _requested_duration(lease)) is not None:
        message.duration.FromTimedelta(duration)
    _timestamp_pb(message.begin_time, lease.begin_requested)
    _timestamp_pb(message.end_time, lease.end_requested)
    begin, end = lease.begin, lease.end
    _timestamp_pb(message.effective_begin_time, begin)
    if lease.ended:
        _timestamp_pb(message.effective_end_time, end)
    if begin is not None and end is not None:
        message.effective_duration.FromTimedelta(end - begin)
    return message


def _selector_message(raw: Any) -> Any:
    """`spec.selector` as the controller's `LabelSelector` message (empty when absent or unreadable)."""
    message = kubernetes_pb2.LabelSelector()
    if not isinstance(raw, Mapping):
        return message
    for key, value in strings(raw.get("matchLabels")).items():
        message.match_labels[key] = value
    for expression in raw.get("matchExpressions") or ():
        if isinstance(expression, Mapping):
            message.match_expressions.add(key=str(expression.get("key", "")),
                                          operator=str(expression.get("operator", "")),
                                          values=[str(v) for v in expression.get("values") or ()])
    return message


def selector_of(message: Any, field: str) -> dict[str, Any]:
    """A `LabelSelector` message as `spec.selector` ({} when it selects nothing); INVALID_ARGUMENT naming
    `field` when lessor's selector rules refuse it."""
    selector: dict[str, Any] = {}
    if message.match_labels:
        selector["matchLabels"] = dict(message.match_labels)
    if message.match_expressions:
        selector["matchExpressions"] = [
            {"key": e.key, "operator": e.operator, **({"values": list(e.values)} if e.values else {})}
            for e in message.match_expressions]
    try:
        parse_selector(selector, field)
    except SelectorError as err:
        raise invalid(str(err)) from None
    return selector


def controller_lease_message(lease: LeaseView, exporter_uid: str | None) -> Any:
    """A Lease as ControllerService's older `GetLease` answers it, from the fields `lease_message` reads:
    begin and end are the lease's own (the end once it has ended), `exporter_uuid` its exporter's uid."""
    message = jumpstarter_pb2.GetLeaseResponse(selector=_selector_message(lease.selector),
                                               conditions=_conditions(lease))
    if (duration := _requested_duration(lease)) is not None:
        message.duration.FromTimedelta(duration)
    _timestamp_pb(message.begin_time, lease.begin)
    if lease.ended:
        _timestamp_pb(message.end_time, lease.end)
    if exporter_uid is not None:
        message.exporter_uuid = exporter_uid
    return message


def ready_reason(lease: LeaseView) -> str:
    if (ready := lease.condition("Ready")) is not None:
        return f"{ready.reason}: {ready.message}"
    return "not granted yet"


def lease_spec(lease: Any) -> dict[str, Any]:
    """The spec a CreateLease asks for (but its client), field by field as the CRD has them."""
    spec: dict[str, Any] = {}
    if lease.selector:
        try:
            spec["selector"] = selector_from_text(lease.selector)
            parse_selector(spec["selector"], "lease.selector")  # the webhook's and the operator's rule, limits too
        except SelectorError as err:
            raise invalid(str(err)) from None
        except ValueError as err:
            raise invalid(f"lease.selector: {err}") from None
    if lease.exporter_name:
        spec["exporterRef"] = {"name": lease.exporter_name}
    if lease.HasField("duration"):
        spec["duration"] = format_go_duration(lease.duration.ToTimedelta())
    if lease.HasField("begin_time"):
        spec["beginTime"] = format_time(lease.begin_time.ToDatetime(tzinfo=UTC))
    if lease.HasField("end_time"):
        spec["endTime"] = format_time(lease.end_time.ToDatetime(tzinfo=UTC))
    if lease.tags:
        spec["tags"] = dict(lease.tags)
    if lease.allow_disabled:
        spec["allowDisabled"] = True
    return spec


def time_update(obj: LeaseView, lease: Any) -> dict[str, Any]:
    """The spec's times after an UpdateLease that gives any of `begin_time`, `duration`, `end_time` (else {}),
    reconciled as the controller does: begin and end give the duration (a different one given too is refused),
    end and duration give the begin; the duration must then be known and positive."""
    if not any(lease.HasField(field) for field in ("begin_time", "duration", "end_time")):
        return {}
    spec = obj.spec
    begin, end = timestamp(spec.get("beginTime")), timestamp(spec.get("endTime"))
    try:
        duration = parse_go_duration(spec["duration"], "spec.duration") if spec.get("duration") else None
    except ValueError:
        duration = None
    if lease.HasField("begin_time"):
        wanted = lease.begin_time.ToDatetime(tzinfo=UTC)
        if obj.exporter is not None and wanted != begin:
            raise Refusal(grpc.StatusCode.FAILED_PRECONDITION,
                          f"cannot update begin_time: lease {obj.namespace}/{obj.name} has already started")
        begin = wanted
    if lease.HasField("duration"):
        duration = lease.duration.ToTimedelta()
    if lease.HasField("end_time"):
        end = lease.end_time.ToDatetime(tzinfo=UTC)
    if begin is not None and end is not None:
        if duration is not None and duration > timedelta(0) and duration != end - begin:
            raise invalid("duration conflicts with begin_time and end_time")
        duration = end - begin
    elif end is not None and duration is not None and duration > timedelta(0):
        begin = end - duration
    if duration is None:
        raise invalid("duration is required (give duration, or both begin_time and end_time)")
    if duration <= timedelta(0):
        raise invalid(f"duration must be positive, got {format_go_duration(duration)}")
    return {"duration": format_go_duration(duration),
            "beginTime": format_time(begin) if begin is not None else None,
            "endTime": format_time(end) if end is not None else None}
