"""One rule, one place: the webhook refuses exactly what the operator's own rules refuse, at the same fields.

Each table feeds the same objects to the operator's function (what the
actor would decide) and to the webhook (a whole AdmissionReview through
`review`, with an in-memory `Lookup`), and asserts that they agree: both
accept, or both refuse naming the same fields. Unit tests, no API server:
tests/admission/test_webhook_checks.py has the same rules through the real one.

Against the checks as they were before they called the operator's code,
15 rows fail: an exporterRef without a name admitted; a claim's template
choosing its namespace, name, kind, finalizers or lessor.dev labels admitted;
an ambiguous match only warned; an invalid provider used; a pool's template
run through checks written for claims, and matched by ``match``; a bound
claim's change to a defaulted field refused as an ``add``, and one adding
or removing a resource admitted.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

import anyio
import pytest

from lessor.model.views.leasing import LeaseView
from lessor.actors.leasing.access_policy import compile_policies
from lessor.actors.provisioning.claim_spec import resolve_claim, resolve_pool
from lessor.actors.provisioning.claim_updates import plan_claim_update
from lessor.actors.leasing.exporter_state import ExporterState
from lessor.actors.leasing.resolution import resolve
from lessor.actors.leasing.spec import ConditionType, Reason, Verdict, parse_lease
from lessor.actors.provisioning.provider import provider_from
from lessor.admission import Deadline, review
from lessor.admission.checks import preflight_registry
from lessor.gateway.resources import API_VERSION, HANDLE, PROVIDER
from lessor.model.jsonpatch import field_path

OPS = "ops"
NOW = dt.datetime.now(dt.UTC)
RPI4 = {"matchLabels": {"board": "rpi4"}}


class Objects:
    """A cluster in memory: objects by (kind, namespace, name)."""

    def __init__(self, *objects: tuple[str, str, Mapping[str, Any]]) -> None:
        self.objects = {(kind, namespace, obj["metadata"]["name"]): obj for kind, namespace, obj in objects}

    async def get(self, group: str, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        return self.objects.get((kind, namespace, name))

    async def list(self, group: str, kind: str, namespace: str, *,
                   consistent: bool = False) -> list[Mapping[str, Any]]:
        return [obj for (k, ns, _), obj in sorted(self.objects.items()) if (k, ns) == (kind, namespace)]


def manifest(kind: str, name: str, spec: Mapping[str, Any], **metadata: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": kind, "metadata": {"name": name, "namespace": "lab", **metadata},
            "spec": dict(spec)}


def webhook(obj: Mapping[str, Any], lookup: Objects, old: Mapping[str, Any] | None = None) -> set[tuple[str, str]]:
    """(check, field) of every cause the webhook denies ``obj`` with; empty when it admits it."""
    request = {"uid": "u", "kind": {"group": "lessor.dev", "version": "v1alpha1", "kind": obj["kind"]},
               "name": obj["metadata"]["name"], "namespace": "lab", "operation": "UPDATE" if old else "CREATE",
               "object": obj, "oldObject": old}
    body = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}
    answer = anyio.run(review, body, preflight_registry(OPS), lookup, Deadline())["response"]
    if answer["allowed"]:
        return set()
    assert answer["status"]["reason"] == "Invalid", answer["status"]["message"]  # a denial, never a 500
    return {(cause["reason"], cause.get("field", "")) for cause in answer["status"]["details"]["causes"]}


def operator_field(field: str) -> str:
    """The operator names a template's field by a JSON pointer (`spec.resources[0].template/data/size`),
    a denial as users write it (`spec.resources[0].template.data.size`)."""
    head, marker, pointer = field.partition(".template/")
    return field_path(f"{head}.template", "/" + pointer) if marker else field


def fields(denial: set[tuple[str, str]], *checks: str) -> set[str]:
    return {field for check, field in denial if check in checks}


# --- Lease: parse_lease -----------------------------------------------------------------

LEASE_SPECS = {
    "sound": {"selector": RPI4, "duration": "1h"},
    "minutes": {"selector": RPI4, "duration": "90m"},
    "pinned": {"exporterRef": {"name": "rpi4-01"}},
    "pinned-and-selected": {"exporterRef": {"name": "rpi4-01"}, "selector": {}},
    "no-selector": {"duration": "1h"},
    "empty-selector": {"selector": {}},
    "ref-without-name": {"exporterRef": {}, "selector": RPI4},
    "malformed-selector": {"selector": {"matchExpressions": [{"key": "board", "operator": "In", "values": []}]}},
    "day-unit": {"selector": RPI4, "duration": "1d"},
    "zero": {"selector": RPI4, "duration": "0s"},
    "negative": {"selector": RPI4, "duration": "-1h"},
    "beyond-100-years": {"selector": RPI4, "duration": "876001h"},
    "not-a-time": {"selector": RPI4, "beginTime": "tomorrow"},
    "year-9999": {"selector": RPI4, "endTime": "9999-01-01T00:00:00Z"},
    "end-before-begin": {"selector": RPI4, "beginTime": "2099-01-01T02:00:00Z", "endTime": "2099-01-01T01:00:00Z"},
    "three-disagree": {"selector": RPI4, "beginTime": "2099-01-01T00:00:00Z", "endTime": "2099-01-01T02:00:00Z",
                       "duration": "1h"},
    "three-agree": {"selector": RPI4, "beginTime": "2099-01-01T00:00:00Z", "endTime": "2099-01-01T02:00:00Z",
                    "duration": "2h"},
    "bad-selector-and-day": {"selector": {"matchLabels": {"board": "rpi 4"}}, "duration": "2d"},
}


@pytest.mark.parametrize("spec", LEASE_SPECS.values(), ids=LEASE_SPECS.keys())
def test_the_webhook_refuses_a_lease_exactly_when_parse_lease_does_at_the_fields_it_names(
    spec: Mapping[str, Any]
) -> None:
    lease = manifest("Lease", "lease", {"clientRef": {"name": "alice"}, **spec})

    operator = parse_lease(LeaseView.of(lease))
    denial = webhook(lease, Objects())

    if isinstance(operator, Verdict):
        assert operator.type is ConditionType.INVALID
        assert denial, f"the operator refuses it ({operator.message}), the webhook admits it"
        assert fields(denial, "lease-selector", "lease-duration") == {field for _, field in denial}
        for _, field in denial:
            assert f"{field}: " in operator.message, f"{field} is not named by the operator: {operator.message}"
    else:
        assert denial == set()


# --- Lease: the policies' maximumDuration ---------------------------------------------------

EXPORTERS = [ExporterState("rpi4-01", {"board": "rpi4"}), ExporterState("rpi4-02", {"board": "rpi4"})]


def policy(name: str, *rules: Mapping[str, Any], exporters: Mapping[str, Any] | None = None) -> dict[str, Any]:
    selector = exporters if exporters is not None else {"matchExpressions": [{"key": "board", "operator": "Exists"}]}
    return manifest("ExporterAccessPolicy", name, {"exporterSelector": selector, "policies": list(rules)})


def rule(team: str, maximum: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"from": [{"clientSelector": {"matchLabels": {"team": team}}}],
            **({"maximumDuration": maximum} if maximum else {}), **extra}


QA_TWO_HOURS = [policy("all-boards", rule("qa", "2h", priority=20), rule("qa", "90m"), rule("dev"))]
POLICY_CASES = {
    "within": (QA_TWO_HOURS, {"duration": "2h"}),
    "too-long": (QA_TWO_HOURS, {"duration": "4h"}),
    "unbounded": (QA_TWO_HOURS, {}),
    "end-too-far": (QA_TWO_HOURS, {"beginTime": "2099-01-01T00:00:00Z", "endTime": "2099-01-01T03:00:00Z"}),
    "end-within": (QA_TWO_HOURS, {"beginTime": "2099-01-01T00:00:00Z", "endTime": "2099-01-01T01:00:00Z"}),
    "no-limit-elsewhere": (QA_TWO_HOURS + [policy("open", rule("qa"))], {"duration": "400h"}),
    "limit-in-a-broken-policy": ([policy("broken", rule("qa", "1h"), exporters={"matchLabels": {"a b": "c"}}),
                                  policy("open", rule("qa", "3h"))], {"duration": "2h"}),
    "no-policy": ([], {"duration": "400h"}),
    "spot-too-short": ([policy("spot", rule("qa", "30m", spotAccess=True))], {"duration": "1h"}),
}


@pytest.mark.parametrize(("policies", "times"), POLICY_CASES.values(), ids=POLICY_CASES.keys())
def test_the_webhook_refuses_a_lease_too_long_for_every_policy_exactly_when_the_operator_says_duration_exceeded(
    policies: Sequence[Mapping[str, Any]], times: Mapping[str, Any]
) -> None:
    """Every policy here applies to every exporter, so the exporters cannot make the operator decide otherwise."""
    lease = manifest("Lease", "lease", {"clientRef": {"name": "alice"}, "selector": RPI4, **times})
    client = manifest("Client", "alice", {}, labels={"team": "qa"})
    lookup = Objects(("Client", "lab", client), *(("ExporterAccessPolicy", "lab", p) for p in policies))

    request = parse_lease(LeaseView.of(lease))
    assert not isinstance(request, Verdict)
    operator = resolve(request, {"team": "qa"}, EXPORTERS, compile_policies(policies), now=NOW)
    denial = webhook(lease, lookup)

    if isinstance(operator, Verdict):
        assert operator.reason is Reason.DURATION_EXCEEDED
        field = operator.message.split(": ", 1)[0]
        assert denial == {("lease-max-duration", field)}
    else:
        assert denial == set()


# --- ResourceClaim and ResourcePool: resolve_claim, resolve_pool -------------------------

SIZES = {"type": "object", "properties": {"data": {"type": "object", "properties": {
    "size": {"type": "string", "enum": ["small", "large"]}}}}}
PROVIDERS = {
    "env": {"default": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"}},
            "match": {"kind": "ConfigMap"},
            "validation": {"openAPIV3Schema": SIZES, "checks": [
                {"name": "large needs a reason", "check": "data.size != 'large' or 'reason' in data"}]}},
    "other": {"default": {"apiVersion": "v1", "kind": "ConfigMap"}, "match": {"kind": "ConfigMap"}},
    "secret": {"default": {"apiVersion": "v1", "kind": "Secret"}, "match": {"kind": "Secret", "type": "x"}},
    "broken": {"default": {"apiVersion": "v1", "kind": "ConfigMap"}, "matchIgnore": ["(unclosed"]},
}


def providers(*names: str) -> list[tuple[str, str, dict[str, Any]]]:
    return [(PROVIDER.kind, OPS, manifest("ResourceProvider", name, PROVIDERS[name], namespace=OPS))
            for name in names]


def entry(provider: str | None, **template: Any) -> dict[str, Any]:
    return {"template": template, **({"provider": {"name": provider}} if provider else {})}


CLAIM_CASES = {
    "sound": (["env"], [entry("env", data={"size": "large", "reason": "demo"})]),
    "defaulted": (["env"], [entry("env")]),
    "schema": (["env"], [entry("env", data={"size": "huge"})]),
    "check": (["env"], [entry("env", data={"size": "large"})]),
    "namespace": (["env"], [entry("env", metadata={"namespace": "kube-system"})]),
    "name": (["env"], [entry("env", metadata={"name": "mine"})]),
    "kind": (["env"], [entry("env", kind="Secret")]),
    "operator-label": (["env"], [entry("env", metadata={"labels": {"lessor.dev/owner": "me"}})]),
    "finalizers": (["env"], [entry("env", metadata={"finalizers": ["x"]})]),
    "matched": (["env", "secret"], [entry(None, kind="ConfigMap")]),
    "ambiguous": (["env", "other"], [entry(None, kind="ConfigMap")]),
    "unmatched": (["env"], [entry(None, kind="Service")]),
    "missing": (["env"], [entry("nope")]),
    "invalid-provider": (["broken"], [entry("broken")]),
    "several": (["env"], [entry("env", data={"size": "huge"}), entry("nope"), entry("env", metadata={"name": "n"})]),
}


@pytest.mark.parametrize(("names", "resources"), CLAIM_CASES.values(), ids=CLAIM_CASES.keys())
def test_the_webhook_refuses_a_claim_exactly_where_resolve_claim_finds_errors(
    names: Sequence[str], resources: Sequence[Mapping[str, Any]]
) -> None:
    claim = manifest("ResourceClaim", "claim", {"resources": list(resources)})
    lookup = Objects(*providers(*names))
    by_name = {name: provider_from(lookup.objects[(PROVIDER.kind, OPS, name)]) for name in names}

    operator = {operator_field(error.field) for error in resolve_claim(claim, by_name, now=NOW).all_errors}
    denial = webhook(claim, lookup)

    assert {field for _, field in denial} == operator
    assert fields(denial, "claim-providers", "claim-templates", "claim-checks") == operator


POOL_CASES = {
    "sound": (["env"], [entry("env")]),
    "schema": (["env"], [entry("env", data={"size": "huge"})]),
    "check-is-about-claims": (["env"], [entry("env", data={"size": "large"})]),
    "left-to-match": (["env"], [entry(None, kind="ConfigMap")]),
    "missing": (["env"], [entry("nope")]),
    "name-is-the-admins": (["env"], [entry("env", metadata={"name": "fixed"})]),
}


@pytest.mark.parametrize(("names", "resources"), POOL_CASES.values(), ids=POOL_CASES.keys())
def test_the_webhook_refuses_a_pool_exactly_where_resolve_pool_finds_errors(
    names: Sequence[str], resources: Sequence[Mapping[str, Any]]
) -> None:
    pool = manifest("ResourcePool", "pool", {"resources": list(resources)}, namespace=OPS)
    lookup = Objects(*providers(*names))
    by_name = {name: provider_from(lookup.objects[(PROVIDER.kind, OPS, name)]) for name in names}

    operator = {operator_field(error.field) for error in resolve_pool(pool, by_name, now=NOW).all_errors}
    denial = webhook(pool, lookup)

    assert {field for _, field in denial} == operator


# --- a bound claim's change: plan_claim_update ----------------------------------------------

STATE = {"default": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"state": "started"}},
         "updateFilters": [{"pathMatch": "/data/state", "allowedOps": ["replace"]},
                           {"pathMatch": "/metadata/(labels|annotations)/.*", "allowedOps": ["add", "replace"]}]}
BEFORE = {"data": {"owner": "alice"}}
UPDATE_CASES = {
    "defaulted-replace": [entry("state", data={"owner": "alice", "state": "stopped"})],
    "same-as-default": [entry("state", data={"owner": "alice", "state": "started"})],
    "not-allowed": [entry("state", data={"owner": "bob"})],
    "removed": [entry("state")],
    "identity": [entry("state", data={"owner": "alice"}, metadata={"labels": {"lessor.dev/x": "y"}})],
    "allowed-label": [entry("state", data={"owner": "alice"}, metadata={"labels": {"team": "qa"}})],
    "added-resource": [entry("state", **BEFORE), entry("state", **BEFORE)],
}


@pytest.mark.parametrize("resources", UPDATE_CASES.values(), ids=UPDATE_CASES.keys())
def test_the_webhook_refuses_a_bound_claims_change_exactly_where_plan_claim_update_refuses_it(
    resources: Sequence[Mapping[str, Any]]
) -> None:
    provider = manifest("ResourceProvider", "state", STATE, namespace=OPS)
    old = manifest("ResourceClaim", "claim", {"resources": [entry("state", **BEFORE)]})
    old["status"] = {"resourceHandle": {"name": "guid-1", "namespace": OPS}}
    base = resolve_claim(old, {"state": provider_from(provider)}, now=NOW)
    handle = manifest("ResourceHandle", "guid-1", {"resources": base.handle_resources()}, namespace=OPS)
    new = {**old, "spec": {"resources": list(resources)}}
    lookup = Objects((PROVIDER.kind, OPS, provider), (HANDLE.kind, OPS, handle))

    plan = plan_claim_update(old, new, handle, {"state": provider_from(provider)}, now=NOW)
    denial = webhook(new, lookup, old)

    assert fields(denial, "claim-update-filters") == {operator_field(error.field) for error in plan.errors}


def test_the_tables_cover_both_verdicts() -> None:
    """A table where the two sides always accept (or always refuse) would prove nothing."""
    leases = [isinstance(parse_lease(LeaseView.of(manifest("Lease", "l", {"clientRef": {"name": "a"}, **s}))), Verdict)
              for s in LEASE_SPECS.values()]
    assert any(leases) and not all(leases)
