"""The leasing kinds' views: each field typed once, a malformed one read as missing, never raising."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from lessor.model.views.conditions import Condition, StatusView
from lessor.model.views.leasing import ClientView, ExporterView, Holder, LeaseView, PolicyView, holder_of

NOW = datetime(2026, 11, 26, 10, 0, tzinfo=UTC)
MALFORMED: list[dict[str, Any]] = [
    {},
    {"metadata": None, "spec": "x", "status": 3},
    {"spec": {"enabled": "no", "clientRef": "alice", "exporterRef": {"name": 5}, "selector": None, "release": "yes",
              "allowDisabled": 1, "tags": ["a"], "duration": 60, "beginTime": "soon", "endTime": 5,
              "exporterSelector": None, "policies": {"a": 1}},
     "status": {"ended": "true", "leaseRef": "l1", "exporterRef": {"name": ""}, "exporterStatus": 7,
                "lastSeen": "yesterday", "beginTime": None, "endTime": [], "priority": "high", "spotAccess": "yes",
                "devices": {"a": 1}, "credential": "c", "endpoint": 8, "conditions": "Ready"}},
]


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_exporter_reads_as_an_empty_one(body: dict[str, Any]) -> None:
    exporter = ExporterView.of(body)
    assert exporter.enabled  # only `enabled: false` disables
    assert (exporter.held_by, exporter.agent_status, exporter.last_seen, exporter.seen) == (None, "", None, False)
    assert exporter.ready and not exporter.says_offline and not exporter.online(NOW)
    assert (exporter.devices, exporter.credential, exporter.endpoint, exporter.conditions) == ((), None, None, ())


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_lease_reads_as_an_empty_one(body: dict[str, Any]) -> None:
    lease = LeaseView.of(body)
    assert (lease.client, lease.requested_exporter, lease.selector, lease.release, lease.allow_disabled) == \
        (None, None, None, False, False)
    assert (dict(lease.tags), lease.duration_text, lease.begin_requested, lease.end_requested) == ({}, None, None, None)
    assert (lease.ended, lease.exporter, lease.begin, lease.end, lease.end_text) == (False, None, None, None, None)
    assert (lease.priority, lease.spot, lease.ready, lease.ready_on("e1")) == (0, False, False, False)
    assert holder_of("l1", lease) == Holder("l1")
    assert not LeaseView.ended_body(body)


@pytest.mark.parametrize("body", MALFORMED)
def test_a_malformed_client_or_policy_reads_as_an_empty_one(body: dict[str, Any]) -> None:
    client, policy = ClientView.of(body), PolicyView.of(body)
    assert (dict(client.labels), client.credential, client.endpoint) == ({}, None, None)
    assert (policy.exporter_selector, policy.rules, policy.client_selectors) == (None, (), ())


def test_an_exporter_held_online_and_ready() -> None:
    exporter = ExporterView.of({
        "metadata": {"name": "e1", "labels": {"board": "rpi4"}},
        "spec": {"enabled": False},
        "status": {"leaseRef": {"name": "l1"}, "exporterStatus": "LeaseReady", "statusMessage": "hooks",
                   "lastSeen": "2026-11-26T09:59:30Z", "devices": [{"uuid": "a"}],
                   "credential": {"name": "e1-exporter"}, "endpoint": "grpc.lab:443"}})
    assert (exporter.name, exporter.enabled, exporter.held_by, exporter.ready) == ("e1", False, "l1", False)
    assert exporter.online(NOW) and not exporter.online(NOW, timedelta(seconds=30))
    assert not exporter.online(NOW + timedelta(minutes=1))
    assert (exporter.status_message, exporter.devices, exporter.credential, exporter.endpoint) == \
        ("hooks", ({"uuid": "a"},), "e1-exporter", "grpc.lab:443")
    offline = ExporterView.of({"status": {"exporterStatus": "Offline", "lastSeen": "2026-11-26T10:00:00Z"}})
    assert offline.says_offline and not offline.online(NOW) and not offline.ready


def test_a_granted_lease() -> None:
    lease = LeaseView.of({
        "metadata": {"name": "l1", "namespace": "lab", "labels": {"lessor.dev/lease-ended": "true"}},
        "spec": {"clientRef": {"name": "alice"}, "selector": {"matchLabels": {"board": "rpi4"}},
                 "exporterRef": {"name": "e1"}, "release": True, "allowDisabled": True, "tags": {"team": "qa"},
                 "duration": "1h", "beginTime": "2026-11-26T10:00:00Z"},
        "status": {"exporterRef": {"name": "e1"}, "beginTime": "2026-11-26T10:00:00Z",
                   "endTime": "2026-11-26T11:00:00Z", "priority": 7, "spotAccess": True,
                   "conditions": [{"type": "Ready", "status": "True", "reason": "Ready"}, "junk"]}})
    assert (lease.client, lease.requested_exporter, lease.release, lease.allow_disabled) == ("alice", "e1", True, True)
    assert (dict(lease.tags), lease.duration_text, lease.begin_requested) == ({"team": "qa"}, "1h", NOW)
    assert (lease.exporter, lease.begin, lease.end, lease.end_text) == \
        ("e1", NOW, NOW + timedelta(hours=1), "2026-11-26T11:00:00Z")
    assert lease.ready and lease.ready_on("e1") and not lease.ready_on("e2")
    assert not lease.ended, "the ended label alone ends nothing: status.ended does"
    assert holder_of("l1", lease) == Holder("l1", 7, True) and holder_of("l1", None) == Holder("l1")
    ended = LeaseView.of({**lease.body, "status": {**lease.status, "ended": True}})
    assert ended.ended and LeaseView.ended_body(ended.body) and not ended.ready_on("e1")


def test_a_policy_names_each_client_selector_by_its_field() -> None:
    policy = PolicyView.of({"spec": {"exporterSelector": {}, "policies": [
        "junk", {"from": [{"clientSelector": {"matchLabels": {"team": "qa"}}}, "junk", {}]}, {"from": "x"}]}})
    assert policy.exporter_selector == {} and len(policy.rules) == 3
    assert policy.client_selectors == (
        ("spec.policies[1].from[0].clientSelector", {"matchLabels": {"team": "qa"}}),
        ("spec.policies[1].from[2].clientSelector", None))


def test_conditions_read_typed_and_leave_out_what_is_not_one() -> None:
    view = StatusView.of({"status": {"conditions": [
        {"type": "Valid", "status": "False", "reason": "InvalidSelector", "message": "m", "observedGeneration": 2,
         "lastTransitionTime": "2026-11-26T10:00:00Z"},
        7, {"type": "Ready", "status": True, "observedGeneration": True}]}})
    assert view.conditions == (
        Condition("Valid", "False", "InvalidSelector", "m", 2, "2026-11-26T10:00:00Z"), Condition("Ready", ""))
    assert len(view.condition_dicts) == 2 and view.condition("Gone") is None
    assert not view.is_true("Valid") and not view.is_true("Ready")
