"""The resources a handle stands for: its templates with the providers' overrides, named, placed and labelled.

Placement and identity are decided here, never by a claim:

- namespace: the provider's rendered `override.metadata.namespace`, else the
  operator's namespace. A namespace in the template is dropped.
- name: an existing resource keeps its name; else `override`'s (or an
  admin-written pool template's) `metadata.name`; else `generateName` +
  the handle's guid; else `guid<index>-<guid>` (the seed's form). The guid
  is the part of the handle's name that `generateName` added, whatever its
  length (the seed assumed five characters).
- `apiVersion` and `kind` are the provider's; an existing resource's never
  change (refused with `KindChangeRefused` rather than replacing it).
- `lessor.dev/` labels and annotations are the operator's: whatever the
  template says there is replaced by the handle, claim, provider and pool
  the resource belongs to (labels only where the value is a valid label value).
"""

from __future__ import annotations

import copy
import json
import re
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.keys import reference_key
from lessor.model.views.meta import Meta
from lessor.model.views.provisioning import HandleView, PoolView, provider_name
from lessor.model.labels import (CLAIM_NAME, CLAIM_NAMESPACE, DOMAIN, HANDLE_NAME, HANDLE_NAMESPACE, POOL_NAME,
                                 PROVIDER_NAME)
from lessor.templates import TemplateError, render_object, template_variables

from ..conditions import new_condition
from .linked import WAITING_FOR_LINKED, linked_variables
from .provider import Object, Provider, clock
#: The namespace annotation naming who asked for the namespace; `requester_user` and `requester_identity` come from it.
REQUESTER = "openshift.io/requester"

_LABEL_VALUE = re.compile(r"(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


@dataclass(frozen=True)
class RenderedResource:
    """One handle resource: the definition to create or update, or why there is none.

    `reason` is empty when rendered; otherwise one of `ResourceRequiresClaim`
    and `WaitingForLinkedResource` (waiting, not errors), `ProviderNotFound`, `ProviderInvalid`,
    `TemplateError`, `Forbidden`, `InvalidResource`, `KindChangeRefused`; the handle actor adds
    `ApplyFailed` and `ResourceConflict` (the name is taken by a resource that is not the handle's).
    """

    index: int
    definition: Object | None
    reference: Object | None
    reason: str = ""
    message: str = ""

    @property
    def rendered(self) -> bool:
        return self.definition is not None

    @property
    def waiting(self) -> bool:
        return self.reason in WAITING_FOR

    @property
    def waiting_for(self) -> str | None:
        """What it waits for, as `status.resources[].waitingFor` says it (the pool/claim tool's words)."""
        return WAITING_FOR.get(self.reason)


#: Why a resource is not created yet without anything being wrong, and what `waitingFor` says then.
WAITING_FOR = {"ResourceRequiresClaim": "ResourceClaim", "WaitingForLinkedResource": WAITING_FOR_LINKED}


Handle = Mapping[str, Any] | HandleView
"""A handle as its body or its view: these functions build the view once and pass it on."""


def _view(handle: Handle) -> HandleView:
    return handle if isinstance(handle, HandleView) else HandleView.of(handle)


def handle_guid(handle: Handle) -> str:
    """The part of the handle's name that `generateName` added (the whole name if it had none)."""
    return _view(handle).guid


def requester_of(namespace: Mapping[str, Any] | None) -> str | None:
    """The user named by the claim namespace's `openshift.io/requester` annotation.

    The caller looks up that User and its Identity for `requester_user` and `requester_identity`.
    """
    return Meta.of(namespace).annotations.get(REQUESTER) or None


def valid_label_value(value: Any) -> bool:
    """Whether `value` may be a label value: at most 63 characters of `[-A-Za-z0-9_.]`, alphanumeric at both ends."""
    return isinstance(value, str) and len(value) <= 63 and _LABEL_VALUE.fullmatch(value) is not None


def tracking(handle: Handle, provider: str) -> tuple[dict[str, str], dict[str, str]]:
    """The `lessor.dev/` (labels, annotations) of a resource of this handle."""
    view = _view(handle)
    claim = view.claim_ref
    values = {
        HANDLE_NAME: view.name,
        HANDLE_NAMESPACE: view.namespace,
        CLAIM_NAME: claim.get("name"),
        CLAIM_NAMESPACE: claim.get("namespace"),
        PROVIDER_NAME: provider,
        POOL_NAME: view.pool,
    }
    annotations = {key: str(value) for key, value in values.items() if value}
    labels = {key: value for key, value in annotations.items() if valid_label_value(value)}
    return labels, annotations


def render_handle(handle: Handle, providers: Mapping[str, Provider], *, operator_namespace: str,
                  claim: Mapping[str, Any] | None = None, requester_identity: Mapping[str, Any] | None = None,
                  requester_user: Mapping[str, Any] | None = None, live: Mapping[Any, Mapping[str, Any]] | None = None,
                  now: datetime) -> list[RenderedResource]:
    """Every resource of the handle, in the order of `spec.resources`.

    `live` maps `reference_key(reference)` to the resources as last seen: templates see them as
    `resource_state` and `resource_states`.
    """
    view = _view(handle)
    entries = view.resources
    states = [(live or {}).get(reference_key(entry["reference"])) if isinstance(entry.get("reference"), Mapping)
              else None for entry in entries]
    results = []
    for index, entry in enumerate(entries):
        name = provider_name(entry)
        provider = providers.get(name) if name else None
        if provider is None:
            message = f"spec.resources[{index}].provider.name: there is no ResourceProvider {name}"
            results.append(RenderedResource(index, None, entry.get("reference"), "ProviderNotFound", message))
            continue
        results.append(render_resource(view, index, provider, operator_namespace=operator_namespace, claim=claim,
                                       requester_identity=requester_identity, requester_user=requester_user,
                                       states=states, now=now))
    return results


def render_resource(handle: Handle, index: int, provider: Provider, *, operator_namespace: str,
                    claim: Mapping[str, Any] | None = None, requester_identity: Mapping[str, Any] | None = None,
                    requester_user: Mapping[str, Any] | None = None,
                    states: list[Mapping[str, Any] | None] | None = None, now: datetime) -> RenderedResource:
    """The definition of `spec.resources[index]` of the handle.

    `claim` is the bound claim (None while unbound); `requester_*` are
    looked up by the caller from the claim namespace's requester annotation;
    `states` are the handle's resources as last seen, by index.
    """
    view = _view(handle)
    entry = view.resources[index]
    field = f"spec.resources[{index}]"
    reference = entry.get("reference")

    def refuse(reason: str, message: str) -> RenderedResource:
        return RenderedResource(index, None, reference, reason, f"{field}: {message}")

    if not provider.valid:
        return refuse("ProviderInvalid", f"ResourceProvider {provider.name} is invalid: " + "; ".join(provider.errors))
    if provider.resource_requires_claim and claim is None:
        return refuse("ResourceRequiresClaim", f"ResourceProvider {provider.name} waits for a claim")

    template = entry.get("template") or {}
    variables = {
        **template_variables(
            resource_claim=claim, resource_handle=view.body, resource_index=index,
            resource_provider=provider.definition, resource_template=template,
            requester_identity=requester_identity, requester_user=requester_user, clock=clock(now)),
        **handle_variables(view, index, states, requester_identity),
    }
    if provider.links:  # what this resource reads from the resources it is linked to, once they are far enough
        linked, waiting = linked_variables(provider.links, view.resources, states or [], variables)
        if waiting:
            return refuse("WaitingForLinkedResource", waiting)
        variables.update(linked)
    placed = copy.deepcopy(template)
    if isinstance(placed.get("metadata"), dict):
        placed["metadata"].pop("namespace", None)  # only the provider places resources
    try:
        if provider.template_enable:
            variables = provider.with_vars(variables, view.body)
        definition = provider.apply_override(placed, variables)
    except TemplateError as error:
        return refuse("TemplateError", f"ResourceProvider {provider.name} could not render {error}")

    for key, fixed in (("apiVersion", provider.api_version), ("kind", provider.kind)):
        if fixed is not None:
            definition.setdefault(key, fixed)
            if definition[key] != fixed:
                return refuse("Forbidden", f"the template's {key} {definition[key]!r} is not "
                                           f"ResourceProvider {provider.name}'s {fixed!r}")
        if not isinstance(definition.get(key), str) or not definition[key]:
            return refuse("InvalidResource", f"ResourceProvider {provider.name} gave no {key}")

    if not isinstance(definition.get("metadata"), dict):
        definition["metadata"] = {}
    metadata = definition["metadata"]
    namespace = metadata.get("namespace") or operator_namespace
    generate_name = metadata.pop("generateName", None)
    name = metadata.get("name") or f"{generate_name or f'guid{index}-'}{view.guid}"
    if reference:
        if (reference.get("apiVersion"), reference.get("kind")) != (definition["apiVersion"], definition["kind"]):
            return refuse("KindChangeRefused",
                          f"the resource exists as {reference.get('apiVersion')} {reference.get('kind')} "
                          f"{reference.get('namespace')}/{reference.get('name')}; the template would make it a "
                          f"{definition['apiVersion']} {definition['kind']}: an existing resource's apiVersion "
                          "and kind cannot change")
        name = reference.get("name") or name
        namespace = reference.get("namespace") or namespace
    if not isinstance(name, str) or len(name) > 253 or not _DNS_SUBDOMAIN.fullmatch(name):
        return refuse("InvalidResource", f"the resource name {name!r} is not a valid name (lowercase letters, "
                                         "digits, '-' and '.', at most 253 characters)")
    if not isinstance(namespace, str) or len(namespace) > 63 or not _DNS_SUBDOMAIN.fullmatch(namespace) \
            or "." in namespace:
        return refuse("InvalidResource", f"ResourceProvider {provider.name} gave the namespace {namespace!r}, "
                                         "which is not a valid namespace name")
    metadata["name"] = name
    metadata["namespace"] = namespace

    labels, annotations = tracking(view, provider.name)
    for section, ours, added in (("labels", labels, view.resource_labels),
                                 ("annotations", annotations, view.resource_annotations)):
        theirs = metadata.get(section) if isinstance(metadata.get(section), dict) else {}
        merged = {key: value for key, value in theirs.items() if not str(key).startswith(DOMAIN)}
        if isinstance(added, Mapping):  # the handle's (its pool's) resourceLabels / resourceAnnotations
            merged.update({key: value for key, value in added.items() if not str(key).startswith(DOMAIN)})
        merged.update(ours)
        metadata[section] = merged

    reference = {"apiVersion": definition["apiVersion"], "kind": definition["kind"],
                 "name": name, "namespace": namespace}
    return RenderedResource(index, definition, reference)


#: The letters of a name's generated suffix, as the API server picks them for `generateName` (no vowels, no
#: look-alikes), and how many.
_GUID_LETTERS = "bcdfghjklmnpqrstvwxz2456789"
_GUID_LENGTH = 5


def new_handle_name() -> str:
    """A name for a handle about to be created, in the form `generateName: guid-` gives: `guid-` and five
    random letters. Chosen before the create, so that what depends on the guid (its resources' names) can be
    written in the create; a name that is taken fails the create with AlreadyExists, and another is drawn."""
    return "guid-" + "".join(secrets.choice(_GUID_LETTERS) for _ in range(_GUID_LENGTH))


def uses_requester(provider: Provider) -> bool:
    """Whether the provider's templates read the claim namespace's requester (`requester_user`, ...)."""
    return provider.template_enable and "requester_" in json.dumps([provider.override, provider.view.vars])


def with_references(handle: Mapping[str, Any], providers: Mapping[str, Provider], *, operator_namespace: str,
                    claim: Mapping[str, Any] | None, now: datetime) -> dict[str, Any]:
    """A handle about to be created (named, bound) with `spec.resources[].reference` of each resource its actor
    will create, rendered as the actor renders them: the handle is created with its final spec, and its actor,
    which keeps a recorded reference's name, has no reference of its own to write after the resource's create.

    Left out (the actor records them itself, a write later, as before): a resource that waits (for a claim, a
    linked resource), one whose provider reads the requester (looked up by the actor only), and one whose
    rendering fails (the actor says why)."""
    body = copy.deepcopy(dict(handle))
    entries = body["spec"]["resources"]
    results = render_handle(body, providers, operator_namespace=operator_namespace, claim=claim, now=now)
    for result, entry in zip(results, entries):
        provider = providers.get(provider_name(entry) or "")
        if result.definition is not None and result.reference is not None and provider is not None \
                and not uses_requester(provider) and not entry.get("reference"):
            entry["reference"] = result.reference
    return body


#: What a pool copies onto each handle it creates, as Poolboy's pools do.
POOL_TO_HANDLE = ("vars", "resourceLabels", "resourceAnnotations")


def carried_to_handles(pool: PoolView) -> dict[str, Any]:
    """The pool's `spec.vars`, `resourceLabels`, `resourceAnnotations` and `preferenceScore`, for the spec of a
    handle it creates."""
    carried: dict[str, Any] = {key: copy.deepcopy(dict(value)) for key in POOL_TO_HANDLE
                               if (value := pool.carried(key)) is not None}
    if (score := pool.preference_score) is not None:
        carried["preferenceScore"] = score
    return carried


def handle_variables(handle: Handle, index: int, states: list[Mapping[str, Any] | None] | None,
                     requester_identity: Mapping[str, Any] | None) -> dict[str, Any]:
    """The rest of the pool/claim tool's override variables: the guid and every resource of the handle.

    Its manifests use them (`name: "app-{{ guid }}"`), so they port unchanged.
    """
    view = _view(handle)
    entries = view.resources
    states = list(states) if states is not None else []
    states += [None] * (len(entries) - len(states))
    references = [entry.get("reference") for entry in entries]
    return {
        "guid": view.guid,
        "requester_identities": [requester_identity] if requester_identity is not None else [],
        "resource_name": entries[index].get("name"),
        "resource_reference": references[index] or {},
        "resource_references": references,
        "resource_state": states[index],
        "resource_states": states,
        "resource_templates": [entry.get("template") for entry in entries],
    }


def rendered_condition(results: list[RenderedResource], *, now: datetime,
                       generation: int | None = None) -> Object:
    """The handle's `Rendered` condition: False with the first refusal's reason and every refusal's message.

    Resources waiting for a claim (`resourceRequiresClaim`) are not refusals.
    The claim actor shows the same refusals on the claim, where its user looks.
    """
    refused = [result for result in results if not result.rendered and not result.waiting]
    if refused:
        return new_condition("Rendered", False, refused[0].reason, "; ".join(r.message for r in refused),
                             now=now, observed_generation=generation)
    waiting = "; ".join(result.message for result in results if result.waiting)
    return new_condition("Rendered", True, "Rendered", waiting or "every resource is rendered",
                         now=now, observed_generation=generation)


def status_summary(provider: Provider, handle: Handle, claim: Mapping[str, Any] | None,
                   resources: list[Mapping[str, Any]], now: datetime) -> tuple[Any, str]:
    """The provider's `statusSummaryTemplate` rendered for a claim or its handle (their `status.summary`, as
    the pool/claim tool writes it; `claim` None for a handle no claim holds): (summary, "") or (None, what went
    wrong); (None, "") without a template.

    Every string is a template that sees the usual variables, the handle's (`guid`, `resource_states`,
    ...), the provider's and handle's `vars`, and `resources`: the claim's `status.resources`.
    """
    template = provider.view.status_summary_template
    if template is None:
        return None, ""
    view = _view(handle)
    last = len(view.resources) - 1
    states = [entry.get("state") for entry in resources]
    variables = {
        **template_variables(resource_claim=claim, resource_handle=view.body, resource_provider=provider.definition,
                             clock=clock(now)),
        **(handle_variables(view, last, states, None) if last >= 0 else {}),
        "resources": resources,
    }
    try:
        return render_object(template, provider.with_vars(variables, view.body), "/spec/statusSummaryTemplate"), ""
    except TemplateError as error:
        return None, f"ResourceProvider {provider.name} could not render {error}"
