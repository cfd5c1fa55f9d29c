"""The preflight checks through the real API server, with the webhook served in-process and registered.

The registration is scoped by a namespace label that only this module's
namespaces carry, so other tests on the shared control plane are never
sent to it, and it is removed when the module ends.
"""

from __future__ import annotations

import asyncio
import re
import ssl
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from typing import Any

import aiohttp
import pytest

from lessor.admission import SKIP_ANNOTATION, AdmissionRequest, Check, CheckResult, FailurePolicy, Lookup
from lessor.admission.checks import preflight_registry
from lessor.admission.lookup import GatewayLookup
from lessor.admission.registration import until_enforced
from lessor.admission.server import WebhookSettings, webhook
from lessor.tools.controlplane import ControlPlane
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import API_VERSION, CLAIM, CLIENT, CONFIGMAP, LEASE, NAMESPACE, POLICY, POOL, PROVIDER
from tests.slowness import scaled

SCOPE_LABEL = "test.lessor.dev/preflight"
SLOW_LABEL = "test.lessor.dev/slow"
TIMEOUT, MARGIN = 6, 3  # the checks get 3 s


class SlowChecker:
    """Stands for a check stuck on a slow infrastructure API; only objects labelled slow wait for it."""

    name = "slow"
    check_names = ("slow-lookup",)
    failure_policies = {"slow-lookup": FailurePolicy.FAIL}  # what it could not check, it refuses

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        if SLOW_LABEL not in (request["object"]["metadata"].get("labels") or {}):
            return {}

        async def stuck() -> CheckResult:
            await asyncio.sleep(60)
            return CheckResult.ok()

        return {"slow-lookup": stuck}


def manifest(kind: str, name: str, spec: dict[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, **metadata}, "spec": spec}


def lease(name: str = "lease", client: str = "alice", **spec: Any) -> dict[str, Any]:
    return manifest("Lease", name, {"clientRef": {"name": client}, **spec})


RPI4 = {"matchLabels": {"board": "rpi4"}}
QA = {"clientSelector": {"matchLabels": {"team": "qa"}}}

SIZES = {
    "type": "object",
    "required": ["apiVersion", "kind", "data"],
    "properties": {
        "apiVersion": {"type": "string", "enum": ["v1"]},
        "kind": {"type": "string", "enum": ["ConfigMap"]},
        "metadata": {"type": "object"},
        "data": {
            "type": "object",
            "additionalProperties": False,
            "required": ["size"],
            "properties": {"size": {"type": "string", "enum": ["small", "medium", "large"]},
                           "reason": {"type": "string"}},
        },
    },
}

ENVIRONMENT_PROVIDER = {
    "template": {"enable": True},
    "match": {"apiVersion": "v1", "kind": "ConfigMap"},
    "matchIgnore": ["^/metadata/annotations(/.*)?$"],
    "default": {"data": {"size": "small"}},
    "override": {"metadata": {"name": "{{ resource_handle.metadata.name }}-env"}},
    "validation": {
        "openAPIV3Schema": SIZES,
        "checks": [{"name": "a large environment needs a reason",
                    "check": "data.size != 'large' or (data.reason | default('') | length) > 0"}],
    },
    "updateFilters": [{"pathMatch": "/data/size", "allowedOps": ["replace"]}],
    "lifespan": {"maximum": "7d", "relativeMaximum": "3d"},
}


def environment(size: str | None = None, provider: str | None = "env", **data: str) -> dict[str, Any]:
    entry: dict[str, Any] = {"name": "environment", "template": {
        "apiVersion": "v1", "kind": "ConfigMap", "data": {**({"size": size} if size else {}), **data}}}
    if provider:
        entry["provider"] = {"name": provider}
    return entry


# --- fixtures -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def scope() -> str:
    return uuid.uuid4().hex[:10]


async def labelled_namespace(kube: Gateway, name: str, scope: str) -> str:
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name, "labels": {SCOPE_LABEL: scope}}})
    return name


@pytest.fixture(scope="module")
async def operator_namespace(kube: Gateway, scope: str) -> AsyncIterator[str]:
    """Where providers live for this module's webhook; pools go here too."""
    name = await labelled_namespace(kube, f"t-operator-{scope}", scope)
    yield name
    await kube.delete(NAMESPACE, None, name)


@pytest.fixture(scope="module")
async def preflight(kube: Gateway, scope: str, operator_namespace: str) -> AsyncIterator[None]:
    registry = preflight_registry(operator_namespace)
    registry.register(LEASE.group, LEASE.kind, SlowChecker())
    settings = WebhookSettings(port=0, timeout=TIMEOUT, margin=MARGIN, registration=f"lessor-preflight-{scope}",
                               namespace_selector={"matchLabels": {SCOPE_LABEL: scope}})
    async with webhook(kube, registry, GatewayLookup(kube), settings, "127.0.0.1"):
        await until_enforced(kube, LEASE, operator_namespace, lease(), timeout=scaled(20))  # no selector: denied once enforced
        yield


@pytest.fixture
async def lab(kube: Gateway, scope: str, preflight: None) -> AsyncIterator[str]:
    """A fresh namespace that the webhook watches, with clients alice (qa) and bob (dev)."""
    name = await labelled_namespace(kube, f"t-{uuid.uuid4().hex[:10]}", scope)
    for client, team in (("alice", "qa"), ("bob", "dev")):
        await kube.create(CLIENT, name, manifest("Client", client, {}, labels={"team": team}))
    yield name
    await kube.delete(NAMESPACE, None, name)


@pytest.fixture
async def env_provider(kube: Gateway, operator_namespace: str, preflight: None) -> AsyncIterator[str]:
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "env", ENVIRONMENT_PROVIDER))
    yield "env"
    await kube.delete(PROVIDER, operator_namespace, "env")


async def denial(kube: Gateway, resource: Resource, namespace: str, body: dict[str, Any]) -> ApiError:
    with pytest.raises(ApiError) as caught:
        await kube.create(resource, namespace, body)
    return caught.value


def causes(err: ApiError) -> set[tuple[str, str]]:
    """(check, field) of every cause the API server passed on from the webhook."""
    return {(cause["reason"], cause.get("field", "")) for cause in err.causes}


async def warnings_of_create(cp: ControlPlane, resource: Resource, namespace: str, body: dict[str, Any]) -> list[str]:
    """Create through the API server and return the warnings it relays (kubectl prints them as 'Warning:')."""
    tls = ssl.create_default_context(cafile=str(cp.pki / "ca.crt"))
    tls.load_cert_chain(str(cp.pki / "admin.crt"), str(cp.pki / "admin.key"))
    async with aiohttp.ClientSession() as http, http.post(
        cp.server + resource.path(namespace), json=body, ssl=tls
    ) as resp:
        answer = await resp.json()
        if resp.status >= 300:
            raise ApiError(resp.status, answer, "create")
        return [re.sub(r'^\d{3} \S+ "(.*)"$', r"\1", value).replace('\\"', '"')
                for value in resp.headers.getall("Warning", [])]


# --- Lease ----------------------------------------------------------------------------


async def test_a_sound_lease_is_created(kube: Gateway, lab: str) -> None:
    created = await kube.create(LEASE, lab, lease(selector=RPI4, duration="1h"))

    assert created["spec"]["duration"] == "1h"


async def test_a_lease_that_selects_nothing_is_denied_at_spec_selector(kube: Gateway, lab: str) -> None:
    missing = await denial(kube, LEASE, lab, lease("missing", duration="1h"))
    empty = await denial(kube, LEASE, lab, lease("empty", selector={}, duration="1h"))

    for err in (missing, empty):
        assert err.status == 422
        assert causes(err) == {("lease-selector", "spec.selector")}
    assert "lease-selector: spec.selector: missing: select exporters by label" in missing.message
    assert "lease-selector: spec.selector: empty: it would match every exporter" in empty.message


async def test_a_lease_pinned_to_an_exporter_needs_no_selector(kube: Gateway, lab: str) -> None:
    await kube.create(LEASE, lab, lease(exporterRef={"name": "rpi4-01"}, duration="1h"))


async def test_a_malformed_selector_is_denied_naming_the_expression(kube: Gateway, lab: str) -> None:
    selector = {"matchExpressions": [{"key": "board", "operator": "In", "values": []}]}

    err = await denial(kube, LEASE, lab, lease(selector=selector, duration="1h"))

    assert causes(err) == {("lease-selector", "spec.selector.matchExpressions[0].values")}
    assert "must be non-empty" in err.message


@pytest.mark.parametrize(("times", "field", "message"), [
    ({"duration": "0s"}, "spec.duration", "must be positive, not 0s"),
    ({"duration": "-1h"}, "spec.duration", "must be positive, not -1h"),
    ({"beginTime": "2099-01-01T02:00:00Z", "endTime": "2099-01-01T01:00:00Z"}, "spec.endTime",
     "must be after spec.beginTime"),
    ({"beginTime": "2099-01-01T00:00:00Z", "endTime": "2099-01-01T02:00:00Z", "duration": "1h"}, "spec.duration",
     "1h does not match spec.endTime - spec.beginTime (2h)"),
    ({"duration": "876001h"}, "spec.duration", "out of range: at most 100 years"),
    ({"beginTime": "2099-01-01T00:00:00Z"}, "spec.duration", "duration is required when spec.beginTime is set"),
], ids=["zero", "negative", "end-before-begin", "three-that-disagree", "beyond-100-years", "begin-without-length"])
async def test_inconsistent_or_non_positive_times_are_denied(
    kube: Gateway, lab: str, times: dict[str, str], field: str, message: str
) -> None:
    err = await denial(kube, LEASE, lab, lease(selector=RPI4, **times))

    assert causes(err) == {("lease-duration", field)}
    assert message in err.message


async def test_three_times_that_agree_are_accepted(kube: Gateway, lab: str) -> None:
    await kube.create(LEASE, lab, lease(selector=RPI4, beginTime="2099-01-01T00:00:00Z",
                                        endTime="2099-01-01T01:30:00Z", duration="1h30m"))


async def test_a_lease_for_a_client_that_does_not_exist_is_created_with_a_warning(
    controlplane: ControlPlane, lab: str
) -> None:
    warnings = await warnings_of_create(controlplane, LEASE, lab, lease(client="carol", selector=RPI4, duration="1h"))

    assert warnings == [f"lease-client: spec.clientRef.name: there is no Client carol in namespace {lab}: the lease "
                        "will end at once (Unsatisfiable, NoAccess), and creating the Client later will not revive "
                        "it; create the Client first"]


async def qa_limited_to_two_hours(kube: Gateway, namespace: str) -> None:
    await kube.create(POLICY, namespace, manifest("ExporterAccessPolicy", "all-boards", {
        "exporterSelector": {"matchExpressions": [{"key": "board", "operator": "Exists"}]},
        "policies": [
            {"priority": 20, "maximumDuration": "2h", "from": [QA]},
            {"priority": 10, "maximumDuration": "90m", "from": [QA]},
            {"priority": 10, "from": [{"clientSelector": {"matchLabels": {"team": "dev"}}}]},
        ],
    }))


async def test_a_lease_longer_than_every_policy_admitting_the_client_allows_is_denied_naming_the_longest(
    kube: Gateway, lab: str
) -> None:
    await qa_limited_to_two_hours(kube, lab)

    err = await denial(kube, LEASE, lab, lease(selector=RPI4, duration="4h"))

    assert causes(err) == {("lease-max-duration", "spec.duration")}
    assert ("the lease asks for 4h (spec.duration), longer than the policies that admit client alice allow: "
            "the longest allowed is 2h (ExporterAccessPolicy all-boards, policies[0])") in err.message


async def test_an_end_time_too_far_away_is_measured_against_the_policies(kube: Gateway, lab: str) -> None:
    await qa_limited_to_two_hours(kube, lab)

    err = await denial(kube, LEASE, lab, lease(selector=RPI4, beginTime="2099-01-01T00:00:00Z",
                                               endTime="2099-01-01T03:00:00Z"))

    assert causes(err) == {("lease-max-duration", "spec.endTime")}
    assert "spec.endTime: the lease asks for 3h (spec.beginTime 2099-01-01T00:00:00Z to spec.endTime" in err.message


async def test_a_lease_without_duration_or_end_asks_for_unbounded_time(kube: Gateway, lab: str) -> None:
    await qa_limited_to_two_hours(kube, lab)

    err = await denial(kube, LEASE, lab, lease(selector=RPI4))

    assert causes(err) == {("lease-max-duration", "spec.duration")}
    assert "the lease asks for unbounded time (no spec.duration and no spec.endTime)" in err.message


async def test_limits_do_not_apply_to_a_client_that_a_policy_admits_without_one(kube: Gateway, lab: str) -> None:
    await qa_limited_to_two_hours(kube, lab)

    await kube.create(LEASE, lab, lease("within", selector=RPI4, duration="2h"))
    await kube.create(LEASE, lab, lease("unlimited", client="bob", selector=RPI4))


async def test_releasing_a_lease_is_not_judged_again(kube: Gateway, lab: str) -> None:
    await kube.create(LEASE, lab, lease(selector=RPI4, duration="4h"))
    await qa_limited_to_two_hours(kube, lab)  # the lease would now fail lease-max-duration, were it judged

    released = await kube.merge_patch(LEASE, lab, "lease", {"spec": {"release": True}})

    assert released["spec"]["release"] is True


# --- ExporterAccessPolicy --------------------------------------------------------------


async def test_a_policy_rule_that_could_never_apply_is_denied_with_every_cause(kube: Gateway, lab: str) -> None:
    err = await denial(kube, POLICY, lab, manifest("ExporterAccessPolicy", "broken", {
        "exporterSelector": RPI4,
        "policies": [
            {"from": []},
            {"from": [{}, {"clientSelector": {"matchExpressions": [{"key": "team", "operator": "Exists",
                                                                    "values": ["qa"]}]}}]},
            {"from": [QA], "maximumDuration": "0s"},
        ],
    }))

    assert err.status == 422
    assert causes(err) == {
        ("policy-from", "spec.policies[0].from"),
        ("policy-from", "spec.policies[1].from[0].clientSelector"),
        ("policy-from", "spec.policies[1].from[1].clientSelector.matchExpressions[0].values"),
        ("policy-max-duration", "spec.policies[2].maximumDuration"),
    }


async def test_a_policy_without_exporter_selector_is_denied(kube: Gateway, lab: str) -> None:
    err = await denial(kube, POLICY, lab, manifest("ExporterAccessPolicy", "nowhere", {"policies": [{"from": [QA]}]}))

    assert causes(err) == {("policy-exporter-selector", "spec.exporterSelector")}


async def test_an_empty_exporter_selector_and_a_copy_are_allowed_with_warnings(
    controlplane: ControlPlane, lab: str
) -> None:
    spec = {"exporterSelector": {}, "policies": [{"from": [QA]}]}

    first = await warnings_of_create(controlplane, POLICY, lab, manifest("ExporterAccessPolicy", "everything", spec))
    second = await warnings_of_create(controlplane, POLICY, lab, manifest("ExporterAccessPolicy", "again", spec))

    matches_all = ("policy-exporter-selector: spec.exporterSelector is empty: "
                   "the policy applies to every exporter in the namespace")
    assert first == [matches_all]
    assert second == [matches_all,
                      "policy-duplicate: the same spec as ExporterAccessPolicy everything in this namespace"]


# --- ResourceProvider, ResourcePool, ResourceClaim -------------------------------------


async def test_a_provider_that_would_fail_later_is_denied_now_with_every_cause(
    kube: Gateway, operator_namespace: str, preflight: None
) -> None:
    broken = {
        **ENVIRONMENT_PROVIDER,
        "override": {"metadata": {"name": "{{ resource_handle.metadata.name }-env"}},
        "matchIgnore": ["^/metadata/(annotations$"],
        "updateFilters": [{"pathMatch": "*size"}],
        "validation": {"openAPIV3Schema": {"type": "strang"},
                       "checks": [{"name": "unbalanced", "check": "data.size == ("}]},
    }

    err = await denial(kube, PROVIDER, operator_namespace, manifest("ResourceProvider", "broken", broken))

    assert causes(err) == {
        ("provider-templates", "spec.override.metadata.name"),
        ("provider-checks", "spec.validation.checks[0].check"),
        ("provider-schema", "spec.validation.openAPIV3Schema.type"),
        ("provider-regexes", "spec.matchIgnore[0]"),
        ("provider-regexes", "spec.updateFilters[0].pathMatch"),
    }
    assert "syntax error on line 1" in err.message


async def test_a_provider_using_functions_lessor_lacks_is_denied_naming_each_field_and_line(
    kube: Gateway, operator_namespace: str, preflight: None
) -> None:
    """The rule behind the operator's `Valid=False` (InvalidTemplate), denied here: a call to a function the
    sandbox lacks, or such a filter inside a branch, compiles in Jinja2 but could never render (issue #21)."""
    spec = {**ENVIRONMENT_PROVIDER,
            "override": {"data": {"when": "{{ frobnicate() }}",
                                  "id": "{% if resource_claim %}{{ x | shout }}{% endif %}"}},
            "healthCheck": "frobnicate(status.at) < timestamp.utcnow"}
    err = await denial(kube, PROVIDER, operator_namespace, manifest("ResourceProvider", "poolboyish", spec))
    assert causes(err) == {("provider-templates", "spec.override.data.when"),
                           ("provider-templates", "spec.override.data.id"), ("provider-checks", "spec.healthCheck")}
    assert "line 1: lessor's templates have no function 'frobnicate'" in err.message
    assert "line 1: lessor's templates have no filter 'shout'" in err.message


async def test_a_provider_must_fix_its_kind_somewhere_and_a_schema_alone_may(
    kube: Gateway, operator_namespace: str, preflight: None
) -> None:
    """The operator's rule (lessor.actors.provisioning.validity.provider_errors), denied here: no kind anywhere is refused;
    a schema allowing one apiVersion and one kind fixes it, with override setting only the namespace."""
    err = await denial(kube, PROVIDER, operator_namespace, manifest("ResourceProvider", "kindless", {
        "override": {"metadata": {"namespace": operator_namespace}}}))
    assert causes(err) == {("provider-spec", "spec.override")}
    assert "sets no apiVersion and kind" in err.message

    pinned = {"override": {"metadata": {"namespace": operator_namespace}},
              "validation": {"openAPIV3Schema": {"type": "object", "properties": {
                  "apiVersion": {"type": "string", "enum": ["v1"]},
                  "kind": {"type": "string", "enum": ["ConfigMap"]}}}}}
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "pinned", pinned))
    await kube.delete(PROVIDER, operator_namespace, "pinned")


async def test_a_pool_needs_an_existing_provider_and_templates_it_accepts(
    kube: Gateway, operator_namespace: str, env_provider: str
) -> None:
    err = await denial(kube, POOL, operator_namespace, manifest("ResourcePool", "envs", {
        "minAvailable": 1,
        "resources": [environment("huge"), environment("small", provider="nope")],
    }))

    assert causes(err) == {
        ("pool-templates", "spec.resources[0].template.data.size"),
        ("pool-providers", "spec.resources[1].provider.name"),
    }
    assert f"there is no ResourceProvider nope in namespace {operator_namespace}" in err.message
    await kube.create(POOL, operator_namespace, manifest("ResourcePool", "envs", {"resources": [environment()]}))
    await kube.delete(POOL, operator_namespace, "envs")


async def test_a_pool_in_provider_mode_is_judged_by_the_rule_the_operator_uses(
    kube: Gateway, operator_namespace: str
) -> None:
    """`resolve_pool` (the pool actor's own): the provider's parameters' schemas, at the fields the pool has;
    spec.provider and spec.resources together refused; the provider's checks, written about claims, not run."""
    sized = {
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": operator_namespace}},
        "parameters": [{"name": "size", "required": True, "validation": {"openAPIV3Schema": {
            "type": "string", "enum": ["small", "large"]}}}],
        "template": {"definition": {"data": {"size": "{{ size }}"}}},
        "validation": {"checks": [{"name": "claims only", "check": "resource_claim.metadata.name != ''"}]},
    }
    name = f"sized-{uuid.uuid4().hex[:6]}"
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", name, sized))
    try:
        wrong = await denial(kube, POOL, operator_namespace, manifest("ResourcePool", "sized-pool", {
            "provider": {"name": name, "parameterValues": {"size": "huge"}}}))
        both = await denial(kube, POOL, operator_namespace, manifest("ResourcePool", "sized-pool", {
            "provider": {"name": name, "parameterValues": {"size": "small"}},
            "resources": [{"provider": {"name": name}, "template": {"data": {"size": "small"}}}]}))
        await kube.create(POOL, operator_namespace, manifest("ResourcePool", "sized-pool", {
            "provider": {"name": name, "parameterValues": {"size": "small"}}}))
        await kube.delete(POOL, operator_namespace, "sized-pool")
    finally:
        await kube.delete(PROVIDER, operator_namespace, name)

    assert causes(wrong) == {("pool-templates", "spec.provider.parameterValues.size")}
    assert "'huge' is not one of ['small', 'large']" in wrong.message
    assert causes(both) == {("pool-templates", "spec.provider")}
    assert "either spec.provider" in both.message


async def test_a_pool_lifespan_beyond_100_years_is_denied_at_its_setting(
    kube: Gateway, operator_namespace: str, env_provider: str
) -> None:
    err = await denial(kube, POOL, operator_namespace, manifest("ResourcePool", "century", {
        "resources": [environment()], "lifespan": {"maximum": "36501d", "default": "1d"},
    }))

    assert causes(err) == {("pool-lifespan", "spec.lifespan.maximum")}
    assert "duration '36501d' is out of range: at most 100 years (36500d, 876000h)" in err.message


async def test_a_claim_template_is_denied_with_every_schema_violation_at_its_field(
    kube: Gateway, lab: str, env_provider: str
) -> None:
    err = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "claim", {
        "resources": [environment("huge", colour="red")],
    }))

    assert err.status == 422
    assert causes(err) == {
        ("claim-templates", "spec.resources[0].template.data"),  # additionalProperties: colour
        ("claim-templates", "spec.resources[0].template.data.size"),
    }
    assert "'huge' is not one of ['small', 'medium', 'large']" in err.message


async def test_a_catastrophic_pattern_is_a_prompt_denial_at_its_field_not_a_timeout(
    kube: Gateway, lab: str, operator_namespace: str, preflight: None
) -> None:
    # Backtracking `re` would spend hours on this value; the review would time out as a 500.
    redos = {**ENVIRONMENT_PROVIDER, "validation": {"openAPIV3Schema": {"type": "object", "properties": {
        "data": {"type": "object", "properties": {"x": {"type": "string", "pattern": "^(a+)+$"}}}}}}}
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "redos", redos))
    try:
        err = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "redos", {
            "resources": [environment(provider="redos", x="a" * 40 + "!")]}))
    finally:
        await kube.delete(PROVIDER, operator_namespace, "redos")

    assert err.status == 422
    assert causes(err) == {("claim-templates", "spec.resources[0].template.data.x")}
    assert "does not match '^(a+)+$'" in err.message


async def test_a_claim_is_judged_with_the_providers_default_and_checks(
    kube: Gateway, lab: str, env_provider: str
) -> None:
    await kube.create(CLAIM, lab, manifest("ResourceClaim", "defaulted", {"resources": [environment()]}))

    err = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "large", {"resources": [environment("large")]}))

    assert causes(err) == {("claim-checks", "spec.resources[0].template")}
    assert "check 'a large environment needs a reason' failed" in err.message


async def test_a_claim_names_its_resource_only_where_the_providers_schema_declares_the_name_and_checks_see_vars(
    kube: Gateway, lab: str, operator_namespace: str, preflight: None
) -> None:
    """The operator's rules (claim_spec.resolve_claim), denied at the webhook: Poolboy's test-01 and vars-02."""
    named = {"override": {"apiVersion": "v1", "kind": "ConfigMap"}, "vars": {"most": 3},
             "validation": {"openAPIV3Schema": {"type": "object", "properties": {
                 "metadata": {"type": "object", "properties": {"name": {"type": "string", "pattern": "^app-"}}},
                 "data": {"type": "object"}}},
                 "checks": [{"name": "at most most", "check": "data.n | int <= most"}]}}
    plain = {"override": {"apiVersion": "v1", "kind": "ConfigMap"}}
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "named", named))
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "plain", plain))

    def asking(provider: str, name: str, n: str = "1") -> dict[str, Any]:
        return manifest("ResourceClaim", f"{provider}-{n}-{name}", {"resources": [{"provider": {"name": provider},
                        "template": {"metadata": {"name": name}, "data": {"n": n}}}]})
    try:
        await kube.create(CLAIM, lab, asking("named", "app-a"))
        err = await denial(kube, CLAIM, lab, asking("plain", "app-a"))
        assert causes(err) == {("claim-templates", "spec.resources[0].template.metadata.name")}
        assert "declares metadata.name" in err.message
        err = await denial(kube, CLAIM, lab, asking("named", "other"))
        assert causes(err) == {("claim-templates", "spec.resources[0].template.metadata.name")}
        err = await denial(kube, CLAIM, lab, asking("named", "app-a", n="4"))
        assert "check 'at most most' failed" in err.message
    finally:
        await kube.delete(PROVIDER, operator_namespace, "named")
        await kube.delete(PROVIDER, operator_namespace, "plain")


@pytest.mark.parametrize("name", ["{%", "{{ resource_claim.metadata.name }}", "Env", "env/../x", "e" * 254])
async def test_a_provider_name_no_object_can_have_is_denied_at_its_field_not_an_internal_error(
    kube: Gateway, lab: str, env_provider: str, name: str
) -> None:
    err = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "claim", {
        "resources": [environment("small", provider=name), environment("small")],
    }))

    assert err.status == 422
    assert causes(err) == {("claim-providers", "spec.resources[0].provider.name")}
    assert "no ResourceProvider can be named so" in err.message
    assert "could not finish" not in err.message


async def test_a_claim_in_provider_mode_is_denied_with_every_bad_parameter_value_at_its_field(
    kube: Gateway, lab: str, operator_namespace: str, preflight: None
) -> None:
    """The operator's own rule (`lessor.actors.parameters`): schema, checks, unknown names, at the same fields."""
    sized = {
        "override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": operator_namespace}},
        "parameters": [
            {"name": "size", "required": True, "validation": {"openAPIV3Schema": {"type": "string",
                                                                                  "enum": ["small", "large"]}}},
            {"name": "count", "validation": {"openAPIV3Schema": {"type": "integer", "default": 1},
                                             "checks": [{"name": "few if large", "check": "count < 3 or size != 'large'"}]}},
        ],
        "template": {"definition": {"data": {"size": "{{ size }}"}}},
    }
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "sized", sized))
    try:
        wrong = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "wrong", {
            "provider": {"name": "sized", "parameterValues": {"size": "huge", "colour": "red"}}}))
        checked = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "checked", {
            "provider": {"name": "sized", "parameterValues": {"size": "large", "count": 5}}}))
        await kube.create(CLAIM, lab, manifest("ResourceClaim", "fine", {
            "provider": {"name": "sized", "parameterValues": {"size": "large"}}}))
    finally:
        await kube.delete(PROVIDER, operator_namespace, "sized")

    assert causes(wrong) == {("claim-templates", "spec.provider.parameterValues.size"),
                             ("claim-templates", "spec.provider.parameterValues.colour")}
    assert "'huge' is not one of ['small', 'large']" in wrong.message
    assert causes(checked) == {("claim-checks", "spec.provider.parameterValues.count")}
    assert "check 'few if large' failed" in checked.message


async def test_a_claim_of_a_provider_that_links_others_is_judged_with_them(
    kube: Gateway, lab: str, operator_namespace: str, preflight: None
) -> None:
    base = {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": operator_namespace}},
            "parameters": [{"name": "size", "validation": {"openAPIV3Schema": {"type": "string",
                                                                               "enum": ["small", "large"]}}}],
            "template": {"definition": {"data": {"size": "{{ size }}"}}}}
    binder = {"override": {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"namespace": operator_namespace}},
              "parameters": [{"name": "size"}],
              "linkedResourceProviders": [{"name": "base", "parameterValues": {"size": "{{ size }}"}}]}
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "base", base))
    await kube.create(PROVIDER, operator_namespace, manifest("ResourceProvider", "binder", binder))
    try:
        await kube.create(CLAIM, lab, manifest("ResourceClaim", "fine", {
            "provider": {"name": "binder", "parameterValues": {"size": "small"}}}))
        wrong = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "wrong", {
            "provider": {"name": "binder", "parameterValues": {"size": "huge"}}}))
    finally:
        await kube.delete(PROVIDER, operator_namespace, "binder")
        await kube.delete(PROVIDER, operator_namespace, "base")

    assert causes(wrong) == {("claim-templates", "spec.provider.parameterValues")}
    assert "gives linked resource base values that ResourceProvider base refuses" in wrong.message
    assert "'huge' is not one of ['small', 'large']" in wrong.message


async def test_a_claim_without_provider_name_is_judged_by_the_provider_that_matches(
    kube: Gateway, lab: str, env_provider: str
) -> None:
    unmatched = {"name": "secret", "template": {"apiVersion": "v1", "kind": "Secret"}}

    err = await denial(kube, CLAIM, lab, manifest("ResourceClaim", "claim", {
        "resources": [environment("huge", provider=None), unmatched],
    }))

    assert causes(err) == {
        ("claim-templates", "spec.resources[0].template.data.size"),
        ("claim-providers", "spec.resources[1].provider"),
    }


async def test_a_lifespan_beyond_the_providers_maximum_is_accepted_with_a_clamping_warning(
    controlplane: ControlPlane, lab: str, env_provider: str
) -> None:
    warnings = await warnings_of_create(controlplane, CLAIM, lab, manifest("ResourceClaim", "claim", {
        "resources": [environment("small")], "lifespan": {"end": "2099-01-01T00:00:00Z"},
    }))

    assert len(warnings) == 1
    assert warnings[0].startswith("claim-lifespan: spec.lifespan.end 2099-01-01T00:00:00Z is beyond the "
                                  "relativeMaximum 3d of ResourceProvider env: it will be clamped to ")


async def test_a_bound_claim_may_change_only_what_the_update_filters_allow(
    kube: Gateway, lab: str, env_provider: str, operator: object
) -> None:
    """Bound for real: the operator (watching lessor-system) binds the claim, then updates are judged."""
    await kube.apply(PROVIDER, "lessor-system", "env", manifest("ResourceProvider", "env", ENVIRONMENT_PROVIDER))
    try:
        await _updates_of_a_bound_claim(kube, lab)
    finally:
        await kube.delete(CLAIM, lab, "claim")
        await kube.delete(PROVIDER, "lessor-system", "env")


async def _updates_of_a_bound_claim(kube: Gateway, lab: str) -> None:
    await kube.create(CLAIM, lab, manifest("ResourceClaim", "claim", {"resources": [environment("small")]}))
    deadline = time.monotonic() + scaled(30)
    while not ((await kube.get(CLAIM, lab, "claim")).get("status") or {}).get("resourceHandle"):
        assert time.monotonic() < deadline, f"the operator did not bind the claim: {(await kube.get(CLAIM, lab, 'claim')).get('status')}"
        await asyncio.sleep(0.2)

    with pytest.raises(ApiError) as caught:
        await kube.merge_patch(CLAIM, lab, "claim", {"spec": {"resources": [environment("medium", reason="demo")]}})
    resized = await kube.merge_patch(CLAIM, lab, "claim", {"spec": {"resources": [environment("medium")]}})

    assert causes(caught.value) == {("claim-update-filters", "spec.resources[0].template.data.reason")}
    assert "add is not allowed by ResourceProvider env's updateFilters" in caught.value.message
    assert resized["spec"]["resources"][0]["template"]["data"] == {"size": "medium"}


STATE_PROVIDER = {
    "default": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"state": "started"}},
    "override": {"metadata": {"namespace": "lessor-system"}},
    "updateFilters": [{"pathMatch": "/data/state", "allowedOps": ["replace"]}],
}


async def test_a_bound_claim_is_judged_on_its_defaulted_template_as_the_operator_judges_it(
    kube: Gateway, lab: str, operator_namespace: str, operator: object
) -> None:
    """The provider's default sets `data.state: started`; its updateFilters allow `replace` at `/data/state`.

    The claim never wrote `state`, so in the raw templates `stopped` is an
    *add*, which the filters do not allow: the webhook used to deny it ("add is
    not allowed once the claim is bound") although the operator, which diffs
    the defaulted templates, sees a `replace` and applies it. The webhook now
    calls the operator's `plan_claim_update`: the change is admitted and
    reaches the resource, and a change the operator would refuse is denied at
    its field.
    """
    for namespace in ("lessor-system", operator_namespace):  # the operator's providers, and the webhook's
        await kube.apply(PROVIDER, namespace, "state", manifest("ResourceProvider", "state", STATE_PROVIDER))
    try:
        await kube.create(CLAIM, lab, manifest("ResourceClaim", "vm", {"resources": [
            {"provider": {"name": "state"}, "template": {"data": {"owner": "alice"}}}]}))
        deadline = time.monotonic() + scaled(30)
        while not ((bound := await kube.get(CLAIM, lab, "vm")).get("status") or {}).get("resources", [{}])[0] \
                .get("reference"):
            assert time.monotonic() < deadline, f"the operator did not bind the claim: {bound.get('status')}"
            await asyncio.sleep(0.2)
        configmap = bound["status"]["resources"][0]["reference"]["name"]

        await kube.merge_patch(CLAIM, lab, "vm", {"spec": {"resources": [
            {"provider": {"name": "state"}, "template": {"data": {"owner": "alice", "state": "stopped"}}}]}})
        with pytest.raises(ApiError) as caught:
            await kube.merge_patch(CLAIM, lab, "vm", {"spec": {"resources": [
                {"provider": {"name": "state"}, "template": {"data": {"owner": "bob", "state": "stopped"}}}]}})

        assert causes(caught.value) == {("claim-update-filters", "spec.resources[0].template.data.owner")}
        assert "replace is not allowed by ResourceProvider state's updateFilters" in caught.value.message
        while (await kube.get(CONFIGMAP, "lessor-system", configmap))["data"].get("state") != "stopped":
            assert time.monotonic() < deadline + scaled(30), "the allowed change did not reach the resource"
            await asyncio.sleep(0.2)
        assert (await kube.get(CONFIGMAP, "lessor-system", configmap))["data"] == {"state": "stopped", "owner": "alice"}
    finally:
        await kube.delete(CLAIM, lab, "vm")
        for namespace in ("lessor-system", operator_namespace):
            await kube.delete(PROVIDER, namespace, "state")


# --- the framework, end to end ----------------------------------------------------------


async def test_a_check_past_the_deadline_is_cut_off_with_a_verdict_and_the_other_results_still_reach_the_user(
    kube: Gateway, lab: str
) -> None:
    slow = lease(selector={}, duration="0s")
    slow["metadata"]["labels"] = {SLOW_LABEL: "yes"}

    started = time.monotonic()
    err = await denial(kube, LEASE, lab, slow)
    elapsed = time.monotonic() - started

    assert elapsed < TIMEOUT - 1  # the webhook answered itself; the API server did not give up on it
    assert err.status == 422  # a verdict: the late check's failure policy (Fail) denies, naming it; never a 500
    assert causes(err) == {
        ("lease-selector", "spec.selector"), ("lease-duration", "spec.duration"), ("slow-lookup", ""),
    }
    assert f"slow-lookup: check slow-lookup could not finish (not within the review's {TIMEOUT - MARGIN} s)" in err.message


async def test_the_skip_annotation_lets_a_blocked_object_through_and_says_so(
    controlplane: ControlPlane, kube: Gateway, lab: str
) -> None:
    blocked = lease(selector={}, duration="1h")
    blocked["metadata"]["annotations"] = {SKIP_ANNOTATION: "Lease-Selector, lease-selectr"}

    warnings = await warnings_of_create(controlplane, LEASE, lab, blocked)

    assert warnings == [
        f"check lease-selector skipped by annotation {SKIP_ANNOTATION}",
        f"{SKIP_ANNOTATION}: no check named 'lease-selectr'",
    ]
    assert (await kube.get(LEASE, lab, "lease"))["spec"]["selector"] == {}
