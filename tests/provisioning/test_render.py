"""A handle's resources: override, name from the handle's guid, placement, lessor.dev labels, kind changes."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import yaml

from lessor.actors.provisioning.handle_render import (
    CLAIM_NAME,
    HANDLE_NAME,
    POOL_NAME,
    PROVIDER_NAME,
    handle_guid,
    new_handle_name,
    render_handle,
    render_resource,
    rendered_condition,
    requester_of,
    valid_label_value,
    with_references,
)
from lessor.actors.provisioning.provider import Provider, provider_from

NOW = datetime(2024, 3, 1, 12, 0, 0, tzinfo=timezone.utc)
OPERATOR_NAMESPACE = "lessor-system"
SAMPLE_PROVIDER = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "deploy" / "samples" / "50-resourceprovider.yaml").read_text())


def provider(name: str = "plain", **spec: Any) -> Provider:
    spec.setdefault("override", {"apiVersion": "v1", "kind": "ConfigMap"})
    return provider_from({"metadata": {"name": name, "namespace": OPERATOR_NAMESPACE}, "spec": spec})


def handle(*templates: dict[str, Any], provider: str = "plain", name: str = "guid-k3x9q2vw7h",
           claim: dict[str, str] | None = None, pool: str | None = None,
           references: list[dict[str, Any] | None] | None = None) -> dict[str, Any]:
    resources = []
    for index, template in enumerate(templates):
        entry: dict[str, Any] = {"provider": {"name": provider}, "template": template}
        if references and references[index]:
            entry["reference"] = references[index]
        resources.append(entry)
    spec: dict[str, Any] = {"resources": resources}
    if claim:
        spec["resourceClaim"] = claim
    if pool:
        spec["resourcePool"] = {"name": pool, "namespace": OPERATOR_NAMESPACE}
    return {"apiVersion": "lessor.dev/v1alpha1", "kind": "ResourceHandle",
            "metadata": {"name": name, "generateName": "guid-", "namespace": OPERATOR_NAMESPACE}, "spec": spec}


def render(h: dict[str, Any], p: Provider, index: int = 0, **kwargs: Any) -> Any:
    return render_resource(h, index, p, operator_namespace=OPERATOR_NAMESPACE, now=NOW, **kwargs)


# ------------------------------------------------------------------ names


def test_the_guid_is_whatever_generate_name_added_whatever_its_length() -> None:
    assert handle_guid({"metadata": {"name": "guid-k3x9q2vw7h", "generateName": "guid-"}}) == "k3x9q2vw7h"
    assert handle_guid({"metadata": {"name": "guid-ab", "generateName": "guid-"}}) == "ab"
    assert handle_guid({"metadata": {"name": "env-x1y2z", "generateName": "env-"}}) == "x1y2z"
    assert handle_guid({"metadata": {"name": "guid-named"}}) == "named"
    assert handle_guid({"metadata": {"name": "by-hand"}}) == "by-hand"


def test_resources_are_named_from_the_guid_with_the_index_or_the_templates_prefix() -> None:
    h = handle({}, {"metadata": {"generateName": "db-"}})
    first, second = render_handle(h, {"plain": provider()}, operator_namespace=OPERATOR_NAMESPACE, now=NOW)
    assert first.reference == {"apiVersion": "v1", "kind": "ConfigMap", "name": "guid0-k3x9q2vw7h",
                               "namespace": OPERATOR_NAMESPACE}
    assert second.definition is not None and second.definition["metadata"]["name"] == "db-k3x9q2vw7h"
    assert "generateName" not in second.definition["metadata"]


def test_the_sample_provider_names_and_places_the_configmap_from_its_override() -> None:
    sample = provider_from(SAMPLE_PROVIDER)
    h = handle({"apiVersion": "v1", "kind": "ConfigMap", "data": {"size": "small"}}, provider="env-configmap")
    result = render(h, sample)
    assert result.reference == {"apiVersion": "v1", "kind": "ConfigMap", "name": "guid-k3x9q2vw7h-env",
                                "namespace": "lessor-system"}
    assert result.definition is not None and result.definition["data"] == {"size": "small"}


def test_an_existing_resource_keeps_its_name_and_namespace() -> None:
    existing = {"apiVersion": "v1", "kind": "ConfigMap", "name": "guid-old", "namespace": "envs"}
    result = render(handle({}, references=[existing]), provider())
    assert result.reference == existing


def test_an_invalid_name_is_refused_not_sent() -> None:
    result = render(handle({"metadata": {"generateName": "Bad_Prefix-"}}), provider())
    assert (result.reason, result.definition) == ("InvalidResource", None)
    assert "'Bad_Prefix-k3x9q2vw7h' is not a valid name" in result.message


# ------------------------------------------------------------------ placement


def test_a_template_namespace_is_ignored_and_the_operator_namespace_used() -> None:
    result = render(handle({"metadata": {"namespace": "kube-system"}}), provider())
    assert result.reference is not None and result.reference["namespace"] == OPERATOR_NAMESPACE


def test_the_providers_override_chooses_the_namespace_even_when_templated() -> None:
    p = provider(template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap",
        "metadata": {"namespace": "env-{{ resource_claim.metadata.namespace }}"}})
    claim = {"metadata": {"name": "alice-env", "namespace": "lab"}}
    h = handle({"metadata": {"namespace": "kube-system"}}, claim={"name": "alice-env", "namespace": "lab"})
    result = render(h, p, claim=claim)
    assert result.reference is not None and result.reference["namespace"] == "env-lab"


# ------------------------------------------------------------------ labels and annotations


def test_resources_carry_the_handle_claim_provider_and_pool_as_labels_and_annotations() -> None:
    h = handle({}, claim={"name": "alice-env", "namespace": "lab"}, pool="envs")
    metadata = render(h, provider()).definition["metadata"]
    expected = {
        "lessor.dev/resource-handle-name": "guid-k3x9q2vw7h",
        "lessor.dev/resource-handle-namespace": OPERATOR_NAMESPACE,
        "lessor.dev/resource-claim-name": "alice-env",
        "lessor.dev/resource-claim-namespace": "lab",
        "lessor.dev/resource-provider-name": "plain",
        "lessor.dev/resource-pool-name": "envs",
    }
    assert metadata["labels"] == expected and metadata["annotations"] == expected


def test_a_value_that_is_no_valid_label_value_is_only_an_annotation() -> None:
    long_name = "a-claim-name-that-is-far-too-long-to-be-a-label-value-in-kubernetes-at-all"
    h = handle({}, claim={"name": long_name, "namespace": "lab"})
    metadata = render(h, provider()).definition["metadata"]
    assert metadata["annotations"][CLAIM_NAME] == long_name
    assert CLAIM_NAME not in metadata["labels"] and metadata["labels"][HANDLE_NAME] == "guid-k3x9q2vw7h"
    assert valid_label_value("a.b_c-9") and not valid_label_value("-a") and not valid_label_value("x" * 64)


def test_forged_lessor_labels_are_replaced_and_other_labels_kept() -> None:
    template = {"metadata": {"labels": {"app": "env", CLAIM_NAME: "someone-else", POOL_NAME: "fake"},
                             "annotations": {"lessor.dev/anything": "x", "note": "hi"}}}
    metadata = render(handle(template), provider()).definition["metadata"]
    assert metadata["labels"] == {"app": "env", HANDLE_NAME: "guid-k3x9q2vw7h",
                                  "lessor.dev/resource-handle-namespace": OPERATOR_NAMESPACE, PROVIDER_NAME: "plain"}
    assert metadata["annotations"]["note"] == "hi" and "lessor.dev/anything" not in metadata["annotations"]


# ------------------------------------------------------------------ kinds


def test_changing_the_kind_of_an_existing_resource_is_refused_with_a_condition() -> None:
    existing = {"apiVersion": "v1", "kind": "ConfigMap", "name": "guid0-k3x9q2vw7h", "namespace": OPERATOR_NAMESPACE}
    now_a_secret = provider(override={"apiVersion": "v1", "kind": "Secret"})
    result = render(handle({}, references=[existing]), now_a_secret)
    assert (result.reason, result.definition, result.reference) == ("KindChangeRefused", None, existing)
    assert result.message == (
        "spec.resources[0]: the resource exists as v1 ConfigMap lessor-system/guid0-k3x9q2vw7h; the template would "
        "make it a v1 Secret: an existing resource's apiVersion and kind cannot change")
    condition = rendered_condition([result], now=NOW, generation=4)
    assert (condition["type"], condition["status"], condition["reason"], condition["observedGeneration"]) == (
        "Rendered", "False", "KindChangeRefused", 4)


def test_a_template_cannot_change_the_kind_a_provider_fixes_by_match() -> None:
    p = provider(override={}, match={"apiVersion": "example.com/v1", "kind": "Environment"})
    assert render(handle({}), p).reference["kind"] == "Environment"  # filled in from the provider
    refused = render(handle({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding"}), p)
    assert refused.reason == "Forbidden" and "apiVersion 'rbac.authorization.k8s.io/v1'" in refused.message


# ------------------------------------------------------------------ templating


def test_override_templates_see_every_variable_and_a_clock_stuck_at_now() -> None:
    p = provider(template={"enable": True}, override={"apiVersion": "v1", "kind": "ConfigMap", "data": {
        "claim": "{{ resource_claim.metadata.name }}", "handle": "{{ resource_handle.metadata.name }}",
        "index": "{{ resource_index }}", "provider": "{{ resource_provider.metadata.name }}",
        "size": "{{ resource_template.data.size }}", "user": "{{ requester_user.metadata.name }}",
        "email": "{{ requester_identity.extra.email }}", "until": "{{ timestamp.utcnow + timedelta('2h') }}"}})
    h = handle({"data": {"size": "large"}}, claim={"name": "alice-env", "namespace": "lab"})
    result = render(h, p, claim={"metadata": {"name": "alice-env", "namespace": "lab"}},
                    requester_user={"metadata": {"name": "alice"}},
                    requester_identity={"extra": {"email": "alice@example.com"}})
    assert result.definition["data"] == {
        "claim": "alice-env", "handle": "guid-k3x9q2vw7h", "index": 0, "provider": "plain", "size": "large",
        "user": "alice", "email": "alice@example.com", "until": "2024-03-01T14:00:00Z"}


def test_a_template_error_names_the_providers_field() -> None:
    p = provider(template={"enable": True}, override={"apiVersion": "v1", "kind": "ConfigMap",
                                                      "data": {"owner": "{{ resource_claim.metadata.name }}"}})
    result = render(handle({}), p)  # unbound: resource_claim is none
    assert result.reason == "TemplateError"
    assert result.message.startswith("spec.resources[0]: ResourceProvider plain could not render "
                                     "/spec/override/data/owner: undefined")


def test_a_claims_jinja_payload_is_copied_verbatim_into_the_resource() -> None:
    payload = "{{ ''.__class__.__mro__[1].__subclasses__() }}"
    p = provider(template={"enable": True}, override={"apiVersion": "v1", "kind": "ConfigMap"})
    assert render(handle({"data": {"note": payload}}), p).definition["data"] == {"note": payload}


def test_resource_requires_claim_waits_until_bound() -> None:
    p = provider(resourceRequiresClaim=True)
    waiting = render(handle({}), p)
    assert waiting.waiting and waiting.definition is None
    assert rendered_condition([waiting], now=NOW)["status"] == "True"
    bound = render(handle({}, claim={"name": "c", "namespace": "lab"}), p, claim={"metadata": {"name": "c"}})
    assert bound.rendered


def test_a_missing_or_broken_provider_is_reported_per_resource() -> None:
    h = handle({}, provider="gone")
    [missing] = render_handle(h, {}, operator_namespace=OPERATOR_NAMESPACE, now=NOW)
    assert (missing.reason, missing.message) == (
        "ProviderNotFound", "spec.resources[0].provider.name: there is no ResourceProvider gone")
    broken = render(handle({}), provider(matchIgnore=["("]))
    assert broken.reason == "ProviderInvalid"


def test_the_requester_comes_from_the_claim_namespaces_annotation() -> None:
    assert requester_of({"metadata": {"annotations": {"openshift.io/requester": "alice"}}}) == "alice"
    assert requester_of({"metadata": {"annotations": None}}) is None
    assert requester_of(None) is None


# ------------------------------------------------------------------ a new handle's references


def test_a_new_handle_is_named_as_generate_name_would_name_it() -> None:
    names = {new_handle_name() for _ in range(50)}
    assert len(names) == 50
    for name in names:
        assert name.startswith("guid-") and len(name) == 10
        assert handle_guid({"metadata": {"name": name, "generateName": "guid-"}}) == name.removeprefix("guid-")


def test_a_new_handle_carries_the_references_its_actor_would_record_and_none_it_cannot_know() -> None:
    claim = {"metadata": {"name": "alice-env", "namespace": "lab"}}
    bound = {"name": "alice-env", "namespace": "lab"}
    plain = provider()
    h = handle({}, {"metadata": {"generateName": "db-"}}, claim=bound)
    made = with_references(h, {"plain": plain}, operator_namespace=OPERATOR_NAMESPACE, claim=claim, now=NOW)
    rendered = render_handle(h, {"plain": plain}, operator_namespace=OPERATOR_NAMESPACE, claim=claim, now=NOW)
    assert [entry["reference"] for entry in made["spec"]["resources"]] == [r.reference for r in rendered]
    assert [entry["reference"]["name"] for entry in made["spec"]["resources"]] == [
        "guid0-k3x9q2vw7h", "db-k3x9q2vw7h"]
    assert "reference" not in h["spec"]["resources"][0]  # the given body is left as it was
    # the actor, rendering the created handle, keeps those names: it has no reference of its own to write
    again = render_handle(made, {"plain": plain}, operator_namespace=OPERATOR_NAMESPACE, claim=claim, now=NOW)
    assert [r.reference for r in again] == [entry["reference"] for entry in made["spec"]["resources"]]

    by_requester = provider("by-requester", template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ requester_user.metadata.name }}-env"}})
    broken = provider("broken", template={"enable": True}, override={
        "apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "{{ nothing.here }}"}})
    for left in (by_requester, broken):  # looked up, or explained, by the actor only
        h = handle({}, provider=left.name, claim=bound)
        made = with_references(h, {left.name: left}, operator_namespace=OPERATOR_NAMESPACE, claim=claim, now=NOW)
        assert "reference" not in made["spec"]["resources"][0], left.name
