"""Claim creation: each resource matched to a provider, defaulted and validated, every error at its field."""

from __future__ import annotations

import copy
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any

import yaml

from lessor.actors.provisioning.claim_spec import (
    bound_templates,
    matches_handle,
    ready_condition,
    resolve_claim,
    resolve_pool,
    resource_state,
    status_resources,
    valid_condition,
)
from lessor.actors.provisioning.provider import Provider, Readiness, provider_from

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
SAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "samples"
SAMPLE_PROVIDER = yaml.safe_load((SAMPLES / "50-resourceprovider.yaml").read_text())
ALICE, BOB = yaml.safe_load_all((SAMPLES / "70-resourceclaims.yaml").read_text())


def providers(*objs: dict[str, Any]) -> dict[str, Provider]:
    compiled = [provider_from(obj) for obj in objs or (SAMPLE_PROVIDER,)]
    return {p.name: p for p in compiled}


def named(name: str, **spec: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": "lessor-system"}, "spec": spec}


def claim(*resources: dict[str, Any], name: str = "c") -> dict[str, Any]:
    return {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": "lab", "creationTimestamp": "2024-03-01T11:00:00Z"},
            "spec": {"resources": list(resources)}}


def env(template: dict[str, Any], provider: str | None = "env-configmap") -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "environment", "template": {"apiVersion": "v1", "kind": "ConfigMap", **template}}
    if provider:
        entry["provider"] = {"name": provider}
    return entry


def errors(spec: Any) -> list[str]:
    return [str(error) for error in spec.all_errors]


# ------------------------------------------------------------------ matching


def test_the_sample_claims_are_valid_by_name_and_by_match() -> None:
    alice = resolve_claim(ALICE, providers(), now=NOW)
    bob = resolve_claim(BOB, providers(), now=NOW)
    assert alice.valid and bob.valid
    assert bob.resources[0].provider is not None and bob.resources[0].provider.name == "env-configmap"
    assert alice.templates == [{"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"}}]


def test_a_template_no_provider_matches_is_a_clear_error() -> None:
    spec = resolve_claim(claim({"template": {"apiVersion": "v1", "kind": "Secret"}}), providers(), now=NOW)
    assert errors(spec) == ["spec.resources[0].provider: no ResourceProvider's match fits the template; "
                            "name one in provider.name"]
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "ProviderNotFound"


def test_a_template_that_several_providers_match_names_them_all() -> None:
    twin = copy.deepcopy(SAMPLE_PROVIDER)
    twin["metadata"]["name"] = "another-configmap"
    spec = resolve_claim(claim(env({"data": {"size": "small"}}, provider=None)),
                         providers(SAMPLE_PROVIDER, twin), now=NOW)
    assert errors(spec) == ["spec.resources[0].provider: the template fits the match of ResourceProviders "
                            "another-configmap, env-configmap; name one in provider.name"]
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "ProviderAmbiguous"


def test_a_named_provider_that_does_not_exist_or_is_broken_is_reported_at_provider_name() -> None:
    spec = resolve_claim(claim(env({}, provider="nope")), providers(), now=NOW)
    assert errors(spec) == ["spec.resources[0].provider.name: there is no ResourceProvider nope"]
    broken = named("broken", override={"apiVersion": "v1", "kind": "ConfigMap"}, matchIgnore=["("])
    spec = resolve_claim(claim(env({}, provider="broken")), providers(broken), now=NOW)
    assert errors(spec)[0].startswith("spec.resources[0].provider.name: ResourceProvider broken is invalid: "
                                      "spec.matchIgnore[0]: invalid regular expression '('")
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "ProviderInvalid"


def test_a_claim_needs_resources() -> None:
    spec = resolve_claim(claim(), providers(), now=NOW)
    assert errors(spec) == ["spec.resources: at least one resource is needed"]


def test_resources_that_are_not_objects_or_not_a_list_are_errors_at_the_field_not_a_crash() -> None:
    """Found by the review fuzzer (a pool whose resources were nulls): the webhook and the operator share this."""
    pool = {"metadata": {"name": "p", "namespace": "lessor-system"},
            "spec": {"resources": [None, "x", env({"data": {"size": "small"}})]}}
    assert errors(resolve_pool(pool, providers(), now=NOW)) == [
        "spec.resources[0]: must be an object (a provider and a template)",
        "spec.resources[1]: must be an object (a provider and a template)"]
    odd = claim()
    odd["spec"]["resources"] = {"provider": {"name": "env-configmap"}}
    assert errors(resolve_claim(odd, providers(), now=NOW)) == [
        "spec.resources: must be a list of resources (each a provider and a template)"]
    assert errors(resolve_claim({**claim(), "spec": "x"}, providers(), now=NOW)) == ["spec: must be an object"]


def test_a_claims_lifespan_outside_1970_to_9000_is_invalid_naming_the_field() -> None:
    body = claim(env({"data": {"size": "small"}}))
    body["spec"]["lifespan"] = {"start": "2024-03-01T12:00:00Z", "end": "0001-01-01T00:00:00Z"}
    spec = resolve_claim(body, providers(), now=NOW)
    assert errors(spec) == ["spec.lifespan.end: timestamp '0001-01-01T00:00:00Z' is out of range: times are "
                            "from 1970-01-01T00:00:00Z to before 9000-01-01T00:00:00Z"]
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "InvalidLifespan"
    body["spec"]["lifespan"]["end"] = "2024-03-02T12:00:00Z"
    assert resolve_claim(body, providers(), now=NOW).valid


def test_a_provider_lifespan_beyond_100_years_makes_it_invalid_naming_the_setting() -> None:
    broken = named("century", override={"apiVersion": "v1", "kind": "ConfigMap"}, lifespan={"maximum": "36501d"})
    spec = resolve_claim(claim(env({}, provider="century")), providers(broken), now=NOW)
    assert errors(spec) == ["spec.resources[0].provider.name: ResourceProvider century is invalid: "
                            "spec.lifespan.maximum: duration '36501d' is out of range: at most 100 years "
                            "(36500d, 876000h)"]


# --------------------------------------------------------- defaults, schema, checks


def test_defaults_fill_the_template_before_it_is_validated() -> None:
    spec = resolve_claim(claim(env({"data": {}})), providers(), now=NOW)
    assert spec.valid
    assert spec.templates[0]["data"] == {"size": "small"}


def test_every_schema_violation_and_failed_check_is_reported_with_its_path() -> None:
    spec = resolve_claim(claim(env({"data": {"size": "huge", "colour": "red"}}),
                               env({"data": {"size": "large"}})), providers(), now=NOW)
    assert errors(spec) == [
        "spec.resources[0].template/data: Additional properties are not allowed ('colour' was unexpected)",
        "spec.resources[0].template/data/size: 'huge' is not one of ['small', 'medium', 'large']",
        "spec.resources[1].template: check 'a large environment needs a reason' failed",
    ]
    condition = valid_condition(spec.all_errors, now=NOW, generation=3)
    assert condition == {"type": "Valid", "status": "False", "reason": "SchemaViolation",
                         "message": "; ".join(errors(spec)), "lastTransitionTime": "2024-03-01T12:00:00Z",
                         "observedGeneration": 3}
    entries = status_resources(spec)
    assert entries[0]["validationError"].count("spec.resources[0]") == 2
    assert entries[1] == {"name": "environment", "provider": {"name": "env-configmap"},
                          "validationError": "spec.resources[1].template: check 'a large environment needs a "
                                             "reason' failed"}


def test_a_valid_claim_has_a_true_valid_condition_and_no_validation_errors() -> None:
    spec = resolve_claim(ALICE, providers(), now=NOW)
    assert valid_condition(spec.all_errors, now=NOW)["status"] == "True"
    assert status_resources(spec) == [{"name": "environment", "provider": {"name": "env-configmap"}}]


def test_status_keeps_reference_and_state_of_a_resource_that_keeps_its_provider() -> None:
    spec = resolve_claim(ALICE, providers(), now=NOW)
    previous = [{"name": "environment", "provider": {"name": "env-configmap"}, "validationError": "old",
                 "reference": {"apiVersion": "v1", "kind": "ConfigMap", "name": "n", "namespace": "lessor-system"},
                 "state": {"data": {"size": "small"}}}]
    kept = {key: value for key, value in previous[0].items() if key != "validationError"}
    assert status_resources(spec, previous) == [kept]  # the old error is gone, the state stays
    moved = [{**previous[0], "provider": {"name": "another"}}]
    assert status_resources(spec, moved) == [{"name": "environment", "provider": {"name": "env-configmap"}}]


# ------------------------------------------------------------------ security


def test_a_claim_cannot_choose_the_namespace_name_or_kind_or_forge_operator_labels() -> None:
    template = {"kind": "Secret", "metadata": {"namespace": "kube-system", "name": "admin-token",
                                               "labels": {"lessor.dev/resource-claim-name": "someone-else"}},
                "data": {"size": "small"}}
    spec = resolve_claim(claim(env(template)), providers(), now=NOW)
    assert errors(spec)[:4] == [
        "spec.resources[0].template/metadata/namespace: a claim cannot choose the namespace of its resource: "
        "ResourceProvider env-configmap places it",
        "spec.resources[0].template/metadata/name: ResourceProvider env-configmap does not let a claim name its "
        "resource: the name is made from the handle's guid (metadata.generateName sets a prefix); a provider whose "
        "validation.openAPIV3Schema declares metadata.name lets claims name theirs",
        "spec.resources[0].template/metadata/labels/lessor.dev~1resource-claim-name: lessor.dev/ labels are set "
        "by the operator only",
        "spec.resources[0].template/kind: ResourceProvider env-configmap makes kind 'ConfigMap'; a claim cannot "
        "change it to 'Secret'",
    ]
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "Forbidden"


def test_a_claim_cannot_tie_its_resource_to_another_objects_lifecycle() -> None:
    template = {"metadata": {"ownerReferences": [{"apiVersion": "v1", "kind": "Namespace", "name": "x", "uid": "u"}],
                             "finalizers": ["example.com/never"]}, "data": {"size": "small"}}
    spec = resolve_claim(claim(env(template)), providers(), now=NOW)
    assert [error.field for error in spec.all_errors] == ["spec.resources[0].template/metadata/ownerReferences",
                                                          "spec.resources[0].template/metadata/finalizers"]


def test_a_field_outside_the_schema_is_refused() -> None:
    spec = resolve_claim(claim(env({"data": {"size": "small", "privileged": "true"}})), providers(), now=NOW)
    assert errors(spec) == ["spec.resources[0].template/data: Additional properties are not allowed "
                            "('privileged' was unexpected)"]


def test_a_claims_jinja_payload_is_inert_data() -> None:
    payload = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    spec = resolve_claim(claim(env({"data": {"size": "small", "reason": payload}})), providers(), now=NOW)
    assert spec.valid
    assert spec.templates[0]["data"]["reason"] == payload


def test_a_sandbox_escape_in_a_providers_check_or_default_is_a_validation_error_not_a_crash() -> None:
    escaping_check = named("check-escape", override={"apiVersion": "v1", "kind": "ConfigMap"}, validation={
        "checks": [{"name": "sneaky", "check": "data.__class__.__mro__[1].__subclasses__() | length > 0"}]})
    spec = resolve_claim(claim(env({"data": {}}, provider="check-escape")), providers(escaping_check), now=NOW)
    assert len(errors(spec)) == 1 and errors(spec)[0].startswith(
        "spec.resources[0].template: check 'sneaky' could not be evaluated: refused by the sandbox: "
        "access to attribute '__class__'")
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "CheckFailed"
    escaping_default = named("default-escape", override={"apiVersion": "v1", "kind": "ConfigMap"},
                             template={"enable": True}, default={"data": {"x": "{{ resource_claim.__class__ }}"}})
    spec = resolve_claim(claim(env({}, provider="default-escape")), providers(escaping_default), now=NOW)
    assert [e.reason for e in spec.all_errors] == ["ProviderTemplateError"]
    assert errors(spec)[0].startswith("spec.resources[0].provider.name: ResourceProvider default-escape could "
                                      "not render /spec/default/data/x: refused by the sandbox")


# ------------------------------------------------------------------ pools and binding


def test_pool_templates_are_defaulted_and_validated_without_the_claim_only_restrictions() -> None:
    pool = named("envs", resources=[env({"metadata": {"name": "fixed-name"}})])
    spec = resolve_pool(pool, providers(), now=NOW)
    assert spec.valid and spec.templates[0]["data"] == {"size": "small"}
    about_claims = copy.deepcopy(SAMPLE_PROVIDER)
    about_claims["spec"]["validation"]["checks"] = [
        {"name": "recent", "check": "resource_claim.metadata.creationTimestamp > '2020-01-01T00:00:00Z'"}]
    assert resolve_pool(pool, providers(about_claims), now=NOW).valid  # checks are about claims; pools have none
    unnamed = named("envs", resources=[env({}, provider=None)])
    assert errors(resolve_pool(unnamed, providers(), now=NOW)) == ["spec.resources[0].provider.name: is required"]


def handle_with(template: dict[str, Any], provider: str = "env-configmap") -> dict[str, Any]:
    return {"metadata": {"name": "guid-abc", "namespace": "lessor-system"},
            "spec": {"resources": [{"name": "environment", "provider": {"name": provider}, "template": template}]}}


def test_a_pool_handle_is_used_when_templates_are_equal_except_at_match_ignore_paths() -> None:
    spec = resolve_claim(claim(env({"metadata": {"annotations": {"team": "blue"}}, "data": {"size": "small"}})),
                         providers(), now=NOW)
    pooled = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"},
              "metadata": {"annotations": {"pool": "envs"}}}
    assert matches_handle(spec, handle_with(pooled))
    assert not matches_handle(spec, handle_with({**pooled, "data": {"size": "medium"}}))
    assert not matches_handle(spec, handle_with(pooled, provider="other"))
    assert bound_templates(spec, handle_with(pooled)) == [
        {"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"},
         "metadata": {"annotations": {"pool": "envs", "team": "blue"}}}]


def test_an_invalid_claim_binds_no_handle() -> None:
    spec = resolve_claim(claim(env({"data": {"size": "huge"}})), providers(), now=NOW)
    assert not matches_handle(spec, handle_with({"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "huge"}}))


def test_a_new_handle_takes_the_defaulted_templates_and_the_least_lifespan_of_its_providers() -> None:
    short = named("short", override={"apiVersion": "v1", "kind": "Secret"}, lifespan={"maximum": "2d", "default": "3d"})
    spec = resolve_claim(claim(env({}), {"provider": {"name": "short"}, "template": {}}),
                         providers(SAMPLE_PROVIDER, short), now=NOW)
    assert spec.handle_resources() == [
        {"name": "environment", "provider": {"name": "env-configmap"},
         "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"}}},
        {"name": "short", "provider": {"name": "short"}, "template": {}},
    ]
    assert (spec.lifespan.default, spec.lifespan.maximum, spec.lifespan.relative_maximum) == (
        timedelta(days=1), timedelta(days=2), timedelta(days=3))


# ------------------------------------------------------------------ state and readiness


def test_a_resources_state_is_copied_without_managed_fields() -> None:
    obj = {"kind": "ConfigMap", "metadata": {"name": "n", "managedFields": [{"manager": "lessor"}]}, "data": {}}
    assert resource_state(obj) == {"kind": "ConfigMap", "metadata": {"name": "n"}, "data": {}}
    assert obj["metadata"]["managedFields"]  # the original is untouched


def test_ready_only_when_every_resource_is_ready() -> None:
    ready = ready_condition([("spec.resources[0] (environment)", Readiness(True))], now=NOW)
    assert (ready["status"], ready["reason"]) == ("True", "Ready")
    waiting = ready_condition([("spec.resources[0] (a)", Readiness(True)),
                               ("spec.resources[1] (b)", Readiness(False, "not created yet"))], now=NOW)
    assert (waiting["status"], waiting["reason"], waiting["message"]) == (
        "False", "ResourcesNotReady", "spec.resources[1] (b): not created yet")
    unknown = ready_condition([("spec.resources[0] (a)", Readiness(None, "readinessCheck could not be evaluated"))],
                              now=NOW)
    assert (unknown["status"], unknown["reason"]) == ("Unknown", "ReadinessCheckFailed")


def test_a_pool_in_provider_mode_resolves_as_a_claim_with_those_values_would_by_the_schema_only() -> None:
    sized = named("sized", override={"apiVersion": "v1", "kind": "ConfigMap"},
                  parameters=[{"name": "size", "required": True, "validation": {"openAPIV3Schema": {
                      "type": "string", "enum": ["small", "large"]}}}, {"name": "count", "validation": {
                          "openAPIV3Schema": {"type": "integer", "default": 1}}}],
                  template={"definition": {"data": {"size": "{{ size }}"}}},
                  validation={"checks": [{"name": "claims only", "check": "resource_claim.spec.x == 1"}]})
    pool = {"metadata": {"name": "p", "namespace": "lessor-system"},
            "spec": {"provider": {"name": "sized", "parameterValues": {"size": "large"}}}}
    spec = resolve_pool(pool, providers(sized), now=NOW)
    assert spec.valid and spec.templates == [{"data": {"size": "large"}}]
    assert spec.provider_reference() == {"name": "sized", "parameterValues": {"size": "large", "count": 1}}
    as_claim = resolve_claim({**claim(), "spec": {"provider": {"name": "sized", "parameterValues": {"size": "large"}}}},
                             providers(sized), now=NOW)
    assert not as_claim.valid  # the provider's checks judge claims
    assert as_claim.templates == spec.templates  # the same rendering: a claim with these values matches its handles

    huge = {**pool, "spec": {"provider": {"name": "sized", "parameterValues": {"size": "huge"}}}}
    assert [e.field for e in resolve_pool(huge, providers(sized), now=NOW).all_errors] == [
        "spec.provider.parameterValues.size"]
    both = {**pool, "spec": {**pool["spec"], "resources": [{"provider": {"name": "sized"}}]}}
    assert errors(resolve_pool(both, providers(sized), now=NOW)) == [
        "spec.provider: a pool gives either spec.provider (a provider and its parameter values) or spec.resources, "
        "not both"]
