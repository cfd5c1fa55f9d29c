"""A provider's `spec.parameters`, and the values a claim in provider mode gives them (Poolboy's provider mode).

A claim may name a provider and give only parameter values
(`spec.provider: {name, parameterValues}`); the provider's
`spec.template.definition`, rendered with those values, is then the
claim's resource template (after its linked providers' resources:
`provider_mode.py`). Each parameter may be `required`, have a
default (`default.value`, `default.template`, or its schema's `default`),
an OpenAPI schema and checks (Jinja2 expressions that see every value and
`value`, the parameter's own). Values are data: they are substituted, never
rendered. Once the claim is bound, a value that was applied
(`status.provider.parameterValues`) changes only if `allowUpdate`; a value
equal to the applied one stays valid even if the rules changed since.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from lessor.model.jsonpatch import json_equal
from lessor.model.views.provisioning import ClaimView
from lessor.templates import (
    TemplateError,
    compiled_checks,
    render_object,
    run_checks,
    schema_errors,
    template_errors,
    template_variables,
    validate_schema,
)

from .resource_errors import ResourceError

if TYPE_CHECKING:
    from .provider import Provider

FIELD = "spec.provider.parameterValues"


@dataclass(frozen=True)
class Parameter:
    """One `spec.parameters[]` entry of a provider, read once."""

    index: int
    name: str
    required: bool
    allow_update: bool
    default_value: Any
    default_template: Any
    schema: Mapping[str, Any] | None
    checks: tuple[Mapping[str, str], ...]


def parse_parameters(spec: Mapping[str, Any]) -> tuple[tuple[Parameter, ...], list[str]]:
    """The provider's parameters and the problems in them, each `spec.parameters[i].<field>: message`."""
    entries = spec.get("parameters")
    if entries is None:
        return (), []
    if not isinstance(entries, list):
        return (), ["spec.parameters: must be a list"]
    parameters: list[Parameter] = []
    errors: list[str] = []
    seen: set[str] = set()
    for i, entry in enumerate(entries):
        field = f"spec.parameters[{i}]"
        if not isinstance(entry, Mapping):
            errors.append(f"{field}: must be an object")
            continue
        name = entry.get("name")
        if not isinstance(name, str) or not name:
            errors.append(f"{field}.name: is required")
            continue
        if name in seen:
            errors.append(f"{field}.name: {name} is declared twice")
            continue
        seen.add(name)
        default = entry.get("default") or {}
        validation = entry.get("validation") or {}
        if not isinstance(default, Mapping) or not isinstance(validation, Mapping):
            errors.append(f"{field}: default and validation must be objects")
            continue
        schema, problems = schema_errors(f"{field}.validation.openAPIV3Schema", validation.get("openAPIV3Schema"))
        errors += problems
        checks, check_errors = compiled_checks(f"{field}.validation.checks", validation.get("checks") or ())
        errors += check_errors
        errors += template_errors(f"{field}.default.template", default.get("template"))
        value = default.get("value")
        if value is None and schema is not None:
            value = schema.get("default")
        parameters.append(Parameter(i, name, entry.get("required") is True, entry.get("allowUpdate") is True,
                                    value, default.get("template"), schema, tuple(checks)))
    return tuple(parameters), errors


def applied_values(claim: ClaimView, provider: str) -> Mapping[str, Any] | None:
    """The values last applied for `provider` (`status.provider.parameterValues`), None before any were."""
    applied = claim.applied_provider
    if applied.get("name") != provider:
        return None
    values = applied.get("parameterValues")
    return values if isinstance(values, Mapping) else None


def parameter_values(provider: Provider, claim: Mapping[str, Any], *, now: datetime,
                     linked: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], list[ResourceError]]:
    """Every parameter's value (given, else applied, else its default) and every problem with them.

    `linked`: the values a link gives a linked provider (none applied: only the claim's own are judged against
    what was applied). They are judged by the provider's parameters like a claim's, unless the provider sets
    `trustLinkedParameterValues` (Poolboy's behaviour): then they are used as given, defaults filling the rest."""
    view = ClaimView.of(claim)
    given = linked if linked is not None else view.parameter_values_given or {}
    if not isinstance(given, Mapping):
        return {}, [ResourceError(FIELD, "must be an object", "SchemaViolation", 0)]
    applied = applied_values(view, provider.name) if linked is None else None
    trusted = linked is not None and provider.trust_linked_values
    bound = view.handle_ref is not None
    declared = {parameter.name for parameter in provider.parameters}
    errors = [ResourceError(f"{FIELD}.{name}", f"ResourceProvider {provider.name} has no parameter {name} "
                            f"(it has {', '.join(sorted(declared)) or 'none'})", "SchemaViolation", 0)
              for name in given if name not in declared and not trusted]
    variables = provider.with_vars(template_variables(resource_claim=claim, resource_provider=provider.definition,
                                                      clock=lambda: now))
    values: dict[str, Any] = {}
    for parameter in provider.parameters:
        if parameter.name in given:
            values[parameter.name] = copy.deepcopy(given[parameter.name])
        elif applied is not None and parameter.name in applied:
            values[parameter.name] = copy.deepcopy(applied[parameter.name])
        elif parameter.default_template is not None:
            try:
                values[parameter.name] = render_object(parameter.default_template, {**variables, **values},
                                                       f"/spec/parameters/{parameter.index}/default/template")
            except TemplateError as failure:
                errors.append(ResourceError(f"{FIELD}.{parameter.name}", f"ResourceProvider {provider.name} "
                                            f"could not render its default: {failure}", "ProviderTemplateError", 0))
        elif parameter.default_value is not None:
            values[parameter.name] = copy.deepcopy(parameter.default_value)
        elif parameter.required and not trusted:
            errors.append(ResourceError(f"{FIELD}.{parameter.name}",
                                        f"is required by ResourceProvider {provider.name}", "SchemaViolation", 0))
    if trusted:  # as given, undeclared names too (Poolboy passes every value to the template)
        values.update({name: copy.deepcopy(value) for name, value in given.items() if name not in declared})
        return values, errors
    for parameter in provider.parameters:
        if parameter.name in values:
            errors += _judge(provider, parameter, values, applied, bound, variables)
    return values, errors


def _judge(provider: Provider, parameter: Parameter, values: Mapping[str, Any], applied: Mapping[str, Any] | None,
           bound: bool, variables: Mapping[str, Any]) -> list[ResourceError]:
    field, value = f"{FIELD}.{parameter.name}", values[parameter.name]
    if applied is not None and parameter.name in applied:
        if json_equal(value, applied[parameter.name]):
            return []  # applied already: it stays valid though the rules changed since
        if bound and not parameter.allow_update:
            return [ResourceError(field, f"cannot change once the claim is bound (applied: "
                                  f"{applied[parameter.name]!r}): ResourceProvider {provider.name} does not "
                                  "allowUpdate of this parameter", "UpdateRefused", 0)]
    if parameter.schema is not None:
        violations = validate_schema(value, parameter.schema)
        if violations:
            return [ResourceError(field + v.path.replace("/", "."), v.message, "SchemaViolation", 0)
                    for v in violations]
    if parameter.checks:
        failures = run_checks(parameter.checks, {**variables, **values, "value": value})
        return [ResourceError(field, f"{failure} (ResourceProvider {provider.name})", "CheckFailed", 0)
                for failure in failures]
    return []
