"""The compiled view of a ResourceProvider: its rules, and its own errors named by field."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.actors.provisioning.provider import Readiness, merge, provider_from

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
SAMPLE = Path(__file__).resolve().parents[2] / "deploy" / "samples" / "50-resourceprovider.yaml"


def provider(**spec: Any) -> dict[str, Any]:
    spec.setdefault("override", {"apiVersion": "v1", "kind": "ConfigMap"})
    return {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceProvider",
            "metadata": {"name": "p", "namespace": "lessor-system"}, "spec": spec}


def test_the_sample_provider_compiles_without_errors() -> None:
    p = provider_from(yaml.safe_load(SAMPLE.read_text()))
    assert p.errors == () and p.valid
    assert (p.name, p.api_version, p.kind) == ("env-configmap", "v1", "ConfigMap")
    assert p.lifespan.default == timedelta(days=1)
    assert p.match_ignore == ("^/metadata/annotations(/.*)?$",)
    assert p.resource_name == "environment"
    assert provider_from(provider()).resource_name == "p"  # resourceName defaults to the provider's name
    assert [check.name for check in p.checks] == ["a large environment needs a reason"]


def test_the_view_is_cached_per_version_and_ignores_status() -> None:
    obj = provider(default={"data": {"size": "small"}})
    first = provider_from(obj)
    assert provider_from(copy.deepcopy(obj)) is first
    assert provider_from({**obj, "status": {"conditions": []}}) is first
    changed = copy.deepcopy(obj)
    changed["spec"]["default"]["data"]["size"] = "large"
    assert provider_from(changed) is not first
    assert provider_from(changed).default == {"data": {"size": "large"}}


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"matchIgnore": ["/spec/(unclosed"]}, "spec.matchIgnore[0]: invalid regular expression '/spec/(unclosed'"),
        ({"updateFilters": [{"pathMatch": "/a", "allowedOps": ["move"]}]},
         "spec.updateFilters[0].allowedOps: ['move'] are not among ['add', 'remove', 'replace']"),
        ({"updateFilters": [{"allowedOps": ["add"]}]}, "spec.updateFilters[0].pathMatch: is required"),
        ({"updateFilters": [{"pathMatch": "["}]}, "spec.updateFilters[0].pathMatch: invalid regular expression"),
        ({"validation": {"openAPIV3Schema": {"type": "banana"}}},
         "spec.validation.openAPIV3Schema.type: 'banana' is not valid"),
        ({"validation": {"openAPIV3Schema": {"properties": {"x": {"type": "string", "pattern": "(?=a)"}}}}},
         "spec.validation.openAPIV3Schema.properties.x.pattern: invalid regular expression '(?=a)' (RE2 syntax)"),
        ({"matchIgnore": ["/spec/(\\w+)\\1"]}, "spec.matchIgnore[0]: invalid regular expression"),
        ({"validation": {"checks": [{"name": "x", "check": "spec.a <"}]}},
         "spec.validation.checks[0].check: syntax error"),
        ({"validation": {"checks": [{"name": "x", "check": " "}]}},
         "spec.validation.checks[0].check: the check has no expression"),
        ({"lifespan": {"maximum": "3 days"}}, "spec.lifespan.maximum: invalid duration '3 days'"),
        ({"readinessCheck": "status.phase =="}, "spec.readinessCheck: syntax error"),
        ({"template": {"enable": True}, "override": {"apiVersion": "v1", "kind": "ConfigMap",
                                                     "metadata": {"name": "{{ resource_handle.metadata.name "}}},
         "spec.override/metadata/name: syntax error"),
        ({"override": {"data": {"a": "b"}}}, "spec.override: sets no apiVersion and kind"),
    ],
)
def test_errors_in_the_provider_name_its_field(spec: dict[str, Any], error: str) -> None:
    p = provider_from(provider(**spec))
    assert not p.valid
    assert any(message.startswith(error) for message in p.errors), p.errors


def test_every_error_of_a_provider_is_reported_at_once() -> None:
    p = provider_from(provider(matchIgnore=["("], lifespan={"default": "x", "unclaimed": "y"}))
    assert [e.split(":")[0] for e in p.errors] == [
        "spec.matchIgnore[0]", "spec.lifespan.default", "spec.lifespan.unclaimed"]


def test_without_template_enable_jinja_in_default_and_override_is_plain_text() -> None:
    p = provider_from(provider(default={"data": {"x": "{{ oops"}},
                               override={"apiVersion": "v1", "kind": "ConfigMap", "data": {"y": "{{ 1 + 1 }}"}}))
    assert p.valid
    assert p.apply_defaults({}, claim=None, index=0, now=NOW) == {"data": {"x": "{{ oops"}}
    assert p.apply_override({}, {})["data"] == {"y": "{{ 1 + 1 }}"}


def test_the_kind_may_come_from_match_when_override_does_not_set_it() -> None:
    p = provider_from(provider(override={}, match={"apiVersion": "example.com/v1", "kind": "Thing"}))
    assert p.valid and (p.api_version, p.kind) == ("example.com/v1", "Thing")


def test_a_templated_kind_in_override_is_fixed_by_the_provider_but_known_only_when_rendered() -> None:
    p = provider_from(provider(template={"enable": True},
                               override={"apiVersion": "v1", "kind": "{{ 'Config' ~ 'Map' }}"}))
    assert p.valid and (p.api_version, p.kind) == ("v1", None)


def test_match_is_a_partial_resource_that_the_template_must_contain() -> None:
    p = provider_from(provider(match={"apiVersion": "v1", "kind": "ConfigMap", "data": {"tier": 1}}))
    assert p.matches({"apiVersion": "v1", "kind": "ConfigMap", "data": {"tier": 1.0, "size": "small"}})
    assert not p.matches({"apiVersion": "v1", "kind": "ConfigMap", "data": {"tier": True}})
    assert not p.matches({"apiVersion": "v1", "kind": "ConfigMap"})
    assert not provider_from(provider()).matches({"apiVersion": "v1", "kind": "ConfigMap"})  # no match: never chosen


def test_a_list_in_match_fits_only_the_same_list() -> None:
    """Objects in `match` are partial; lists are not: `[{"a": 1}]` fits neither a longer list nor richer items."""
    p = provider_from(provider(match={"apiVersion": "v1", "kind": "ConfigMap", "data": {"tags": [{"a": 1}]}}))
    assert p.matches({"apiVersion": "v1", "kind": "ConfigMap", "data": {"tags": [{"a": 1.0}], "more": 2}})
    assert not p.matches({"apiVersion": "v1", "kind": "ConfigMap", "data": {"tags": [{"a": 1}, {"b": 2}]}})
    assert not p.matches({"apiVersion": "v1", "kind": "ConfigMap", "data": {"tags": [{"a": 1, "b": 2}]}})


def test_defaults_go_under_the_template_and_the_override_over_it() -> None:
    p = provider_from(provider(default={"data": {"size": "small", "tags": ["a"]}, "spec": {"x": 1}},
                               override={"apiVersion": "v1", "kind": "ConfigMap", "data": {"owner": "ops"}}))
    template = {"data": {"size": "large", "tags": ["b", "c"]}}
    defaulted = p.apply_defaults(template, claim=None, index=0, now=NOW)
    assert defaulted == {"data": {"size": "large", "tags": ["b", "c"]}, "spec": {"x": 1}}
    assert template == {"data": {"size": "large", "tags": ["b", "c"]}}  # inputs are not changed
    overridden = p.apply_override({"kind": "Secret", "data": {"owner": "me", "size": "large"}}, {})
    assert overridden == {"kind": "ConfigMap", "apiVersion": "v1", "data": {"owner": "ops", "size": "large"}}


def test_templated_defaults_see_the_claim_the_index_and_a_clock_stuck_at_now() -> None:
    p = provider_from(provider(template={"enable": True}, default={"data": {
        "owner": "{{ resource_claim.metadata.name }}", "index": "{{ resource_index }}",
        "until": "{{ timestamp.utcnow.add('1d') }}", "by": "{{ resource_provider.metadata.name }}"}}))
    claim = {"metadata": {"name": "alice-env", "namespace": "lab"}}
    assert p.apply_defaults({}, claim=claim, index=2, now=NOW) == {"data": {
        "owner": "alice-env", "index": 2, "until": "2024-03-02T12:00:00Z", "by": "p"}}


def test_merge_replaces_lists_and_scalars_and_merges_objects() -> None:
    assert merge({"a": {"b": 1, "c": [1]}}, {"a": {"c": [2], "d": None}}) == {"a": {"b": 1, "c": [2], "d": None}}
    assert merge({"a": 1}, {"a": {"b": 2}}) == {"a": {"b": 2}}


# ---------------------------------------------------------------- readiness


def test_without_a_readiness_check_a_resource_is_ready_once_it_exists_unless_its_ready_condition_says_no() -> None:
    p = provider_from(provider())
    assert p.readiness(None, now=NOW) == Readiness(False, "not created yet")
    assert p.readiness({"kind": "ConfigMap", "data": {}}, now=NOW) == Readiness(True)
    pending = {"status": {"conditions": [{"type": "Ready", "status": "False", "reason": "Provisioning",
                                          "message": "waiting for the cloud"}]}}
    assert p.readiness(pending, now=NOW) == Readiness(False, "Ready is False (Provisioning): waiting for the cloud")
    done = {"status": {"conditions": [{"type": "Ready", "status": "True", "reason": "Done"}]}}
    assert p.readiness(done, now=NOW) == Readiness(True)


def test_a_readiness_check_decides_and_an_error_in_it_makes_readiness_unknown() -> None:
    p = provider_from(provider(readinessCheck="status.phase == 'started' and resource_handle.metadata.name != ''"))
    handle = {"metadata": {"name": "guid-abc"}}
    assert p.readiness({"status": {"phase": "started"}}, handle=handle, now=NOW) == Readiness(True)
    assert p.readiness({"status": {"phase": "provisioning"}}, handle=handle, now=NOW) == Readiness(
        False, "readinessCheck is false")
    unknown = p.readiness({"spec": {}}, handle=handle, now=NOW)
    assert unknown.ready is None and unknown.message.startswith("readinessCheck could not be evaluated: undefined")
