"""A bound claim's change, turned into what may reach its handle and what is refused, with paths.

The change is the JSON Patch (add/remove/replace only, `lessor.model.jsonpatch.diff`)
from the old to the new defaulted claim template. Both are defaulted with
the same `now`, so a default such as `{{ timestamp.utcnow }}` does not look
like a change. Each operation then passes, in order:

1. the provider's `updateFilters` (none means no updates);
2. identity: no operation may change `apiVersion`, `kind`, `metadata.name`,
   `metadata.namespace`, `ownerReferences`, `finalizers` or a `lessor.dev/`
   label or annotation, whatever the filters allow;
3. application to the handle's current template (an operation that no longer
   applies, e.g. under a path a refused operation would have created, is refused);

and the result must still satisfy the provider's schema and checks, or the
whole resource's update is refused. Refused operations are reported on the
claim as `UpdateRefused` errors naming `spec.resources[i].template<path>`;
they stay reported for as long as the claim asks for them, because the
caller keeps diffing from the template last applied.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.views.provisioning import HandleView
from lessor.model.jsonpatch import JsonPatchError, apply, diff, filter_operations

from .claim_spec import ClaimSpec, ResourceError, resolve_claim, validate_template
from .throttle import Throttle
from lessor.model.labels import DOMAIN
from .provider_mode import in_provider_terms
from .provider import Object, Provider

Operation = dict[str, Any]


@dataclass(frozen=True)
class RefusedChange:
    """One operation that does not reach the handle; `cause` is NotAllowed, Forbidden, Conflict or Invalid."""

    index: int
    op: str
    path: str
    cause: str
    message: str

    @property
    def field(self) -> str:
        return f"spec.resources[{self.index}].template{self.path}"

    def __str__(self) -> str:
        return f"{self.field}: {self.message}"

    def as_error(self) -> ResourceError:
        return ResourceError(self.field, self.message, "UpdateRefused", self.index)


@dataclass(frozen=True, eq=False)
class ResourceUpdate:
    """What happens to one handle resource: the operations applied, those refused, and the resulting template."""

    index: int
    applied: tuple[Operation, ...]
    refused: tuple[RefusedChange, ...]
    template: Object


@dataclass(frozen=True, eq=False)
class ClaimUpdate:
    """The whole plan; `structural` holds changes that can never be applied to a bound claim."""

    resources: tuple[ResourceUpdate, ...]
    structural: tuple[ResourceError, ...] = ()
    provider_mode: tuple[tuple[str, str], ...] | None = None
    """For a claim in provider mode, (resource name, provider) of each resource: its errors are told at its
    parameter values."""

    @property
    def changed(self) -> bool:
        return any(resource.applied for resource in self.resources)

    @property
    def refused(self) -> tuple[RefusedChange, ...]:
        return tuple(change for resource in self.resources for change in resource.refused)

    @property
    def errors(self) -> tuple[ResourceError, ...]:
        """For `status.resources[].validationError` and the `Valid` condition (reason UpdateRefused)."""
        errors = self.structural + tuple(change.as_error() for change in self.refused)
        if self.provider_mode is None:
            return errors
        names, providers = [n for n, _ in self.provider_mode], [p for _, p in self.provider_mode]
        return tuple(in_provider_terms(errors, providers, names))

    def handle_patch(self, handle: Mapping[str, Any]) -> list[Operation]:
        """A JSON Patch for the handle object applying the allowed operations (empty when nothing changes)."""
        entries = HandleView.of(handle).resources
        patch: list[Operation] = []
        for resource in self.resources:
            if not resource.applied:
                continue
            base = f"/spec/resources/{resource.index}/template"
            if "template" not in entries[resource.index]:
                patch.append({"op": "add", "path": base, "value": copy.deepcopy(resource.template)})
                continue
            patch += [{**op, "path": base + op["path"]} for op in resource.applied]
        return patch


def plan_claim_update(old_claim: Mapping[str, Any], new_claim: Mapping[str, Any], handle: Mapping[str, Any],
                      providers: Mapping[str, Provider], *, now: datetime,
                      throttle: Throttle | None = None) -> ClaimUpdate:
    """`plan_update` from two versions of a claim, both resolved with the same `now` (and `throttle`)."""
    old = resolve_claim(old_claim, providers, now=now, handle=handle, throttle=throttle)
    new = resolve_claim(new_claim, providers, now=now, handle=handle, throttle=throttle)
    return plan_update(old.templates, new, handle, claim=new_claim, now=now, throttle=throttle)


def plan_update(old_templates: Sequence[Mapping[str, Any] | None], new: ClaimSpec, handle: Mapping[str, Any], *,
                claim: Mapping[str, Any], now: datetime, throttle: Throttle | None = None) -> ClaimUpdate:
    """What of the change from `old_templates` to `new` (a valid, resolved claim) reaches the handle.

    `old_templates` are the defaulted templates the handle was last brought
    in step with (from the previous claim, or the handle's own templates
    when that is not known). `throttle` counts the checks that run out of time (`resolve_claim`).
    """
    entries = HandleView.of(handle).resources
    if len(new.resources) != len(entries):
        message = (f"resources cannot be added or removed once the claim is bound: the handle has {len(entries)}, "
                   f"the claim asks for {len(new.resources)}")
        return ClaimUpdate((), (ResourceError("spec.resources", message, "UpdateRefused"),))
    structural: list[ResourceError] = []
    updates = []
    for resource, entry in zip(new.resources, entries):
        current = entry.get("template") or {}
        theirs = (entry.get("provider") or {}).get("name")
        if resource.provider is None or resource.template is None:
            continue  # invalid: the Valid condition already says why
        if resource.provider.name != theirs:
            structural.append(ResourceError(f"spec.resources[{resource.index}].provider.name",
                                            f"the provider cannot change once bound (the handle uses {theirs})",
                                            "UpdateRefused", resource.index))
            continue
        old = old_templates[resource.index] if resource.index < len(old_templates) else None
        updates.append(_plan_resource(resource.index, resource.provider, old if old is not None else current,
                                      resource.template, current, claim, now, handle, throttle))
    mode = tuple((r.name, r.provider.name if r.provider else "") for r in new.resources) \
        if new.parameters is not None else None
    return ClaimUpdate(tuple(updates), tuple(structural), mode)


def _plan_resource(index: int, provider: Provider, old: Mapping[str, Any], new: Mapping[str, Any],
                   current: Mapping[str, Any], claim: Mapping[str, Any], now: datetime,
                   handle: Mapping[str, Any] | None = None, throttle: Throttle | None = None) -> ResourceUpdate:
    allowed, not_allowed = filter_operations(diff(old, new), provider.update_filters)
    refused = [RefusedChange(index, op["op"], op["path"], "NotAllowed",
                             f"{op['op']} is not allowed by ResourceProvider {provider.name}'s updateFilters")
               for op in not_allowed]
    applied: list[Operation] = []
    template: Any = copy.deepcopy(current)
    for op in allowed:
        try:
            candidate = apply(template, [op])
        except JsonPatchError as error:
            refused.append(RefusedChange(index, op["op"], op["path"], "Conflict",
                                         f"{op['op']} does not apply to the handle's template: {error}"))
            continue
        if _identity(candidate) != _identity(template):
            refused.append(RefusedChange(index, op["op"], op["path"], "Forbidden",
                                         f"{op['op']} would change the resource's apiVersion, kind, name, namespace, "
                                         f"lifecycle or {DOMAIN} labels; a claim cannot, whatever the updateFilters "
                                         "allow"))
            continue
        template = candidate
        applied.append(op)
    if applied:
        problems = validate_template(provider, template, index=index, claim=claim, now=now, handle=handle,
                                     throttle=throttle)
        if problems:
            why = "; ".join(str(problem) for problem in problems)
            refused += [RefusedChange(index, op["op"], op["path"], "Invalid",
                                      f"{op['op']} refused: the handle's template would not be valid: {why}")
                        for op in applied]
            applied, template = [], copy.deepcopy(current)
    refused.sort(key=lambda change: change.path)
    return ResourceUpdate(index, tuple(applied), tuple(refused), template)


def _identity(template: Any) -> tuple[Any, ...]:
    if not isinstance(template, Mapping):
        return (template,)
    metadata = mapping_at(template, "metadata")
    ours = tuple(sorted(
        (part, key, str(value))
        for part in ("labels", "annotations")
        for key, value in mapping_at(metadata, part).items()
        if str(key).startswith(DOMAIN)))
    lifecycle = (metadata.get("ownerReferences"), metadata.get("finalizers"))
    return (template.get("apiVersion"), template.get("kind"), metadata.get("name"), metadata.get("namespace"),
            lifecycle, ours)
