"""Claim updates: old → new template as add/remove/replace, filtered by updateFilters, refusals with paths."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from typing import Any

from lessor.actors.provisioning.claim_spec import resolve_claim, status_resources, valid_condition
from lessor.actors.provisioning.claim_updates import plan_claim_update, plan_update
from lessor.actors.provisioning.provider import Provider, provider_from
from lessor.model.jsonpatch import apply

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
SCHEMA = {"type": "object", "properties": {
    "data": {"type": "object", "properties": {
        "size": {"type": "string", "enum": ["small", "medium", "large"]},
        "owner": {"type": "string"},
        "created": {"type": "string"},
        "vars": {"type": "object", "additionalProperties": {"type": "string"}}}}}}


def provider(name: str = "env", **spec: Any) -> Provider:
    spec.setdefault("override", {"apiVersion": "v1", "kind": "ConfigMap"})
    spec.setdefault("validation", {"openAPIV3Schema": SCHEMA})
    spec.setdefault("updateFilters", [{"pathMatch": "/data/size", "allowedOps": ["replace"]},
                                      {"pathMatch": "/data/vars(/.*)?"}])
    return provider_from({"metadata": {"name": name, "namespace": "lessor-system"}, "spec": spec})


def claim(*templates: dict[str, Any], provider_name: str = "env") -> dict[str, Any]:
    return {"metadata": {"name": "c", "namespace": "lab", "creationTimestamp": "2024-03-01T11:00:00Z"},
            "spec": {"resources": [{"provider": {"name": provider_name}, "template": t} for t in templates]}}


def bound_handle(c: dict[str, Any], providers: dict[str, Provider]) -> dict[str, Any]:
    spec = resolve_claim(c, providers, now=NOW)
    return {"metadata": {"name": "guid-abc", "namespace": "lessor-system"},
            "spec": {"resourceClaim": {"name": "c", "namespace": "lab"}, "resources": spec.handle_resources()}}


def changed(c: dict[str, Any], **data: Any) -> dict[str, Any]:
    new = copy.deepcopy(c)
    new["spec"]["resources"][0]["template"]["data"].update(data)
    return new


OLD = claim({"data": {"size": "small", "owner": "alice", "vars": {"region": "eu"}}})
PROVIDERS = {"env": provider()}


def test_an_allowed_change_reaches_the_handle_as_a_patch() -> None:
    handle = bound_handle(OLD, PROVIDERS)
    update = plan_claim_update(OLD, changed(OLD, size="large"), handle, PROVIDERS, now=NOW)
    assert update.refused == () and update.changed
    assert update.handle_patch(handle) == [
        {"op": "replace", "path": "/spec/resources/0/template/data/size", "value": "large"}]
    patched = apply(handle, update.handle_patch(handle))
    assert patched["spec"]["resources"][0]["template"]["data"]["size"] == "large"


def test_a_change_no_filter_allows_is_refused_with_its_path_and_not_applied() -> None:
    handle = bound_handle(OLD, PROVIDERS)
    update = plan_claim_update(OLD, changed(OLD, size="medium", owner="mallory"), handle, PROVIDERS, now=NOW)
    assert [str(change) for change in update.refused] == [
        "spec.resources[0].template/data/owner: replace is not allowed by ResourceProvider env's updateFilters"]
    assert update.handle_patch(handle) == [
        {"op": "replace", "path": "/spec/resources/0/template/data/size", "value": "medium"}]


def test_refusals_show_on_the_claim_as_validation_errors_and_in_the_valid_condition() -> None:
    new = changed(OLD, owner="mallory")
    update = plan_claim_update(OLD, new, bound_handle(OLD, PROVIDERS), PROVIDERS, now=NOW)
    spec = resolve_claim(new, PROVIDERS, now=NOW)
    entry = status_resources(spec, extra=update.errors)[0]
    assert entry["validationError"] == ("spec.resources[0].template/data/owner: replace is not allowed by "
                                        "ResourceProvider env's updateFilters")
    condition = valid_condition([*spec.all_errors, *update.errors], now=NOW)
    assert (condition["status"], condition["reason"]) == ("False", "UpdateRefused")


def test_without_update_filters_no_update_is_allowed() -> None:
    providers = {"env": provider(updateFilters=[])}
    update = plan_claim_update(OLD, changed(OLD, size="large"), bound_handle(OLD, providers), providers, now=NOW)
    assert not update.changed
    assert [(c.op, c.path, c.cause) for c in update.refused] == [("replace", "/data/size", "NotAllowed")]


def test_a_renamed_key_is_a_remove_and_an_add_each_judged_never_a_move() -> None:
    new = copy.deepcopy(OLD)
    new["spec"]["resources"][0]["template"]["data"]["vars"] = {"zone": "eu"}
    update = plan_claim_update(OLD, new, bound_handle(OLD, PROVIDERS), PROVIDERS, now=NOW)
    assert [op["op"] for op in update.resources[0].applied] == ["remove", "add"]
    narrow = {"env": provider(updateFilters=[{"pathMatch": "/data/vars/.*", "allowedOps": ["add"]}])}
    update = plan_claim_update(OLD, new, bound_handle(OLD, narrow), narrow, now=NOW)
    assert [op["path"] for op in update.resources[0].applied] == ["/data/vars/zone"]
    assert [(c.op, c.path) for c in update.refused] == [("remove", "/data/vars/region")]


def test_whatever_the_filters_allow_a_claim_cannot_move_rename_or_retype_its_resource() -> None:
    permissive = {"env": provider(updateFilters=[{"pathMatch": ".*"}], validation={})}
    handle = bound_handle(OLD, permissive)
    new = copy.deepcopy(OLD)
    template = new["spec"]["resources"][0]["template"]
    template["kind"] = "Secret"
    template["metadata"] = {"namespace": "kube-system"}
    template["data"]["size"] = "large"
    update = plan_claim_update(OLD, new, handle, permissive, now=NOW)
    assert sorted((c.path, c.cause) for c in update.refused) == [
        ("/kind", "Forbidden"), ("/metadata", "Forbidden")]
    assert update.refused[0].message.endswith("a claim cannot, whatever the updateFilters allow")
    assert update.handle_patch(handle) == [
        {"op": "replace", "path": "/spec/resources/0/template/data/size", "value": "large"}]


def test_templated_defaults_do_not_look_like_changes() -> None:
    providers = {"env": provider(template={"enable": True}, default={"data": {"created": "{{ timestamp.utcnow }}"}})}
    handle = bound_handle(OLD, providers)  # created at NOW
    later = NOW + timedelta(hours=5)
    update = plan_claim_update(OLD, changed(OLD, size="large"), handle, providers, now=later)
    assert update.refused == ()
    assert [op["path"] for op in update.resources[0].applied] == ["/data/size"]


def test_an_update_whose_result_breaks_the_schema_is_refused_whole() -> None:
    handle = bound_handle(OLD, PROVIDERS)
    update = plan_claim_update(OLD, changed(OLD, size="gigantic", vars={"region": "us"}), handle, PROVIDERS, now=NOW)
    assert not update.changed
    assert {(c.path, c.cause) for c in update.refused} == {("/data/size", "Invalid"), ("/data/vars/region", "Invalid")}
    assert "'gigantic' is not one of ['small', 'medium', 'large']" in update.refused[0].message


def test_a_change_that_no_longer_applies_to_the_handle_is_a_conflict() -> None:
    handle = bound_handle(OLD, PROVIDERS)
    del handle["spec"]["resources"][0]["template"]["data"]["vars"]  # e.g. a pool handle that never had them
    new = copy.deepcopy(OLD)
    del new["spec"]["resources"][0]["template"]["data"]["vars"]["region"]
    update = plan_claim_update(OLD, new, handle, PROVIDERS, now=NOW)
    assert [(c.op, c.path, c.cause) for c in update.refused] == [("remove", "/data/vars/region", "Conflict")]


def test_resources_cannot_be_added_removed_or_given_another_provider_once_bound() -> None:
    providers = {"env": provider(), "other": provider("other")}
    handle = bound_handle(OLD, providers)
    two = claim(OLD["spec"]["resources"][0]["template"], {"data": {}})
    assert [str(e) for e in plan_claim_update(OLD, two, handle, providers, now=NOW).errors] == [
        "spec.resources: resources cannot be added or removed once the claim is bound: the handle has 1, "
        "the claim asks for 2"]
    moved = claim(OLD["spec"]["resources"][0]["template"], provider_name="other")
    update = plan_update(resolve_claim(OLD, providers, now=NOW).templates, resolve_claim(moved, providers, now=NOW),
                         handle, claim=moved, now=NOW)
    assert [str(e) for e in update.errors] == [
        "spec.resources[0].provider.name: the provider cannot change once bound (the handle uses env)"]
    assert update.handle_patch(handle) == []


def test_without_the_old_claim_the_handles_templates_are_the_baseline() -> None:
    handle = bound_handle(OLD, PROVIDERS)
    new = resolve_claim(changed(OLD, size="large"), PROVIDERS, now=NOW)
    update = plan_update([], new, handle, claim=changed(OLD, size="large"), now=NOW)
    assert [op["path"] for op in update.resources[0].applied] == ["/data/size"]
