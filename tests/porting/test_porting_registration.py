"""The Exporter `Registered` condition from `status.devices` (unit level; test_porting.py sees it on the
real API server)."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from lessor.actors.leasing.registration import registered_condition
from lessor.model.views.leasing import ExporterView

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def exporter(status: dict[str, Any], generation: int) -> ExporterView:
    return ExporterView.of({"metadata": {"name": "e1", "generation": generation}, "status": status})


def test_devices_register_and_their_absence_unregisters_only_after_registering() -> None:
    assert registered_condition(exporter({}, 1), now=NOW) is None  # lessor's own exporters get none
    registered = registered_condition(exporter({"devices": [{"uuid": "a"}]}, 1), now=NOW)
    assert registered is not None and (registered["status"], registered["reason"]) == ("True", "Register")
    assert registered["observedGeneration"] == 1
    assert registered_condition(exporter({"devices": [{"uuid": "a"}], "conditions": [registered]}, 1),
                                now=NOW) is None  # nothing to write
    gone = registered_condition(exporter({"devices": [], "conditions": [registered]}, 2), now=NOW)
    assert gone is not None and (gone["status"], gone["reason"]) == ("False", "Unregister")
    assert registered_condition(exporter({"conditions": [gone]}, 2), now=NOW) is None
