"""The rules that let Poolboy's providers port, as pure functions: claims that name their resources where the
provider's schema declares `metadata.name`, checks that see vars, lifespan settings written as templates,
link-only providers and linked values (refused unless the linked provider trusts them)."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Any

from lessor.actors.provisioning.claim_spec import resolve_claim, valid_condition
from lessor.actors.provisioning.lifespan import LifespanConfig, combine, rendered_lifespan
from lessor.actors.provisioning.provider import Provider, provider_from
from lessor.actors.provisioning.validity import provider_errors

NOW = datetime(2030, 1, 1, tzinfo=timezone.utc)
KIND = {"apiVersion": "v1", "kind": "ConfigMap"}
NAMED = {"type": "object", "properties": {"metadata": {"type": "object", "properties": {
    "name": {"type": "string", "pattern": "^app-[a-z0-9]+$"}}}}}


def provider(name: str, **spec: Any) -> Provider:
    return provider_from({"metadata": {"name": name, "namespace": "lessor-system"}, "spec": spec})


def claim(*resources: dict[str, Any], annotations: dict[str, str] | None = None, **spec: Any) -> dict[str, Any]:
    metadata: dict[str, Any] = {"name": "c", "namespace": "u", "creationTimestamp": "2030-01-01T00:00:00Z"}
    if annotations is not None:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": {"resources": list(resources), **spec} if resources else spec}


def errors(*providers: Provider, **claim_spec: Any) -> list[str]:
    spec = resolve_claim(claim(**claim_spec) if "resources" not in claim_spec else
                         claim(*claim_spec.pop("resources"), **claim_spec),
                         {p.name: p for p in providers}, now=NOW)
    return [str(error) for error in spec.all_errors]


# ------------------------------------------------------------------- naming


def test_a_claim_names_its_resource_where_the_providers_schema_declares_metadata_name() -> None:
    named = provider("named", override=KIND, validation={"openAPIV3Schema": NAMED})
    assert named.claims_name_resources
    assert errors(named, resources=[{"provider": {"name": "named"}, "template": {"metadata": {"name": "app-a"}}}]) == []
    # the schema still judges the name
    [wrong] = errors(named, resources=[{"provider": {"name": "named"}, "template": {"metadata": {"name": "x"}}}])
    assert "template/metadata/name" in wrong and "does not match" in wrong


def test_elsewhere_a_claim_naming_its_resource_is_forbidden_and_told_how_a_provider_allows_it() -> None:
    plain = provider("plain", override=KIND)
    assert not plain.claims_name_resources
    [refusal] = errors(plain, resources=[{"provider": {"name": "plain"}, "template": {"metadata": {"name": "app-a"}}}])
    assert "does not let a claim name its resource" in refusal and "declares metadata.name" in refusal
    # a claim never places its resource, whatever the schema says
    named = provider("named", override=KIND, validation={"openAPIV3Schema": NAMED})
    [placed] = errors(named, resources=[{"provider": {"name": "named"},
                                         "template": {"metadata": {"name": "app-a", "namespace": "kube-system"}}}])
    assert "cannot choose the namespace" in placed


# ------------------------------------------------------------------- checks see vars


def test_checks_see_the_providers_vars() -> None:
    """Poolboy's vars-02: `spec.count <= count_maximum` with `vars: {count_maximum: 10}`."""
    counted = provider("counted", override=KIND, vars={"count_minimum": 1, "count_maximum": 10},
                       validation={"checks": [{"name": "minimum count", "check": "spec.count >= count_minimum"},
                                              {"name": "maximum count", "check": "spec.count <= count_maximum"}]})

    def with_count(count: int) -> list[str]:
        return errors(counted, resources=[{"provider": {"name": "counted"}, "template": {"spec": {"count": count}}}])

    assert with_count(3) == []
    assert with_count(11) == ["spec.resources[0].template: check 'maximum count' failed"]
    assert with_count(0) == ["spec.resources[0].template: check 'minimum count' failed"]


def test_a_bound_claims_checks_see_its_handles_vars_which_win() -> None:
    """Poolboy's vars-03: raising a var on the handle makes a claim valid that the provider's value refuses."""
    windowed = provider("windowed", override=KIND, vars={"maximum_interval": "1h"},
                        validation={"checks": [{"name": "window", "check":
                                                "spec.end | to_datetime('%Y-%m-%dT%H:%M:%S%z') - now(true) < "
                                                "maximum_interval | parse_time_interval"}]})
    resources = [{"provider": {"name": "windowed"}, "template": {"spec": {"end": "2030-01-01T01:20:00Z"}}}]
    spec = resolve_claim(claim(*resources), {"windowed": windowed}, now=NOW)
    assert [str(e) for e in spec.all_errors] == ["spec.resources[0].template: check 'window' failed"]
    handle = {"metadata": {"name": "guid-abcde"}, "spec": {"vars": {"maximum_interval": "2h"}}}
    assert resolve_claim(claim(*resources), {"windowed": windowed}, now=NOW, handle=handle).valid


def test_a_var_that_cannot_render_is_the_providers_error_not_a_failed_check() -> None:
    broken = provider("broken", override=KIND, vars={"limit": "{{ nope }}"},
                      validation={"checks": [{"name": "limit", "check": "limit > 0"}]})
    spec = resolve_claim(claim({"provider": {"name": "broken"}, "template": {}}), {"broken": broken}, now=NOW)
    assert valid_condition(spec.all_errors, now=NOW)["reason"] == "ProviderTemplateError"
    assert "/spec/vars/limit" in str(spec.all_errors[0])


# ------------------------------------------------------------------- lifespan templates

EXTENDED = "{%- if 'extended-lifespan' in resource_claim.annotations -%}{}{%- else -%}{}{%- endif -%}"


def test_lifespan_templates_follow_the_claim() -> None:
    lifespan = {"default": EXTENDED.replace("{}", "12h", 1).replace("{}", "30m", 1),
                "maximum": EXTENDED.replace("{}", "2d", 1).replace("{}", "2h", 1)}
    plain, errs = rendered_lifespan(lifespan, claim=claim(), handle=None, now=NOW)
    assert (plain.default, plain.maximum, errs) == (timedelta(minutes=30), timedelta(hours=2), ())
    extended, _ = rendered_lifespan(lifespan, claim=claim(annotations={"extended-lifespan": ""}), handle=None, now=NOW)
    assert (extended.default, extended.maximum) == (timedelta(hours=12), timedelta(days=2))


def test_a_lifespan_template_sees_the_handles_vars() -> None:
    handle = {"metadata": {"name": "guid-x"}, "spec": {"vars": {"hours": 3}}}
    config, errs = rendered_lifespan({"maximum": "{{ hours }}h"}, claim=claim(), handle=handle, now=NOW)
    assert (config.maximum, errs) == (timedelta(hours=3), ())


def test_a_lifespan_template_that_fails_names_its_setting_and_leaves_it_unset() -> None:
    config, errs = rendered_lifespan({"maximum": "{{ resource_claim.nope }}", "default": "{{ 'soon' }}",
                                      "relativeMaximum": "1h"}, claim=claim(), handle=None, now=NOW)
    assert (config.maximum, config.default, config.relative_maximum) == (None, None, timedelta(hours=1))
    assert errs[0].startswith("spec.lifespan.default: the template gave 'soon', not a duration")
    assert errs[1].startswith("spec.lifespan.maximum: could not render: undefined")


def test_unclaimed_is_never_a_template_and_a_template_that_does_not_compile_is_the_providers_error() -> None:
    bad = {"metadata": {"name": "p"}, "spec": {"override": KIND, "lifespan": {
        "unclaimed": "{{ '6h' }}", "maximum": "{% if %}"}}}
    found = {(e.field, e.reason) for e in provider_errors(bad)}
    assert ("spec.lifespan.unclaimed", "InvalidDuration") in found
    assert ("spec.lifespan.maximum", "InvalidTemplate") in found


def test_several_providers_templates_combine_to_the_least_value() -> None:
    a, _ = LifespanConfig.parse({"maximum": "{{ '3h' }}"}, "x")
    b, _ = LifespanConfig.parse({"maximum": EXTENDED.replace("{}", "2d", 1).replace("{}", "2h", 1)}, "x")
    c, _ = LifespanConfig.parse({"maximum": "5h"}, "x")
    written = combine([a, b, c]).to_spec()  # what the handle keeps: still rendered for each claim
    plain, _ = rendered_lifespan(written, claim=claim(), handle=None, now=NOW)
    extended, _ = rendered_lifespan(written, claim=claim(annotations={"extended-lifespan": ""}), handle=None, now=NOW)
    assert (plain.maximum, extended.maximum) == (timedelta(hours=2), timedelta(hours=3))


def test_a_claims_provider_lifespan_template_that_cannot_render_makes_the_claim_invalid() -> None:
    broken = provider("broken", override=KIND, lifespan={"maximum": "{{ resource_claim.nope }}"})
    spec = resolve_claim(claim({"provider": {"name": "broken"}, "template": {}}), {"broken": broken}, now=NOW)
    condition = valid_condition(spec.all_errors, now=NOW)
    assert condition["reason"] == "ProviderTemplateError" and "spec.lifespan.maximum" in condition["message"]


# ------------------------------------------------------------------- links

BASE_PARAMETERS = [{"name": "stringvar", "required": True, "allowUpdate": True, "validation": {"openAPIV3Schema": {
    "type": "string", "enum": ["one", "two", "three"]}}}]


def base(**spec: Any) -> Provider:
    return provider("base", override=KIND, parameters=BASE_PARAMETERS,
                    template={"definition": {"data": {"value": "{{ stringvar }}"}}}, **spec)


def linker(values: dict[str, Any]) -> Provider:
    return provider("linker", parameters=BASE_PARAMETERS, linkedResourceProviders=[
        {"name": "base", "resourceName": "base", "parameterValues": values}])


def test_a_provider_with_only_links_is_valid_and_a_claim_of_it_gets_the_linked_resources_only() -> None:
    only = linker({"stringvar": "{{ stringvar }}"})
    assert only.valid and only.link_only, only.errors
    spec = resolve_claim(claim(provider={"name": "linker", "parameterValues": {"stringvar": "two"}}),
                         {"linker": only, "base": base()}, now=NOW)
    assert spec.valid, spec.all_errors
    assert [(r.name, r.provider.name if r.provider else None, r.template) for r in spec.resources] == [
        ("base", "base", {"data": {"value": "two"}})]


def test_a_link_only_provider_cannot_be_named_in_spec_resources() -> None:
    [refusal] = errors(linker({}), base(), resources=[{"provider": {"name": "linker"}, "template": {}}])
    assert "creates nothing itself" in refusal and "spec.provider" in refusal


def test_linked_values_the_linked_provider_refuses_are_refused_and_the_opt_in_is_named() -> None:
    """Poolboy's linked-03: `stringvar | upper` into a provider that allows lower case only."""
    spec = resolve_claim(claim(provider={"name": "linker", "parameterValues": {"stringvar": "one"}}),
                         {"linker": linker({"stringvar": "{{ stringvar | upper }}"}), "base": base()}, now=NOW)
    message = valid_condition(spec.all_errors, now=NOW)["message"]
    assert "'ONE' is not one of ['one', 'two', 'three']" in message
    assert "trustLinkedParameterValues" in message


def test_a_provider_that_trusts_linked_values_takes_them_as_given() -> None:
    spec = resolve_claim(claim(provider={"name": "linker", "parameterValues": {"stringvar": "one"}}),
                         {"linker": linker({"stringvar": "{{ stringvar | upper }}"}),
                          "base": base(trustLinkedParameterValues=True)}, now=NOW)
    assert spec.valid, spec.all_errors
    assert spec.resources[0].template == {"data": {"value": "ONE"}}
    # a claim's own values are judged as ever
    refused = resolve_claim(claim(provider={"name": "base", "parameterValues": {"stringvar": "ONE"}}),
                            {"base": base(trustLinkedParameterValues=True)}, now=NOW)
    assert not refused.valid
