"""A compiled, cached view of a ResourceProvider.

Claims, pools and handles consult their providers on every event; the
provider's regexes, schema, checks and templates are compiled once per
version of the provider, not per use. Problems in the provider itself
(a bad regex, a broken schema, a template that does not parse) are
collected in `errors`, each naming the provider's field, instead of
raising: a claim that uses a broken provider is told which provider and
which field, and the provider's author can fix it.

The provider also decides what kind of resource it makes: its `override`
(else `match`, else `default`) must set `apiVersion` and `kind`, so a
claim can never choose the kind of object the operator creates. A
provider with only `linkedResourceProviders` creates nothing itself and
has no kind to fix.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import lru_cache
from typing import Any

from lessor.mailbox import Actor
from lessor.model.fields import mapping_at
from lessor.model.jsonpatch import ALL_OPS, json_equal
from lessor.model.kinds import PROVIDER
from lessor.model.views.conditions import find_condition
from lessor.model.views.provisioning import ClaimView, HandleView, ProviderView
from lessor.templates import (
    TemplateError,
    check_expression,
    check_variables,
    compiled_checks,
    escape_pointer_token,
    render_object,
    schema_errors,
    template_errors,
    template_variables,
)
from lessor.templates.errors import describe
from lessor.templates.regexes import regex_errors
from lessor.templates.sandbox import compile_expression

from ..queries import TOPOLOGY, ListObjects
from .lifespan import LifespanConfig
from .linked import Link, parse_links
from .parameters import Parameter, parse_parameters
from lessor.model.labels import DOMAIN

Object = dict[str, Any]
_MARKUP = ("{{", "{%", "{#")


@dataclass(frozen=True)
class Check:
    """One `spec.validation.checks[]` entry."""

    name: str
    check: str


@dataclass(frozen=True)
class Readiness:
    """Whether one resource is ready; `message` says why not (or why it is unknown: `ready` None)."""

    ready: bool | None
    message: str = ""


@dataclass(frozen=True, eq=False)
class Provider:
    """A ResourceProvider, read once. Treat the objects inside as read-only: the view is shared."""

    name: str
    definition: Object
    """The whole ResourceProvider, as templates see it in `resource_provider`."""
    template_enable: bool
    default: Object
    override: Object
    match: Mapping[str, Any] | None
    match_ignore: tuple[str, ...]
    update_filters: tuple[Object, ...]
    schema: Mapping[str, Any] | None
    checks: tuple[Check, ...]
    lifespan: LifespanConfig
    resource_requires_claim: bool
    resource_name: str
    readiness_check: str | None
    health_check: str | None
    parameters: tuple[Parameter, ...]
    links: tuple[Link, ...]
    """`spec.linkedResourceProviders`: the resources a claim in provider mode gets along with this one's."""
    template_definition: Object | None
    """`spec.template.definition`: the resource template of a claim in provider mode, rendered with its values."""
    claim_labels: Mapping[str, str]
    """`resourceClaimLabels`: set on each claim that uses the provider (and `resourceClaimAnnotations`)."""
    claim_annotations: Mapping[str, str]
    api_version: str | None
    """The apiVersion the provider fixes, when known before rendering (None: a template in override sets it)."""
    kind: str | None
    claims_name_resources: bool
    link_only: bool
    trust_linked_values: bool
    """`spec.trustLinkedParameterValues`: values other providers' links give this one's parameters are used as
    given (Poolboy's behaviour), not judged by its parameters' schemas and checks (lessor's default)."""
    """Only `linkedResourceProviders`: no override, default, match or template.definition, so it creates nothing
    itself; a claim naming it in `spec.provider` gets its linked providers' resources (Poolboy's linked-02)."""
    """Whether a claim's template may set `metadata.name` (the name of the resource it gets): when the validation
    schema declares `metadata.name` (`properties.metadata.properties.name`), as Poolboy's providers allow it."""
    errors: tuple[str, ...]
    """Problems in the provider, each `spec.<field>: message`; a provider with errors is not used."""
    view: ProviderView
    """The definition's fields, typed (`definition` as a `ProviderView`)."""

    @property
    def valid(self) -> bool:
        return not self.errors

    def matches(self, template: Any) -> bool:
        """Whether a claim template without `provider.name` is for this provider: `match` is a subset of it."""
        return self.match is not None and _has_fields_of(template, self.match)

    def apply_defaults(self, template: Mapping[str, Any], *, claim: Mapping[str, Any] | None,
                       index: int, now: datetime) -> Object:
        """`default` merged under the template (the template wins); raises TemplateError naming `/spec/default/...`."""
        default: Any = self.default
        if self.template_enable:
            entries = ClaimView.of(claim).resources if claim is not None else ()
            entry = entries[index] if 0 <= index < len(entries) else {}
            variables = template_variables(resource_claim=claim, resource_index=index,
                                           resource_provider=self.definition, clock=clock(now))
            variables["resource_name"] = entry.get("name")  # as the pool/claim tool gives its defaults
            variables = self.with_vars(variables)
            default = render_object(default, variables, "/spec/default")
        merged: dict[str, Any] = merge(default, template)
        return merged

    def with_vars(self, variables: Mapping[str, Any], handle: Mapping[str, Any] | None = None) -> Object:
        """`variables` plus `spec.vars` (and the handle's `spec.vars`, which win), each rendered in order.

        A var's strings are templates that see `variables` and the vars before it; named variables
        win over a var of the same name. Raises TemplateError naming `/spec/vars/<name>`.
        """
        merged: Object = {**self.view.vars, **(HandleView.of(handle).vars if handle is not None else {})}
        rendered: Object = {}
        for name, value in merged.items():
            path = f"/spec/vars/{escape_pointer_token(str(name))}"
            rendered[name] = render_object(value, {**rendered, **variables}, path)
        return {**rendered, **variables}

    def apply_override(self, template: Mapping[str, Any], variables: Mapping[str, Any]) -> Object:
        """`override` merged over the template (the override wins); raises TemplateError naming `/spec/override/...`."""
        override: Any = self.override
        if self.template_enable:
            override = render_object(override, variables, "/spec/override")
        merged: dict[str, Any] = merge(template, override)
        return merged

    def readiness(self, state: Mapping[str, Any] | None, *, handle: Mapping[str, Any] | None = None,
                  claim: Mapping[str, Any] | None = None, now: datetime) -> Readiness:
        """Whether a created resource is ready.

        With `readinessCheck`, that Jinja2 expression decides (it sees the
        resource's top-level fields, as validation checks see a template).
        Without it: a resource that exists is ready unless it has a `Ready`
        condition that is not `True`.
        """
        if state is None:
            return Readiness(False, "not created yet")
        if self.readiness_check is not None:
            variables = check_variables(state, resource_claim=claim, resource_handle=handle,
                                        resource_provider=self.definition, clock=clock(now))
            try:
                if check_expression(self.readiness_check, variables):
                    return Readiness(True)
                return Readiness(False, "readinessCheck is false")
            except TemplateError as error:
                return Readiness(None, f"readinessCheck could not be evaluated: {error.message}")
        # any kind of resource: no view of its own, its status conditions are all that is read
        ready = find_condition(mapping_at(state, "status"), "Ready")
        if ready is None or ready.true:
            return Readiness(True)
        reason = ready.reason or ready.status
        detail = ready.message
        status = f"Ready is {ready.status} ({reason})"
        return Readiness(False, f"{status}: {detail}" if detail else status)

    def healthy(self, state: Mapping[str, Any] | None, *, handle: Mapping[str, Any] | None = None,
                claim: Mapping[str, Any] | None = None, now: datetime) -> bool | None:
        """`healthCheck` (a Jinja2 expression, the pool/claim tool's) on a created resource: None when there is
        no check, no resource yet, or the expression cannot be evaluated (unknown is not unhealthy)."""
        if self.health_check is None or state is None:
            return None
        variables = check_variables(state, resource_claim=claim, resource_handle=handle,
                                    resource_provider=self.definition, clock=clock(now))
        try:
            return bool(check_expression(self.health_check, variables))
        except TemplateError:
            return None


def provider_from(obj: Mapping[str, Any]) -> Provider:
    """The compiled view of a ResourceProvider object, cached per content.

    `status`, `managedFields` and `resourceVersion` are left out, so a status
    write does not recompile the provider.
    """
    body = {key: value for key, value in obj.items() if key not in ("status", "metadata")}
    body["metadata"] = {key: value for key, value in mapping_at(obj, "metadata").items()
                        if key not in ("managedFields", "resourceVersion")}
    return _compile(json.dumps(body, sort_keys=True, default=str))


def merge(under: Any, over: Any) -> Any:
    """`over` merged onto `under`: objects key by key, anything else (lists too) replaced by `over`.

    A new object is returned; neither argument is changed.
    """
    if isinstance(under, Mapping) and isinstance(over, Mapping):
        merged = copy.deepcopy(dict(under))
        for key, value in over.items():
            merged[key] = merge(under[key], value) if key in under else copy.deepcopy(value)
        return merged
    return copy.deepcopy(over)


def _has_fields_of(value: Any, pattern: Any) -> bool:
    """Whether every field of `pattern` (a provider's `match`) is in `value` (a claim template) with an equal value.

    Objects are compared field by field, recursively, so a template may have
    more fields than `match`; anything else, lists included, must be equal as
    JSON (numbers by value, `true` is not `1`): a list in `match` fits only
    the same list, not a longer one or one whose items have more fields.
    (`handle._contains`, which asks whether a live resource already has what
    was applied, compares lists item by item instead.)
    """
    if isinstance(pattern, Mapping):
        return isinstance(value, Mapping) and all(
            key in value and _has_fields_of(value[key], item) for key, item in pattern.items())
    return json_equal(value, pattern)


def clock(now: datetime) -> Callable[[], datetime]:
    """A clock stuck at `now`, for `timestamp.utcnow` in templates: these modules never read the time."""
    return lambda: now


# ------------------------------------------------------------------ compiling


@lru_cache(maxsize=256)
def _compile(canonical: str) -> Provider:
    obj = json.loads(canonical)
    spec = mapping_at(obj, "spec")
    errors: list[str] = []

    def section(key: str) -> Object:
        value = spec.get(key)
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            errors.append(f"spec.{key}: must be an object")
            return {}
        return dict(value)

    template = spec.get("template") or {}
    template_enable = isinstance(template, Mapping) and template.get("enable") is True
    definition = template.get("definition") if isinstance(template, Mapping) else None
    if definition is not None and not isinstance(definition, Mapping):
        errors.append("spec.template.definition: must be an object")
        definition = None
    errors += template_errors("spec.template.definition", definition)
    parameters, parameter_errors = parse_parameters(spec)
    links, link_errors = parse_links(spec)
    errors += parameter_errors + link_errors
    if not isinstance(spec.get("trustLinkedParameterValues", False), bool):
        errors.append("spec.trustLinkedParameterValues: must be true or false")
    claim_metadata = {}
    for key in ("resourceClaimLabels", "resourceClaimAnnotations"):
        values = spec.get(key) or {}
        if not isinstance(values, Mapping) or not all(isinstance(v, str) for v in values.values()):
            errors.append(f"spec.{key}: must map names to strings")
            values = {}
        bad = [k for k in values if str(k).startswith(DOMAIN)]
        if bad:
            errors.append(f"spec.{key}: lessor.dev/ keys are the operator's ({', '.join(bad)})")
            values = {}
        claim_metadata[key] = dict(values)
    default, override = section("default"), section("override")
    if template_enable:
        errors += template_errors("spec.default", default)
        errors += template_errors("spec.override", override)
    errors += template_errors("spec.vars", section("vars"))  # rendered with or without template.enable
    errors += template_errors("spec.statusSummaryTemplate", section("statusSummaryTemplate"))
    match = spec.get("match")
    if match is not None and not isinstance(match, Mapping):
        errors.append("spec.match: must be an object")
        match = None

    match_ignore = tuple(spec.get("matchIgnore") or ())
    for i, pattern in enumerate(match_ignore):
        errors += regex_errors(f"spec.matchIgnore[{i}]", pattern)

    update_filters = tuple(spec.get("updateFilters") or ())
    for i, update_filter in enumerate(update_filters):
        errors += _filter_errors(f"spec.updateFilters[{i}]", update_filter)

    validation = spec.get("validation") or {}
    schema, problems = schema_errors("spec.validation.openAPIV3Schema", validation.get("openAPIV3Schema"))
    errors += problems
    compiled, check_errors = compiled_checks("spec.validation.checks", validation.get("checks") or ())
    errors += check_errors
    checks = [Check(entry["name"], entry["check"]) for entry in compiled]

    readiness_check, health_check = spec.get("readinessCheck"), spec.get("healthCheck")
    for field, expression in (("readinessCheck", readiness_check), ("healthCheck", health_check)):
        if expression is not None:
            try:
                compile_expression(expression)
            except Exception as error:
                errors.append(f"spec.{field}: {describe(error)}")

    lifespan, lifespan_errors = LifespanConfig.parse(spec.get("lifespan"), "spec.lifespan")
    errors += lifespan_errors

    api_version, kind, fixed = _fixed_kind(override, match, default, _pinned_kind(schema))
    link_only = bool(links or link_errors) and not override and not default and match is None \
        and definition is None
    if not fixed and not link_only:
        errors.append("spec.override: sets no apiVersion and kind (nor do match, default or a schema that "
                      "allows one value of each), so a claim's template would choose what the operator creates; "
                      "set them in override")

    view = ProviderView.of(obj)
    name = view.name
    return Provider(
        name=name,
        definition=obj,
        template_enable=template_enable,
        default=default,
        override=override,
        match=match,
        match_ignore=match_ignore,
        update_filters=update_filters,
        schema=schema,
        checks=tuple(checks),
        lifespan=lifespan,
        resource_requires_claim=spec.get("resourceRequiresClaim") is True,
        resource_name=str(spec.get("resourceName") or name),
        readiness_check=readiness_check,
        health_check=health_check,
        parameters=parameters,
        links=links,
        template_definition=dict(definition) if definition is not None else None,
        claim_labels=claim_metadata["resourceClaimLabels"],
        claim_annotations=claim_metadata["resourceClaimAnnotations"],
        api_version=api_version,
        kind=kind,
        claims_name_resources=_declares_name(schema),
        link_only=link_only,
        trust_linked_values=spec.get("trustLinkedParameterValues") is True,
        errors=tuple(errors),
        view=view,
    )


def _fixed_kind(override: Mapping[str, Any], match: Mapping[str, Any] | None, default: Mapping[str, Any],
                pinned: Mapping[str, Any]) -> tuple[str | None, str | None, bool]:
    """(apiVersion, kind, whether the provider fixes both); values None when a template in override sets them.

    Fixed by `override`, else by `match` or `default` (rendering refuses a template that changes them),
    else by a validation schema that allows a single value of each (`pinned`).
    """
    if "apiVersion" in override and "kind" in override:
        return _static(override["apiVersion"]), _static(override["kind"]), True
    for source in (match or {}, default, pinned):
        if isinstance(source.get("apiVersion"), str) and isinstance(source.get("kind"), str):
            api_version = _static(override.get("apiVersion", source["apiVersion"]))
            kind = _static(override.get("kind", source["kind"]))
            return api_version, kind, True
    return None, None, False


def _pinned_kind(schema: Mapping[str, Any] | None) -> dict[str, str]:
    """{apiVersion, kind} that the validation schema allows one value of each (`enum: [v]` or `const: v`)."""
    properties = (schema or {}).get("properties")
    pinned = {}
    for key in ("apiVersion", "kind"):
        rule = properties.get(key) if isinstance(properties, Mapping) else None
        if not isinstance(rule, Mapping):
            continue
        enum = rule.get("enum")
        values = [rule["const"]] if "const" in rule else enum if isinstance(enum, list) else []
        if len(values) == 1 and isinstance(values[0], str):
            pinned[key] = values[0]
    return pinned


def _declares_name(schema: Mapping[str, Any] | None) -> bool:
    """Whether the validation schema declares `metadata.name`: the provider lets claims name their resources."""
    metadata = mapping_at(mapping_at(schema or {}, "properties"), "metadata")
    return isinstance(mapping_at(metadata, "properties").get("name"), Mapping)


def _static(value: Any) -> str | None:
    if isinstance(value, str) and not any(mark in value for mark in _MARKUP):
        return value
    return None


def _filter_errors(field: str, update_filter: Any) -> list[str]:
    if not isinstance(update_filter, Mapping):
        return [f"{field}: must be an object"]
    if "pathMatch" not in update_filter:
        return [f"{field}.pathMatch: is required"]
    errors = regex_errors(f"{field}.pathMatch", update_filter["pathMatch"])
    ops = update_filter.get("allowedOps")
    if ops is not None:
        unknown = [op for op in ops if op not in ALL_OPS] if isinstance(ops, list) else [ops]
        if unknown:
            errors.append(f"{field}.allowedOps: {unknown} are not among {list(ALL_OPS)}")
    return errors


async def load_providers(actor: Actor, namespace: str) -> dict[str, Provider]:
    """The compiled providers of the operator's namespace, by name, from the topology's cache."""
    objects = await actor.ask(TOPOLOGY, ListObjects(PROVIDER.kind, namespace))
    providers = (provider_from(obj) for obj in objects)
    return {provider.name: provider for provider in providers}
