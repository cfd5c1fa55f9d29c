"""A claim in provider mode, expanded into its resources: linked providers' first, then the provider's own.

`spec.provider: {name, parameterValues}` names one provider; its
`linkedResourceProviders` (`actors/provisioning/linked.py`) bring their resources along,
each rendered from its own `template.definition` with the values the link
gives it (templates over the claim's values), recursively. The provider's
own resource comes last, rendered from its definition (or empty, when it
only links others and its `override` makes the resource). Errors are told at
the fields the claim has (`spec.provider.*`), since the templates are the
providers'. A link-only provider (`Provider.link_only`) adds no resource
of its own: the claim gets its linked providers' resources only.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from lessor.templates import TemplateError, check_expression, render_object, template_variables

from .linked import MAX_DEPTH
from .parameters import FIELD, parameter_values
from .provider import Object, Provider
from .resource_errors import ResourceError


@dataclass(frozen=True)
class Expanded:
    """One resource of a claim in provider mode: its entry name, provider and template (defaults applied)."""

    name: str
    provider: Provider
    template: Object


def expand(provider: Provider, values: Mapping[str, Any], claim: Mapping[str, Any],
           providers: Mapping[str, Provider], *, now: datetime) -> tuple[list[Expanded], list[ResourceError]]:
    """The claim's resources, or every reason they cannot be made."""
    return _expand(provider, values, claim, providers, provider.resource_name, (provider.name,), now)


def _expand(provider: Provider, values: Mapping[str, Any], claim: Mapping[str, Any],
            providers: Mapping[str, Provider], name: str, chain: tuple[str, ...],
            now: datetime) -> tuple[list[Expanded], list[ResourceError]]:
    found: list[Expanded] = []
    errors: list[ResourceError] = []
    variables = {**provider.with_vars(template_variables(resource_claim=claim, resource_provider=provider.definition,
                                                         clock=lambda: now)), **values}
    for i, link in enumerate(provider.links):
        where = f"ResourceProvider {provider.name}'s link to {link.name} (spec.linkedResourceProviders[{i}])"
        try:
            if link.when is not None and not check_expression(link.when, variables):
                continue
            given = render_object(link.parameter_values, variables, f"/spec/linkedResourceProviders/{i}/parameterValues")
        except TemplateError as error:
            errors.append(ResourceError("spec.provider.name", f"{where}: {error}", "ProviderTemplateError", 0))
            continue
        linked = providers.get(link.name)
        if linked is None or not linked.valid:
            why = "which does not exist" if linked is None else "which is invalid: " + "; ".join(linked.errors)
            errors.append(ResourceError("spec.provider.name", f"{where}: {why}", "ProviderInvalid", 0))
            continue
        if link.name in chain or len(chain) >= MAX_DEPTH:
            why = "the links form a cycle" if link.name in chain else f"links go deeper than {MAX_DEPTH}"
            errors.append(ResourceError("spec.provider.name", f"{where}: {why} ({' -> '.join(chain)})",
                                        "ProviderInvalid", 0))
            continue
        linked_values, problems = parameter_values(linked, claim, now=now, linked=given if isinstance(given, Mapping)
                                                   else {})
        if problems:
            errors += [ResourceError(FIELD, f"{where} gives linked resource {link.resource_name} values that "
                                     f"ResourceProvider {link.name} refuses: {problem} (its "
                                     "spec.trustLinkedParameterValues: true would use them as given, as Poolboy "
                                     "does)", problem.reason, 0)
                       for problem in problems]
            continue
        more, problems = _expand(linked, linked_values, claim, providers, link.resource_name, (*chain, link.name), now)
        found += more
        errors += problems
    if not provider.link_only and (provider.template_definition is not None or provider.links):
        try:
            template = render_definition(provider, claim, values, now=now) \
                if provider.template_definition is not None else {}
            found.append(Expanded(name, provider, provider.apply_defaults(template, claim=claim, index=0, now=now)))
        except TemplateError as failure:
            errors.append(ResourceError("spec.provider.name", f"ResourceProvider {provider.name} could not render "
                                        f"{failure}", "ProviderTemplateError", 0))
    return found, errors


def render_definition(provider: Provider, claim: Mapping[str, Any], values: Mapping[str, Any], *,
                      now: datetime) -> dict[str, Any]:
    """`spec.template.definition` rendered with the parameter values (which win over vars); raises TemplateError."""
    variables = provider.with_vars(template_variables(resource_claim=claim, resource_index=0,
                                                      resource_provider=provider.definition, clock=lambda: now))
    rendered = render_object(provider.template_definition, {**variables, **values}, "/spec/template/definition")
    return dict(rendered) if isinstance(rendered, Mapping) else {}


_TEMPLATE_FIELD = re.compile(r"spec\.resources\[(\d+)\]\.template")


def in_provider_terms(errors: Sequence[ResourceError], providers: Sequence[str],
                      names: Sequence[str]) -> list[ResourceError]:
    """Errors found in rendered templates (`spec.resources[i].template/...`), told at the field the claim has:
    its parameter values, naming the resource and its provider."""
    told = []
    for error in errors:
        match = _TEMPLATE_FIELD.match(error.field)
        index = int(match.group(1)) if match else -1
        if not 0 <= index < len(providers):
            told.append(error)
            continue
        where = error.field[match.end():] if match else ""
        told.append(ResourceError(FIELD, f"resource {names[index]} (ResourceProvider {providers[index]}'s "
                                  f"template.definition rendered with them): {where or '/'}: {error.message}",
                                  error.reason, index))
    return told
