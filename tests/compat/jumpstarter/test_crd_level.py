"""The CRD-level specs of Jumpstarter's other suites, on lessor, through `lessor convert`:

- controller/api/v1alpha1/lease_helpers_test.go: "LeaseFromProtobuf" (tags kept in the spec and copied onto
  the lease as prefixed labels: h04, h05) and "ValidateLeaseTags" (v01 to v12), which lessor's CRD enforces
  at the API server. Not ported: "ParseLabelSelector" (the `jmp` selector string, gRPC), h01 to h03 (labels
  copied from the selector string and `exporterName`, which only the gRPC layer has), "Lease.ToProtobuf" and
  "LeaseFromProtobuf context" (protobuf conversions).
- controller/internal/service/controller_service_test.go: "TestSyncOnlineConditionWithStatus" (o01 to o09:
  the exporter's `Online` condition from the status its agent reports) and "TestApplyUnregisterStatus"
  (u01: an unregistered exporter is offline and no longer registered). Everything else there is the gRPC
  service (listen queues, dial tokens, authentication).
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest

from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import EXPORTER

from .lab import Lab, at, condition, manifest

pytestmark = pytest.mark.usefixtures("operator")
TAG_LABEL = "metadata.lessor.dev/"  # the peer's is metadata.jumpstarter.dev/ (docs/migrating.md)


@pytest.fixture
async def lab(kube: Gateway, namespace: str) -> Lab:
    made = Lab(kube, namespace)
    await made.standard()
    return made


def labels(obj: Mapping[str, object]) -> Mapping[str, str]:
    return obj["metadata"].get("labels") or {}  # type: ignore[index, union-attr, return-value]


# h04 "should store tags in spec and prefix them in ObjectMeta labels"
async def test_h04_tags_are_kept_in_the_spec_and_prefixed_in_the_labels(lab: Lab) -> None:
    made = await lab.lease(dut="a", tags={"team": "devops", "ci-job": "12345"})
    assert made["spec"]["tags"] == {"team": "devops", "ci-job": "12345"}
    got = await lab.until("lease1", lambda o: TAG_LABEL + "team" in labels(o) and TAG_LABEL + "ci-job" in labels(o))
    assert labels(got)[TAG_LABEL + "team"] == "devops" and labels(got)[TAG_LABEL + "ci-job"] == "12345"


# h05 "should handle lease with no tags"
async def test_h05_a_lease_without_tags_gets_no_tag_labels(lab: Lab) -> None:
    made = await lab.lease(dut="a")
    assert "tags" not in made["spec"]
    got = await lab.until("lease1", lambda o: (o.get("status") or {}).get("exporterRef") is not None)
    assert not [key for key in labels(got) if key.startswith(TAG_LABEL)]


TAG_CASES = [
    # (spec id and name, tags, refused)
    ("v01-accept-empty", {}, False),
    ("v02-accept-valid", {"team": "devops", "ci-job": "12345", "env": "staging"}, False),
    ("v03-reject-more-than-10", {f"key{i}": "value" for i in range(11)}, True),
    ("v04-reject-key-longer-than-63", {"a" * 64: "value"}, True),
    ("v05-reject-value-longer-than-63", {"key": "v" * 64}, True),
    ("v06-reject-invalid-key-characters", {"invalid key!": "value"}, True),
    ("v07-reject-invalid-value-characters", {"key": "invalid value!"}, True),
    ("v08-reject-reserved-prefix-jumpstarter.dev", {"jumpstarter.dev/custom": "value"}, True),
    ("v09-reject-reserved-prefix-metadata.jumpstarter.dev", {"metadata.jumpstarter.dev/team": "value"}, True),
    ("v10-reject-key-containing-slash", {"team/env": "value"}, True),
    ("v11-accept-exactly-10", {f"key{i}": "value" for i in range(10)}, False),
    ("v12-accept-key-and-value-of-63", {"k" * 63: "v" * 63}, False),
]


# v01-v12 "ValidateLeaseTags": the peer's gRPC layer checks tags; lessor's CRD does, so `kubectl apply` is
# refused too. A prefix is refused whatever it is (keys are label names without a prefix), which covers the
# peer's reserved ones.
@pytest.mark.parametrize(("tags", "refused"), [(tags, refused) for _, tags, refused in TAG_CASES],
                         ids=[name for name, _, _ in TAG_CASES])
async def test_v_tags_are_validated_at_the_api_server(kube: Gateway, namespace: str, tags: dict[str, str],
                                                      refused: bool) -> None:
    lab = Lab(kube, namespace)
    if not refused:
        made = await lab.lease(tags=tags)
        assert (made["spec"].get("tags") or {}) == tags
        return
    with pytest.raises(ApiError) as caught:
        await lab.lease(tags=tags)
    assert caught.value.status == 422 and "spec.tags" in str(caught.value)


ONLINE_CASES = [
    # (spec id and name, exporterStatus, Online)
    ("o01-available-is-online", "Available", "True"),
    ("o02-lease-ready-is-online", "LeaseReady", "True"),
    ("o03-before-lease-hook-is-online", "BeforeLeaseHook", "True"),
    ("o04-after-lease-hook-is-online", "AfterLeaseHook", "True"),
    ("o05-before-lease-hook-failed-is-online", "BeforeLeaseHookFailed", "True"),
    ("o06-after-lease-hook-failed-is-online", "AfterLeaseHookFailed", "True"),
    ("o07-offline-is-not-online", "Offline", "False"),
    # Deliberate difference (docs/migrating.md): the peer's controller sets Online=False for these two, as its
    # own gRPC service writes the status; lessor's `Online` is the heartbeat (`lastSeen`), and an agent that
    # reports no state, or Unspecified, is online and ready (DESIGN.md, Exporter).
    ("o08-unspecified-is-online-in-lessor", "Unspecified", "True"),
    ("o09-empty-is-online-in-lessor", "", "True"),
]


# o01-o09 "TestSyncOnlineConditionWithStatus"
@pytest.mark.parametrize(("exporter_status", "online"), [(value, online) for _, value, online in ONLINE_CASES],
                         ids=[name for name, _, _ in ONLINE_CASES])
async def test_o_online_follows_the_reported_status(kube: Gateway, namespace: str, exporter_status: str,
                                                    online: str) -> None:
    lab = Lab(kube, namespace)
    await lab.apply(manifest("Exporter", "exporter", {}, {"dut": "a"}))
    await kube.patch_status(EXPORTER, namespace, "exporter", {"lastSeen": at(0), "exporterStatus": exporter_status})
    got = await lab.until("exporter", lambda o: (condition(o, "Online") or {}).get("status") == online,
                          res=EXPORTER)
    assert (condition(got, "Online") or {}).get("observedGeneration") == got["metadata"]["generation"]


# u01 "TestApplyUnregisterStatus": an exporter whose agent unregisters (reports Offline and no devices) is
# offline, and no longer registered (Registered False, reason Unregister, as the peer's).
async def test_u01_an_unregistered_exporter_is_offline_and_not_registered(kube: Gateway, namespace: str) -> None:
    lab = Lab(kube, namespace)
    await lab.apply(manifest("Exporter", "exporter", {}, {"dut": "a"}))
    await kube.patch_status(EXPORTER, namespace, "exporter",
                            {"lastSeen": at(0), "exporterStatus": "Available", "devices": [{"uuid": "d1"}]})
    await lab.until("exporter", lambda o: (condition(o, "Registered") or {}).get("status") == "True", res=EXPORTER)
    await kube.patch_status(EXPORTER, namespace, "exporter",
                            {"lastSeen": at(0), "exporterStatus": "Offline", "devices": []})
    got = await lab.until("exporter", lambda o: (condition(o, "Registered") or {}).get("reason") == "Unregister",
                          res=EXPORTER)
    assert (condition(got, "Registered") or {}).get("status") == "False"
    got = await lab.until("exporter", lambda o: (condition(o, "Online") or {}).get("status") == "False", res=EXPORTER)
    assert (condition(got, "Online") or {}).get("reason") == "ExporterOffline"
