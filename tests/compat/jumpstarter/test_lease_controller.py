"""Jumpstarter's "Lease Controller" specs (controller/internal/controller/lease_controller_test.go, the
`Describe("Lease Controller")` block, its `It`s numbered l01 to l24 in order, and the behaviour of "Pending lease
queue starvation" as q02), on lessor: the peer's objects through `lessor convert`, the peer's expectations read
from lessor's status (conditions `Ready`/`Pending`/`Unsatisfiable`/`Invalid`, `status.exporterRef`,
`status.beginTime`, `status.ended`, the exporter's `status.leaseRef`).

The peer creates the lease, then calls its reconciler once; here the operator runs, so each check waits for
the state the peer's reconcile would produce. Like the peer's suite, no access policy exists unless the spec
creates one (open access: lessor grants 3 s after the lease's creation, docs/leasing.md).

Without the webhook (the `operator` fixture runs none), what the peer's API server refuses at creation (l01)
is created and ended `Invalid` by the operator, with the same words the webhook would deny it with
(docs/admission.md: one rule, one place).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from lessor.gateway import Gateway
from lessor.gateway.resources import EXPORTER

from .lab import (
    CLIENT_NAME, DUT_A, DUT_B, Lab, condition, ended, exporter_of, has, lease_of, manifest, message, ready,
)

pytestmark = pytest.mark.usefixtures("operator")


@pytest.fixture
async def lab(kube: Gateway, namespace: str) -> Lab:
    made = Lab(kube, namespace)
    await made.standard()
    return made


def policy(name: str, *rules: Mapping[str, Any], dut: str = "a") -> dict[str, Any]:
    return manifest("ExporterAccessPolicy", name,
                    {"exporterSelector": {"matchLabels": {"dut": dut}}, "policies": list(rules)})


def rule(priority: int, description: str = "", **client_labels: str) -> dict[str, Any]:
    body: dict[str, Any] = {"priority": priority, "from": [{"clientSelector": {"matchLabels": client_labels}}]}
    if description:
        body["description"] = description
    return body


# l01 "trying to lease with an empty selector: should fail right away"
async def test_l01_an_empty_selector_fails_right_away(lab: Lab) -> None:
    await lab.lease(selector={"matchLabels": {}})
    got = await lab.until("lease1", has("Invalid", "InvalidSelector"))
    assert ended(got) and exporter_of(got) is None
    # The peer's words: "one of selector or exporterRef.name is required"; lessor's name both fields.
    text = message(got, "Invalid")
    assert "spec.selector" in text and "spec.exporterRef.name" in text


# l02 "trying to lease with a requested exporter and empty selector: should acquire the requested exporter"
async def test_l02_a_requested_exporter_without_selector_is_acquired(lab: Lab) -> None:
    await lab.lease(dut=None, exporterRef={"name": DUT_A[0]})
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_A[0]


# l03 "trying to lease with a missing requested exporter: should be unsatisfiable with ExporterNotFound reason"
async def test_l03_a_missing_requested_exporter_is_unsatisfiable_exporter_not_found(lab: Lab) -> None:
    await lab.lease(dut=None, exporterRef={"name": "does-not-exist"})
    got = await lab.until("lease1", has("Unsatisfiable", "ExporterNotFound"))
    assert exporter_of(got) is None
    assert condition(got, "Pending") is None


# l04 "trying to lease with requested exporter that does not match selector: should fail with SelectorMismatch"
async def test_l04_a_requested_exporter_not_matching_the_selector_is_selector_mismatch(lab: Lab) -> None:
    await lab.lease(dut="b", exporterRef={"name": DUT_A[0]})
    got = await lab.until("lease1", has("Unsatisfiable", "SelectorMismatch"))
    assert exporter_of(got) is None


# l05 "trying to lease an available exporter: should acquire lease right away"
async def test_l05_an_available_exporter_is_acquired(lab: Lab) -> None:
    await lab.lease()
    got = await lab.until("lease1", ready)
    assert exporter_of(got) in DUT_A
    assert (got.get("status") or {}).get("beginTime")
    assert lease_of(await lab.get(exporter_of(got) or "", EXPORTER)) == "lease1"


# l06 "trying to lease an available exporter: should be released after the lease time"
async def test_l06_the_exporter_is_released_after_the_lease_time(lab: Lab) -> None:
    await lab.lease(duration="1s")
    held = exporter_of(await lab.until("lease1", ready))
    got = await lab.until("lease1", ended)
    assert exporter_of(got) == held  # kept for the record
    assert has("Ready", "Expired", "False")(got)
    await lab.until(held or "", lambda e: lease_of(e) is None, res=EXPORTER)


# l07 "trying to lease a non existing exporter: should fail right away"
async def test_l07_a_selector_matching_no_exporter_fails(lab: Lab) -> None:
    await lab.lease(dut="does-not-exist")
    got = await lab.until("lease1", has("Unsatisfiable"))
    assert exporter_of(got) is None


# l08 "trying to lease an offline exporter: should set status to pending with offline reason"
async def test_l08_offline_exporters_are_pending_offline(lab: Lab) -> None:
    await asyncio.gather(*(lab.offline(name) for name in DUT_A))
    await lab.lease()
    got = await lab.until("lease1", has("Pending", "Offline"))
    assert exporter_of(got) is None


# l09 "trying to lease approved exporters that are offline: pending, Offline, 'none of them are online'"
async def test_l09_approved_exporters_offline_say_none_of_them_are_online(lab: Lab) -> None:
    await lab.apply(policy("test-policy", rule(0, name=CLIENT_NAME)))
    await asyncio.gather(*(lab.offline(name) for name in DUT_A))
    await lab.lease()
    got = await lab.until("lease1", has("Pending", "Offline"))
    assert exporter_of(got) is None
    assert "none of them are online" in message(got, "Pending")


# l10 "exporters that match selector but are not approved by any policy: unsatisfiable with NoAccess reason"
async def test_l10_exporters_approved_by_no_policy_are_no_access(lab: Lab) -> None:
    await lab.apply(policy("test-policy", rule(0, "Requires different-client label", name="different-client")))
    await lab.lease()
    got = await lab.until("lease1", has("Unsatisfiable", "NoAccess"))
    assert exporter_of(got) is None
    text = message(got, "Unsatisfiable")
    assert "none of them are approved by any policy" in text
    assert "Requires different-client label" in text


# l11 "multiple policies containing descriptions, none matching client: all descriptions in the message"
async def test_l11_every_policy_description_is_in_the_no_access_message(lab: Lab) -> None:
    await lab.apply(policy("test-policy-admin", rule(20, "Administrators only", role="admin")),
                    policy("test-policy-ci", rule(5, "CI pipelines only", role="ci")))
    await lab.lease()
    got = await lab.until("lease1", has("Unsatisfiable", "NoAccess"))
    text = message(got, "Unsatisfiable")
    assert "Administrators only" in text and "CI pipelines only" in text and ";" in text


# l12 "policies where some have empty descriptions: only non-empty descriptions, after 'Matching policies:'"
async def test_l12_matching_policies_lists_the_descriptions(lab: Lab) -> None:
    await lab.apply(policy("test-policy-mixed", rule(10, "VIP access rule", role="vip"), rule(1, role="other")))
    await lab.lease()
    got = await lab.until("lease1", has("Unsatisfiable", "NoAccess"))
    text = message(got, "Unsatisfiable")
    assert "VIP access rule" in text and "Matching policies:" in text


# l13 "a policy that has descriptions and matches the client: acquire the lease successfully"
async def test_l13_a_described_policy_that_admits_the_client_grants_at_its_priority(lab: Lab) -> None:
    await lab.apply(policy("test-policy-matching", rule(10, "Standard access for registered clients",
                                                        name=CLIENT_NAME)))
    await lab.lease()
    got = await lab.until("lease1", ready)
    assert exporter_of(got) in DUT_A
    assert got["status"]["priority"] == 10


# l14 "no policies at all and no matching exporters: NoAccess message without policy descriptions"
async def test_l14_no_policies_and_no_exporters_say_nothing_of_policies(lab: Lab) -> None:
    # lessor's reason is ExporterNotFound (nothing matches the selector, DESIGN.md); the peer checks only
    # that the condition exists and mentions no policies.
    await lab.lease(dut="does-not-exist")
    got = await lab.until("lease1", has("Unsatisfiable", "ExporterNotFound"))
    assert "Matching policies:" not in message(got, "Unsatisfiable")


# l15 "some matching exporters are online while others are offline: acquire lease for the online exporters"
async def test_l15_the_online_exporter_is_acquired(lab: Lab) -> None:
    await lab.offline(DUT_A[0])
    await lab.lease()
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_A[1]
    assert lease_of(await lab.get(DUT_A[1], EXPORTER)) == "lease1"


# l16 "online but not ready (running afterLease hook): pending with NotReady reason, 'none are ready'"
async def test_l16_online_exporters_running_hooks_are_not_ready(lab: Lab) -> None:
    await lab.heartbeat(DUT_A[0], "AfterLeaseHook")
    await lab.heartbeat(DUT_A[1], "BeforeLeaseHook")
    await lab.lease()
    got = await lab.until("lease1", has("Pending", "NotReady"))
    assert exporter_of(got) is None
    assert "none are ready" in message(got, "Pending")


# l17 "some are online+ready and others are online+not-ready: only lease from the ready exporter"
async def test_l17_only_the_ready_exporter_is_leased(lab: Lab) -> None:
    await lab.heartbeat(DUT_A[0], "AfterLeaseHook")
    await lab.lease()
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_A[1]


# l18 "trying to lease a busy exporter: should not be acquired" (NotAvailable, "but all of them are already leased")
async def test_l18_a_busy_exporter_is_not_acquired(lab: Lab) -> None:
    await lab.lease(dut="b")
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_B
    assert lease_of(await lab.get(DUT_B, EXPORTER)) == "lease1"
    await lab.lease("lease2", dut="b")
    second = await lab.until("lease2", has("Pending", "NotAvailable"))
    assert exporter_of(second) is None
    assert "but all of them are already leased" in message(second, "Pending")


# l19 "trying to lease a busy exporter: should be acquired when a valid exporter lease times out"
async def test_l19_a_busy_exporter_is_acquired_when_its_lease_times_out(lab: Lab) -> None:
    await lab.lease(dut="b", duration="2s")
    await lab.until("lease1", ready)
    await lab.lease("lease2", dut="b")
    got = await lab.until("lease2", ready)
    assert exporter_of(got) == DUT_B
    assert ended(await lab.get("lease1"))


# l20 "releasing a lease early: should release the lease and exporter right away"
async def test_l20_releasing_early_frees_the_exporter(lab: Lab) -> None:
    await lab.lease()
    held = exporter_of(await lab.until("lease1", ready))
    await lab.patch("lease1", {"release": True})
    got = await lab.until("lease1", ended)
    assert exporter_of(got) == held and has("Ready", "Released", "False")(got)
    await lab.until(held or "", lambda e: lease_of(e) is None, res=EXPORTER)


# l21 "a disabled exporter by ExporterRef: ExporterDisabled reason and helpful message"
async def test_l21_a_disabled_requested_exporter_says_how_to_lease_it(lab: Lab) -> None:
    await lab.enable(DUT_A[0], False)
    await lab.lease(dut=None, exporterRef={"name": DUT_A[0]})
    got = await lab.until("lease1", has("Unsatisfiable", "ExporterDisabled"))
    assert exporter_of(got) is None
    text = message(got, "Unsatisfiable")
    assert "is disabled" in text and "allowDisabled" in text and "--allow-disabled" in text


# l22 "a disabled exporter with allowDisabled: succeed when ExporterRef and AllowDisabled are set"
async def test_l22_allow_disabled_leases_the_disabled_exporter(lab: Lab) -> None:
    await lab.enable(DUT_A[0], False)
    await lab.lease(dut=None, exporterRef={"name": DUT_A[0]}, allowDisabled=True)
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_A[0]


# l23 "selector and some exporters disabled: skip disabled exporters and lease an enabled one"
async def test_l23_disabled_exporters_are_skipped(lab: Lab) -> None:
    await lab.enable(DUT_A[0], False)
    await lab.lease()
    got = await lab.until("lease1", ready)
    assert exporter_of(got) == DUT_A[1]


# l24 "selector and some exporters disabled: unsatisfiable when all matching exporters are disabled"
async def test_l24_all_matching_exporters_disabled_is_unsatisfiable(lab: Lab) -> None:
    await asyncio.gather(*(lab.enable(name, False) for name in DUT_A))
    await lab.lease()
    got = await lab.until("lease1", has("Unsatisfiable", "AllDisabled"))
    assert exporter_of(got) is None
    assert "--allow-disabled" in message(got, "Unsatisfiable")


# q02 "Pending lease queue starvation: pending leases ... while a valid lease arrives: should back off so new
# valid leases are not starved". The peer's backoff is its reconciler's; lessor has none to tune (each lease
# is an actor that waits in its exporters' queues), so what is checked is the user's view: a lease that can be
# granted is, while others wait for offline exporters.
async def test_q02_pending_leases_do_not_starve_a_lease_that_can_be_granted(lab: Lab) -> None:
    await asyncio.gather(*(lab.offline(name) for name in (*DUT_A, DUT_B)))
    waiting = [f"starve-pending-{index}" for index in range(1, 6)]
    await asyncio.gather(*(lab.lease(name) for name in waiting))
    for name in waiting:
        await lab.until(name, has("Pending", "Offline"))
    await lab.heartbeat(DUT_B)
    await lab.lease("starve-valid", dut="b")
    got = await lab.until("starve-valid", ready)
    assert exporter_of(got) == DUT_B
    for name in waiting:
        assert has("Pending", "Offline")(await lab.get(name))
