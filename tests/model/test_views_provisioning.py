"""The provisioning kinds' views read what the actors decide on, and read any malformed shape as missing."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from lessor.model.labels import POOL_NAME, POOL_SCALING
from lessor.model.views.conditions import Condition
from lessor.model.views.provisioning import ClaimView, HandleView, PoolView, ProviderView, ScalingView, view_of

T0 = datetime(2026, 11, 26, 10, tzinfo=UTC)
T1 = datetime(2026, 11, 26, 11, tzinfo=UTC)

#: Shapes a user (or an older lessor) may have written where an object, a list or a time belongs.
JUNK: list[Any] = [None, "text", 7, True, [], ["x"], {"name": 5}]


def test_a_claim_reads_what_its_actor_decides_on() -> None:
    claim = ClaimView.of({
        "metadata": {"name": "c1", "namespace": "lab", "annotations": {POOL_NAME: "fast"}},
        "spec": {"resources": [{"provider": {"name": "env"}, "template": {}}, "junk"],
                 "provider": {"name": "cloud", "parameterValues": {"size": 2}},
                 "lifespan": {"start": "2026-11-26T10:00:00Z", "end": "2026-11-26T11:00:00Z"},
                 "vars": {"a": 1}, "disableCreation": True, "autoDelete": {"when": "true"},
                 "autoDetach": {"when": "  "}},
        "status": {"resourceHandle": {"name": "guid-1", "detached": True},
                   "lifespan": {"start": "2026-11-26T10:00:00Z", "end": "2026-11-26T11:00:00Z",
                                "firstReady": "2026-11-26T10:00:00Z"},
                   "provider": {"name": "cloud", "parameterValues": {"size": 1}}}})
    assert claim.resources == ({"provider": {"name": "env"}, "template": {}}, {})  # index for index
    assert (claim.provider_name, claim.parameter_values_given) == ("cloud", {"size": 2})
    assert claim.applied_provider == {"name": "cloud", "parameterValues": {"size": 1}}
    assert (claim.requested_start, claim.requested_end, claim.requested_end_text) == (T0, T1, "2026-11-26T11:00:00Z")
    assert (claim.lifespan_start, claim.lifespan_end, claim.first_ready) == (T0, T1, T0)
    assert claim.resource_handle == "guid-1" and claim.detached and claim.handle_ref is not None
    assert claim.vars == {"a": 1} and claim.disable_creation and claim.pinned_pool == "fast"
    assert claim.when("autoDelete") == "true" and claim.when("autoDetach") is None


@pytest.mark.parametrize("junk", JUNK)
def test_a_malformed_claim_reads_as_missing(junk: Any) -> None:
    claim = ClaimView.of({"metadata": {"annotations": junk}, "spec": {  # `true` is a value, not a malformed one
        "resources": junk, "provider": junk, "lifespan": junk, "vars": junk, "disableCreation": junk,
        "autoDelete": junk}, "status": {"resourceHandle": junk, "lifespan": junk, "provider": junk}})
    assert claim.resources == () or all(entry == {} for entry in claim.resources)
    assert claim.provider_name is None and claim.parameter_values_given is None
    assert claim.applied_provider in ({}, {"name": 5})
    assert (claim.requested_start, claim.requested_end, claim.requested_end_text) == (None, None, None)
    assert (claim.lifespan_start, claim.lifespan_end, claim.first_ready) == (None, None, None)
    assert claim.resource_handle is None and not claim.detached
    assert claim.vars in ({}, {"name": 5}) and claim.disable_creation is (junk is True) and claim.pinned_pool is None
    assert claim.when("autoDelete") is None


def test_an_unreadable_requested_time_is_given_as_written_for_the_rules_to_name() -> None:
    claim = ClaimView.of({"spec": {"lifespan": {"end": "tomorrow"}}})
    assert claim.requested_end is None and claim.requested_end_text == "tomorrow"
    assert ClaimView.of({"spec": {"lifespan": "soon"}}).lifespan_given == "soon"


def test_a_handle_reads_what_its_actor_and_its_claim_decide_on() -> None:
    body = {
        "metadata": {"name": "guid-k3x9", "namespace": "ops", "generateName": "guid-", "generation": 4,
                     "labels": {POOL_SCALING: "burst"}},
        "spec": {"resourceClaim": {"name": "c1", "namespace": "lab"}, "resourcePool": {"name": "fast"},
                 "provider": {"name": "cloud"}, "resources": [{"provider": {"name": "env"}}],
                 "lifespan": {"end": "2026-11-26T11:00:00Z"}, "vars": {"a": 1}, "preferenceScore": 7,
                 "resourceLabels": {"team": "qa"}},
        "status": {"ready": True, "healthy": False, "resources": [{"state": {}}],
                   "conditions": [{"type": "Ready"}, {"type": "Rendered", "status": "True", "observedGeneration": 4}]}}
    handle = HandleView.of(body)
    assert handle.claim == ("lab", "c1") and handle.pooled and handle.pool == "fast"
    assert handle.provider == {"name": "cloud"} and handle.resources == ({"provider": {"name": "env"}},)
    assert handle.reported == ({"state": {}},) and handle.lifespan_end == T1 and handle.vars == {"a": 1}
    assert handle.preference_score == 7.0 and handle.resource_labels == {"team": "qa"}
    assert handle.ready and not handle.healthy and HandleView.ready_of(body) and not HandleView.healthy_of(body)
    assert handle.rendered == Condition("Rendered", "True", observed_generation=4)
    assert handle.refusal is None
    refused = {"type": "Rendered", "status": "False", "reason": "TemplateError"}
    assert HandleView.of({"status": {"conditions": ["junk", refused]}}).refusal == \
        Condition("Rendered", "False", "TemplateError")
    assert handle.scaling == "burst" == HandleView.scaling_of(body) and handle.guid == "k3x9"


@pytest.mark.parametrize("junk", JUNK)
def test_a_malformed_handle_reads_as_missing(junk: Any) -> None:
    body = {"metadata": {"name": "plain", "labels": junk, "generateName": junk},
            "spec": {"resourceClaim": junk, "resourcePool": junk, "provider": junk, "resources": junk,
                     "lifespan": junk, "vars": junk, "preferenceScore": junk, "resourceLabels": junk},
            "status": {"ready": junk, "resources": junk, "conditions": junk}}
    handle = HandleView.of(body)
    assert handle.claim is None and handle.pool is None and handle.lifespan_end is None
    assert handle.provider in (None, {}, {"name": 5}) and handle.vars in ({}, {"name": 5})
    assert all(entry == {} for entry in handle.resources) and all(entry == {} for entry in handle.reported)
    assert handle.preference_score == (7.0 if junk == 7 else 0.0)  # a number is a number, anything else none
    assert handle.ready is (junk is True) and handle.healthy and handle.rendered is None and handle.refusal is None
    assert handle.scaling is None and handle.guid == "plain"


def test_a_handle_without_generate_name_keeps_its_guid_after_the_guid_prefix() -> None:
    assert HandleView.of({"metadata": {"name": "guid-abc"}}).guid == "abc"
    assert HandleView.of({"metadata": {"name": "mine"}}).guid == "mine"


def test_a_pool_reads_its_settings_and_what_its_claims_must_use() -> None:
    pool = PoolView.of({"spec": {"minAvailable": 3, "maxUnready": 1, "preferenceScore": 2,
                                 "deleteUnhealthyResourceHandles": True, "vars": {"a": 1},
                                 "resources": [{"provider": {"name": "env"}}, "junk"]}})
    assert (pool.min_available, pool.max_unready, pool.preference_score, pool.delete_unhealthy) == (3, 1, 2, True)
    assert pool.uses == ("resources", ("env", None)) and pool.carried("vars") == {"a": 1}
    assert PoolView.of({"spec": {"provider": {"name": "cloud"}}}).uses == ("provider", "cloud")


@pytest.mark.parametrize("junk", [*JUNK, "3x"])
def test_a_malformed_pool_reads_as_missing(junk: Any) -> None:
    pool = PoolView.of({"spec": {"minAvailable": junk, "maxUnready": junk, "preferenceScore": junk,
                                 "deleteUnhealthyResourceHandles": junk, "vars": junk, "resources": junk}})
    assert pool.min_available == (7 if junk == 7 and junk is not True else 0)
    assert pool.max_unready == (7 if junk == 7 and junk is not True else None)
    assert pool.delete_unhealthy is (junk is True) and pool.carried("vars") in (None, {"name": 5})


def test_a_provider_reads_its_definition_fields() -> None:
    provider = ProviderView.of({"metadata": {"name": "env"}, "spec": {
        "disableCreation": True, "vars": {"a": 1}, "lifespan": {"maximum": "1d"},
        "statusSummaryTemplate": {"url": "{{ guid }}"}, "resourceName": "db", "resourceRequiresClaim": True}})
    assert provider.name == "env" and provider.disable_creation and provider.vars == {"a": 1}
    assert provider.lifespan == {"maximum": "1d"} and provider.status_summary_template == {"url": "{{ guid }}"}
    assert provider.resource_name == "db" and provider.resource_requires_claim


@pytest.mark.parametrize("junk", [*JUNK, {}])
def test_a_malformed_provider_reads_as_missing(junk: Any) -> None:
    provider = ProviderView.of({"spec": {"disableCreation": junk, "vars": junk, "lifespan": junk,
                                         "statusSummaryTemplate": junk, "resourceName": junk}})
    assert provider.disable_creation is (junk is True) and provider.lifespan in ({}, {"name": 5})
    assert provider.status_summary_template in (None, {"name": 5}) and provider.resource_name in (None, "text")


def test_a_scaling_names_its_pool_and_keeps_a_malformed_name_for_the_webhook() -> None:
    assert ScalingView.of({"spec": {"resourcePool": {"name": "fast"}}}).pool == "fast"
    scaling = ScalingView.of({"spec": {"resourcePool": {"name": 5}}})
    assert scaling.pool is None and scaling.pool_given == 5
    assert ScalingView.of({"spec": {"resourcePool": "fast"}}).pool_given is None


def test_an_actor_builds_the_view_of_an_object_once() -> None:
    body: dict[str, Any] = {"metadata": {"name": "c1"}}
    first = view_of(ClaimView, body, None)
    assert view_of(ClaimView, body, first) is first
    assert view_of(ClaimView, dict(body), first) is not first  # another version (even an equal one): read anew
