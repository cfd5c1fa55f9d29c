"""The `Registered` condition of an Exporter, from the devices its agent reports (`status.devices`).

The lease controller lessor replaces sets it the same way; its agents report devices, lessor's own
exporters need not. Informational: leasing looks at `Online` only, so an exporter that never reported
devices gets no `Registered` condition at all.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from lessor.model.views.leasing import ExporterView

from ..conditions import new_condition

REGISTERED = "Registered"


def registered_condition(exporter: ExporterView, *, now: datetime) -> dict[str, Any] | None:
    """`Registered` as it should be now, or None when the exporter should have none (or it is already so)."""
    devices = exporter.devices
    current = exporter.condition(REGISTERED)
    if devices:
        wanted = (True, "Register", f"the agent reported {len(devices)} devices in status.devices")
    elif current is not None:
        wanted = (False, "Unregister", "status.devices is empty")
    else:
        return None
    if current is not None and (current.status, current.reason, current.message) == (str(wanted[0]), *wanted[1:]):
        return None
    return new_condition(REGISTERED, *wanted, now=now, observed_generation=exporter.meta.generation)
