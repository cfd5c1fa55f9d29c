"""What an exporter's agent reports (Jumpstarter's Register, Unregister, ReportStatus, and its open streams).

lessor's gRPC endpoint turns each call into an `AgentReport` asked of the exporter actor, which writes the
agent's fields into the Exporter's status (`agent_status`) under a resourceVersion precondition, then
updates `Online` and `Registered` as for an agent that writes them itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.times import format_time


@dataclass(frozen=True, slots=True)
class AgentReport:
    """→ bool (False: the exporter is gone). Every report is a heartbeat (`status.lastSeen` = now)."""

    devices: tuple[Mapping[str, Any], ...] | None = None
    """Register's device reports; () for Unregister; None leaves `status.devices` as it is."""
    exporter_status: str | None = None
    """`status.exporterStatus` (Available, Offline, LeaseReady, ...); None leaves it."""
    message: str | None = None
    """`status.statusMessage`; None leaves it."""


def agent_status(report: AgentReport, now: datetime) -> dict[str, Any]:
    """The status fields the report sets."""
    status: dict[str, Any] = {"lastSeen": format_time(now)}
    if report.devices is not None:
        status["devices"] = [dict(device) for device in report.devices]
    if report.exporter_status is not None:
        status["exporterStatus"] = report.exporter_status
    if report.message is not None:
        status["statusMessage"] = report.message
    return status
