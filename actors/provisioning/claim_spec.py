"""A claim's (or pool's) resources, each matched to its provider, defaulted and validated.

Every problem is collected, none raised, each with the field a user edits:
`spec.resources[0].template/data/size: 9 is greater than the maximum of 8`
(the template's field, then a JSON pointer inside the template, since
template keys may contain dots). The errors go to
`status.resources[].validationError` and to the `Valid` condition, so one
look at the claim shows everything to fix, not the first problem only.

Besides the provider's schema and checks, a claim's own template may not
choose where or what the operator creates: no `metadata.namespace`, no
`metadata.name` unless the provider's schema declares it (then the schema
judges the name, and an object of that name that lessor did not create for
the handle is a `ResourceConflict`, never taken over), no `lessor.dev/`
labels or annotations, and no `apiVersion`/`kind` other than the provider's. Claim values are data:
they are never rendered as templates.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.views.provisioning import ClaimView, HandleView, provider_name
from lessor.model.jsonpatch import apply, diff, field_path, matches_ignoring
from lessor.templates import (
    InvalidSchemaError,
    TemplateError,
    check_variables,
    parse_timestamp,
    run_checks,
    validate_schema,
)

from ..conditions import UNKNOWN, new_condition
from .lifespan import LifespanConfig, combine, lifespan_variables
from .parameters import parameter_values
from .provider_mode import Expanded, expand, in_provider_terms
from .provider import Object, Provider, Readiness, clock
from .resource_errors import REASONS, ResourceError
from .throttle import THROTTLED, Throttle
from lessor.model.labels import DOMAIN

__all__ = ["REASONS", "ClaimResource", "ClaimSpec", "PoolSpec", "ResourceError", "bound_templates", "forbidden",
           "lifespan_errors", "matches_handle", "ready_condition", "resolve_claim", "resolve_pool", "resource_state",
           "status_resources", "valid_condition", "validate_template"]

_GENERATE_NAME = re.compile(r"[a-z0-9]([-a-z0-9.]*[-a-z0-9.])?")
_DOMAIN = DOMAIN


@dataclass(frozen=True, eq=False)
class ClaimResource:
    """`spec.resources[index]` resolved: its provider and its defaulted template (None if not made)."""

    index: int
    name: str
    provider: Provider | None
    template: Object | None
    errors: tuple[ResourceError, ...] = ()

    @property
    def valid(self) -> bool:
        return not self.errors


@dataclass(frozen=True, eq=False)
class ClaimSpec:
    """All resources of a claim or pool; `errors` holds problems of the whole (no resources at all)."""

    resources: tuple[ClaimResource, ...]
    errors: tuple[ResourceError, ...] = ()
    parameters: Mapping[str, Any] | None = None
    """In provider mode (`spec.provider`), every parameter's value; None otherwise."""

    @property
    def all_errors(self) -> tuple[ResourceError, ...]:
        return self.errors + tuple(error for resource in self.resources for error in resource.errors)

    @property
    def valid(self) -> bool:
        return not self.all_errors

    @property
    def templates(self) -> list[Object | None]:
        return [resource.template for resource in self.resources]

    @property
    def lifespan(self) -> LifespanConfig:
        """The minimum of each lifespan setting over the providers, for a handle made for this claim."""
        return combine(r.provider.lifespan for r in self.resources if r.provider is not None)

    def provider_reference(self) -> dict[str, Any] | None:
        """`{name, parameterValues}` in provider mode (for a handle's `spec.provider` and a claim's status)."""
        if self.parameters is None or not self.resources or self.resources[-1].provider is None:
            return None
        return {"name": self.resources[-1].provider.name, "parameterValues": dict(self.parameters)}

    def handle_resources(self) -> list[Object]:
        """`spec.resources` of a new handle made for this claim (valid claims only)."""
        return [{"name": r.name, "provider": {"name": r.provider.name}, "template": copy.deepcopy(r.template)}
                for r in self.resources if r.provider is not None and r.template is not None]


# ---------------------------------------------------------------- resolving


def resolve_claim(claim: Mapping[str, Any], providers: Mapping[str, Provider], *, now: datetime,
                  handle: Mapping[str, Any] | None = None, throttle: Throttle | None = None) -> ClaimSpec:
    """Match, default and validate every resource of a ResourceClaim.

    `providers` are those of the operator's namespace, by name; `handle` is the claim's handle once bound
    (its `spec.vars` win over the providers' in checks, and its lifespan templates are rendered for the claim).
    `throttle`: the operator's (throttle.py), which holds back a provider whose templates keep running out of
    time and counts this resolution's; None holds nothing back and counts nothing.
    """
    return _resolve(claim, providers, claim=claim, now=now, handle=handle, throttle=throttle)


@dataclass(frozen=True, eq=False)
class PoolSpec(ClaimSpec):
    """All resources of a ResourcePool, resolved: named providers, schema only, no claim rules.

    The same shape as a claim's, so a claim is compared with what the pool's handles were made from."""


def resolve_pool(pool: Mapping[str, Any], providers: Mapping[str, Provider], *, now: datetime,
                 throttle: Throttle | None = None) -> PoolSpec:
    """The same for a ResourcePool's templates, written by admins: named providers, schema only, no claim rules.

    A pool's handles take these defaulted templates, so claims are compared with what they would have asked.
    """
    spec = _resolve(pool, providers, claim=None, now=now, throttle=throttle)
    return PoolSpec(spec.resources, spec.errors, spec.parameters)


def _resolve(obj: Mapping[str, Any], providers: Mapping[str, Provider], *,
             claim: Mapping[str, Any] | None, now: datetime, handle: Mapping[str, Any] | None = None,
             throttle: Throttle | None = None) -> ClaimSpec:
    spec = obj.get("spec")
    if spec is not None and not isinstance(spec, Mapping):
        return ClaimSpec((), (ResourceError("spec", "must be an object", "InvalidTemplate"),))
    entries = (spec or {}).get("resources") or []
    whole = lifespan_errors(claim) if claim is not None else []
    if not isinstance(entries, list):
        whole.insert(0, ResourceError("spec.resources", "must be a list of resources (each a provider and a "
                                      "template)", "InvalidTemplate"))
        return ClaimSpec((), tuple(whole))
    if isinstance(spec, Mapping) and spec.get("provider") is not None:  # provider mode: claims and pools alike
        if entries:
            what = "a claim" if claim is not None else "a pool"
            whole.insert(0, ResourceError("spec.provider", f"{what} gives either spec.provider (a provider and its "
                                          "parameter values) or spec.resources, not both", "Forbidden"))
            return ClaimSpec((), tuple(whole))
        mode = _provider_mode(obj, providers, tuple(whole), now, checks=claim is not None, handle=handle,
                              throttle=throttle)
        return _with_lifespans(mode, claim, handle, now) if claim is not None else mode
    if not entries:
        whole.insert(0, ResourceError("spec.resources", "at least one resource is needed", "NoResources"))
        return ClaimSpec((), tuple(whole))
    spec = ClaimSpec(tuple(_resource(i, entry, providers, claim, now, handle, throttle)
                           for i, entry in enumerate(entries)),
                     tuple(whole))
    return _with_lifespans(spec, claim, handle, now) if claim is not None else spec


def _with_lifespans(spec: ClaimSpec, claim: Mapping[str, Any], handle: Mapping[str, Any] | None,
                    now: datetime) -> ClaimSpec:
    """The spec, with an error for each provider lifespan template that cannot be rendered for this claim."""
    errors = []
    for provider in dict.fromkeys(r.provider for r in spec.resources if r.provider is not None and r.provider.valid):
        if provider.lifespan.templates:
            _, problems = provider.lifespan.render(lifespan_variables(claim, handle, now))
            errors += [ResourceError("spec.resources", f"ResourceProvider {provider.name}'s {problem}",
                                     "ProviderTemplateError") for problem in problems]
    if not errors:
        return spec
    return ClaimSpec(spec.resources, spec.errors + tuple(errors), spec.parameters)


def _provider_mode(claim: Mapping[str, Any], providers: Mapping[str, Provider], whole: tuple[ResourceError, ...],
                   now: datetime, *, checks: bool = True, handle: Mapping[str, Any] | None = None,
                   throttle: Throttle | None = None) -> ClaimSpec:
    """`spec.provider: {name, parameterValues}`: the resources `provider_mode.expand` makes from the provider (its
    linked providers' first, then its own template.definition rendered with the values). The templates are the
    providers' (no claim-only restrictions); their schemas apply, and their checks to a claim (`checks`): a
    pool in provider mode (`claim` is then the pool) is judged by the schema only, as a pool's templates are."""
    given = ClaimView.of(claim).provider.get("name")  # as written: a name that is not one is named in the error
    name = given if isinstance(given, str) else None
    provider = providers.get(name) if name is not None else None
    if provider is None:
        error = ResourceError("spec.provider.name", f"there is no ResourceProvider {given}", "ProviderNotFound", 0)
        return ClaimSpec((ClaimResource(0, str(given or ""), None, None, (error,)),), whole)
    problem = None
    if not provider.valid:
        problem = ResourceError("spec.provider.name", f"ResourceProvider {provider.name} is invalid: "
                                + "; ".join(provider.errors), "ProviderInvalid", 0)
    elif provider.template_definition is None and not provider.links:
        problem = ResourceError("spec.provider.name", f"ResourceProvider {provider.name} has no "
                                "spec.template.definition to render from parameters (nor linkedResourceProviders): "
                                "name it in spec.resources[].provider instead", "ProviderInvalid", 0)
    if problem is not None:
        return ClaimSpec((ClaimResource(0, provider.resource_name, provider, None, (problem,)),), whole)
    values, errors = parameter_values(provider, claim, now=now)
    expanded: list[Expanded] = []
    if not errors:
        expanded, errors = expand(provider, values, claim, providers, now=now)
    if not errors and not expanded:  # a link-only provider whose every link's `when` is false
        errors = [ResourceError("spec.provider.parameterValues", f"ResourceProvider {provider.name} creates nothing "
                                "itself and no linkedResourceProviders[].when holds for these values: the claim would "
                                "have no resource", "NoResources", 0)]
    if errors or not expanded:
        return ClaimSpec((ClaimResource(0, provider.resource_name, provider, None, tuple(errors)),), whole, values)
    names, owners = [e.name for e in expanded], [e.provider.name for e in expanded]
    resources = tuple(
        ClaimResource(i, e.name, e.provider, e.template, tuple(in_provider_terms(
            validate_template(e.provider, e.template, index=i, claim=claim, now=now, checks=checks, handle=handle,
                              throttle=throttle),
            owners, names)))
        for i, e in enumerate(expanded))
    return ClaimSpec(resources, whole, values)


def lifespan_errors(claim: Mapping[str, Any]) -> list[ResourceError]:
    """A claim's `spec.lifespan.start`/`end` that are not times in lessor's range (1970 to 9000)."""
    lifespan = ClaimView.of(claim).lifespan_given
    if lifespan is None:
        return []
    if not isinstance(lifespan, Mapping):
        return [ResourceError("spec.lifespan", "must be an object", "InvalidLifespan")]
    errors = []
    for key in ("start", "end"):
        if lifespan.get(key) is not None:
            try:
                parse_timestamp(lifespan[key])
            except (TypeError, ValueError) as error:
                errors.append(ResourceError(f"spec.lifespan.{key}", str(error), "InvalidLifespan"))
    return errors


def _resource(index: int, entry: Any, providers: Mapping[str, Provider],
              claim: Mapping[str, Any] | None, now: datetime, handle: Mapping[str, Any] | None = None,
              throttle: Throttle | None = None) -> ClaimResource:
    field = f"spec.resources[{index}]"
    if not isinstance(entry, Mapping):
        return ClaimResource(index, "", None, None, (
            ResourceError(field, "must be an object (a provider and a template)", "InvalidTemplate", index),))
    template = entry.get("template") or {}
    provider, error = _provider_for(index, entry, template, providers, can_match=claim is not None)
    name = str(entry.get("name") or (provider.resource_name if provider else ""))
    if error:
        return ClaimResource(index, name, provider, None, (error,))
    assert provider is not None
    if not isinstance(template, Mapping):
        error = ResourceError(f"{field}.template", "must be an object", "InvalidTemplate", index)
        return ClaimResource(index, name, provider, None, (error,))
    if claim is not None and throttle is not None and (hold := throttle.holding(provider.name)) is not None:
        # its templates keep running out of time: a claim waits for the hold to end (a pool, the
        # administrator's, is never held back)
        return ClaimResource(index, name, provider, None,
                             (ResourceError(f"{field}.provider.name", hold.message, THROTTLED, index),))
    errors = forbidden(template, provider, index) if claim is not None else []
    try:
        defaulted = provider.apply_defaults(template, claim=claim, index=index, now=now)
    except TemplateError as failure:
        if throttle is not None:
            throttle.note(provider.name, field_path("spec.default", failure.path.removeprefix("/spec/default")),
                          failure.message)
        message = f"ResourceProvider {provider.name} could not render {failure}"
        errors.append(ResourceError(f"{field}.provider.name", message, "ProviderTemplateError", index))
        return ClaimResource(index, name, provider, None, tuple(errors))
    # A pool has no claim: checks are written about claims (`resource_claim.metadata...`), so only the schema applies.
    errors += validate_template(provider, defaulted, index=index, claim=claim, now=now, checks=claim is not None,
                                handle=handle, throttle=throttle)
    return ClaimResource(index, name, provider, defaulted, tuple(errors))


def _provider_for(index: int, entry: Mapping[str, Any], template: Any, providers: Mapping[str, Provider],
                  can_match: bool) -> tuple[Provider | None, ResourceError | None]:
    field = f"spec.resources[{index}]"
    named = (entry.get("provider") or {}).get("name")
    if named:
        provider = providers.get(named)
        if provider is None:
            return None, ResourceError(f"{field}.provider.name", f"there is no ResourceProvider {named}",
                                       "ProviderNotFound", index)
    elif not can_match:
        return None, ResourceError(f"{field}.provider.name", "is required", "ProviderNotFound", index)
    else:
        candidates = sorted((p for p in providers.values() if p.matches(template)), key=lambda p: p.name)
        if not candidates:
            return None, ResourceError(f"{field}.provider", "no ResourceProvider's match fits the template; "
                                       "name one in provider.name", "ProviderNotFound", index)
        if len(candidates) > 1:
            names = ", ".join(p.name for p in candidates)
            return None, ResourceError(f"{field}.provider", f"the template fits the match of ResourceProviders "
                                       f"{names}; name one in provider.name", "ProviderAmbiguous", index)
        provider = candidates[0]
    if not provider.valid:
        message = f"ResourceProvider {provider.name} is invalid: " + "; ".join(provider.errors)
        return provider, ResourceError(f"{field}.provider.name", message, "ProviderInvalid", index)
    if provider.link_only:
        return provider, ResourceError(f"{field}.provider.name", f"ResourceProvider {provider.name} creates nothing "
                                       "itself (it only has linkedResourceProviders): name it in spec.provider",
                                       "ProviderInvalid", index)
    return provider, None


def forbidden(template: Mapping[str, Any], provider: Provider, index: int) -> list[ResourceError]:
    """What a claim's own template may not say: where the resource goes, its name, its kind, its lifecycle
    (ownerReferences, finalizers) or the operator's `lessor.dev/` labels and annotations."""
    field = f"spec.resources[{index}].template"
    errors = []
    metadata = mapping_at(template, "metadata")
    if "namespace" in metadata:
        errors.append(ResourceError(f"{field}/metadata/namespace", "a claim cannot choose the namespace of its "
                                    f"resource: ResourceProvider {provider.name} places it", "Forbidden", index))
    if "name" in metadata and not provider.claims_name_resources:
        errors.append(ResourceError(f"{field}/metadata/name", f"ResourceProvider {provider.name} does not let a claim "
                                    "name its resource: the name is made from the handle's guid (metadata.generateName "
                                    "sets a prefix); a provider whose validation.openAPIV3Schema declares metadata.name "
                                    "lets claims name theirs", "Forbidden", index))
    for key in ("ownerReferences", "finalizers"):
        if key in metadata:
            errors.append(ResourceError(f"{field}/metadata/{key}", f"a claim cannot set the {key} of its resource: "
                                        "the operator manages its lifecycle", "Forbidden", index))
    generate_name = metadata.get("generateName")
    if generate_name is not None and not (isinstance(generate_name, str) and len(generate_name) <= 200
                                          and _GENERATE_NAME.fullmatch(generate_name)):
        errors.append(ResourceError(f"{field}/metadata/generateName", "must be lowercase letters, digits, '-' "
                                    "and '.', starting with a letter or digit, at most 200 characters",
                                    "InvalidTemplate", index))
    for section in ("labels", "annotations"):
        for key in metadata.get(section) or {}:
            if isinstance(key, str) and key.startswith(_DOMAIN):
                pointer = f"{field}/metadata/{section}/{key.replace('~', '~0').replace('/', '~1')}"
                errors.append(ResourceError(pointer, f"{_DOMAIN} {section} are set by the operator only",
                                            "Forbidden", index))
    for key, fixed in (("apiVersion", provider.api_version), ("kind", provider.kind)):
        if key in template and fixed is not None and template[key] != fixed:
            errors.append(ResourceError(f"{field}/{key}", f"ResourceProvider {provider.name} makes "
                                        f"{key} {fixed!r}; a claim cannot change it to {template[key]!r}",
                                        "Forbidden", index))
    return errors


def validate_template(provider: Provider, template: Mapping[str, Any], *, index: int,
                      claim: Mapping[str, Any] | None, now: datetime, checks: bool = True,
                      handle: Mapping[str, Any] | None = None, throttle: Throttle | None = None) -> list[ResourceError]:
    """Every schema violation and (with `checks`) failed check of a defaulted template; never raises.

    Checks see the provider's `spec.vars` (and, once bound, the handle's, which win), as docs/templates.md says:
    `spec.count <= count_maximum` with `vars: {count_maximum: 10}`."""
    field = f"spec.resources[{index}].template"
    errors = []
    if provider.schema is not None:
        try:
            for violation in validate_schema(template, provider.schema):
                errors.append(ResourceError(field + violation.path, violation.message, "SchemaViolation", index))
        except InvalidSchemaError as error:  # the provider reports it too; never crash on it
            errors.append(ResourceError(f"spec.resources[{index}].provider.name",
                                        f"ResourceProvider {provider.name}: {error}", "ProviderInvalid", index))
    if checks and provider.checks:
        variables = check_variables(template, resource_claim=claim, resource_index=index,
                                    resource_provider=provider.definition, clock=clock(now))
        try:
            variables = provider.with_vars(variables, handle)
        except TemplateError as unrenderable:
            return errors + [ResourceError(f"spec.resources[{index}].provider.name", f"ResourceProvider "
                                           f"{provider.name} could not render {unrenderable}", "ProviderTemplateError",
                                           index)]
        entries = [{"name": check.name, "check": check.check} for check in provider.checks]
        for failure in run_checks(entries, variables):
            if throttle is not None:
                throttle.note(provider.name, f"spec.validation.checks[{failure.name}]", failure.error or "")
            errors.append(ResourceError(field, str(failure), "CheckFailed", index))
    return errors


# ------------------------------------------------------------------ binding


def matches_handle(spec: ClaimSpec, handle: Mapping[str, Any]) -> bool:
    """Whether a pool's handle satisfies a valid claim.

    Same number of resources, same providers in the same order, and each
    template equal to the handle's except at the provider's `matchIgnore` paths.
    """
    handle_resources = HandleView.of(handle).resources
    if not spec.valid or len(handle_resources) != len(spec.resources):
        return False
    for resource, theirs in zip(spec.resources, handle_resources):
        assert resource.provider is not None
        if provider_name(theirs) != resource.provider.name:
            return False
        if not matches_ignoring(resource.template, theirs.get("template") or {}, resource.provider.match_ignore):
            return False
    return True


def bound_templates(spec: ClaimSpec, handle: Mapping[str, Any]) -> list[Object]:
    """A matching handle's templates once bound: the claim's values added or replaced at the ignored paths.

    What the pool provisioned and the claim does not mention stays.
    """
    result = []
    for resource, theirs in zip(spec.resources, HandleView.of(handle).resources):
        current = theirs.get("template") or {}
        patch = [op for op in diff(current, resource.template) if op["op"] != "remove"]
        result.append(apply(current, patch))
    return result


# ------------------------------------------------------------------- status


def status_resources(spec: ClaimSpec, previous: Sequence[Mapping[str, Any]] | None = None,
                     extra: Sequence[ResourceError] = ()) -> list[Object]:
    """`status.resources[]`: name, provider and validationError per resource.

    `reference` and `state` are kept from `previous` (the current status) for
    a resource that keeps its provider; `extra` adds errors found later, e.g.
    refused updates, to the resources they concern.
    """
    entries = []
    for resource in spec.resources:
        entry: Object = {"name": resource.name}
        if resource.provider is not None:
            entry["provider"] = {"name": resource.provider.name}
        if previous and resource.index < len(previous):
            old = previous[resource.index]
            if (old.get("provider") or {}).get("name") == entry.get("provider", {}).get("name"):
                entry.update({key: copy.deepcopy(old[key]) for key in ("reference", "state") if key in old})
        errors = [*resource.errors, *(e for e in extra if e.index == resource.index)]
        if errors:
            entry["validationError"] = "; ".join(str(error) for error in errors)
        entries.append(entry)
    return entries


def valid_condition(errors: Sequence[ResourceError], *, now: datetime, generation: int | None = None) -> Object:
    """The claim's `Valid` condition: True, or False with the most fundamental reason and every error.

    Merge it with `conditions.merge_condition`, which keeps lastTransitionTime while the status holds.
    """
    if not errors:
        return new_condition("Valid", True, "Valid", "every resource template is valid",
                             now=now, observed_generation=generation)
    reason = min((error.reason for error in errors), key=lambda r: REASONS.index(r) if r in REASONS else len(REASONS))
    message = "; ".join(str(error) for error in errors)
    return new_condition("Valid", False, reason, message, now=now, observed_generation=generation)


def resource_state(obj: Mapping[str, Any]) -> Object:
    """A resource as `status.resources[].state` shows it: a copy without `metadata.managedFields`."""
    state = copy.deepcopy(dict(obj))
    if isinstance(state.get("metadata"), dict):
        state["metadata"].pop("managedFields", None)
    return state


def ready_condition(readiness: Sequence[tuple[str, Readiness]], *, now: datetime,
                    generation: int | None = None) -> Object:
    """`Ready`: True when every resource is; else False (or Unknown when a check failed), naming each that is not.

    `readiness` pairs a label for each resource (e.g. `spec.resources[0] (environment)`) with its Readiness.
    """
    if not readiness:
        return new_condition("Ready", False, "NoResources", "the claim has no resources",
                             now=now, observed_generation=generation)
    waiting = [f"{label}: {r.message}" for label, r in readiness if r.ready is not True]
    if not waiting:
        return new_condition("Ready", True, "Ready", "every resource is ready", now=now, observed_generation=generation)
    unknown = any(r.ready is None for _, r in readiness)
    reason = "ReadinessCheckFailed" if unknown else "ResourcesNotReady"
    return new_condition("Ready", UNKNOWN if unknown else False, reason, "; ".join(waiting),
                         now=now, observed_generation=generation)
