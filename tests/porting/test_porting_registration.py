"""The Exporter `Registered` condition from `status.devices` (unit level; test_porting.py sees it on the
real API server)."""

from __future__ import annotations

from datetime import datetime, timezone

from lessor.actors.leasing.registration import registered_condition

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)


def test_devices_register_and_their_absence_unregisters_only_after_registering() -> None:
    assert registered_condition({}, now=NOW, generation=1) is None  # lessor's own exporters get none
    registered = registered_condition({"devices": [{"uuid": "a"}]}, now=NOW, generation=1)
    assert registered is not None and (registered["status"], registered["reason"]) == ("True", "Register")
    assert registered_condition({"devices": [{"uuid": "a"}], "conditions": [registered]}, now=NOW,
                                generation=1) is None  # nothing to write
    gone = registered_condition({"devices": [], "conditions": [registered]}, now=NOW, generation=2)
    assert gone is not None and (gone["status"], gone["reason"]) == ("False", "Unregister")
    assert registered_condition({"conditions": [gone]}, now=NOW, generation=2) is None
