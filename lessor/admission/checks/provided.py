"""Resource templates judged by their ResourceProvider, as pools and claims both have them.

A resource entry names its provider, or leaves the choice to the providers'
``match``. Its template is judged the way the operator will use it: the
provider's ``default`` merged under it (rendered first when the provider
is templated), then the provider's schema and checks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lessor.admission import Cause, CheckResult, Lookup
from lessor.admission.checks.fields import field_path, spec
from lessor.gateway.resources import PROVIDER
from lessor.templates import (
    InvalidSchemaError,
    TemplateError,
    check_variables,
    render_object,
    run_checks,
    template_variables,
    validate_schema,
)


@dataclass(frozen=True)
class Entry:
    """One ``spec.resources[i]`` and the provider it resolved to (None: there is none)."""

    index: int
    template: Mapping[str, Any]
    provider: Mapping[str, Any] | None
    named: bool
    """Whether the entry names its provider, rather than leaving it to ``match``."""
    problem: str = ""
    """Why there is no provider, or what is doubtful about the one chosen."""

    @property
    def field(self) -> str:
        return f"spec.resources[{self.index}]"

    @property
    def provider_name(self) -> str:
        return self.provider["metadata"]["name"] if self.provider else ""


async def fetch_providers(obj: Mapping[str, Any], lookup: Lookup, namespace: str) -> list[Mapping[str, Any]]:
    """The providers that ``obj``'s resource entries may use.

    Named ones are read by name, which sees a provider created a moment
    ago; only an entry left to ``match`` needs the list of all of them.
    """
    resources = [r for r in spec(obj).get("resources") or () if isinstance(r, Mapping)]
    names = {(r.get("provider") or {}).get("name") for r in resources}
    if None in names or "" in names:
        return list(await lookup.list(PROVIDER.group, PROVIDER.kind, namespace))
    found = await asyncio.gather(*(lookup.get(PROVIDER.group, PROVIDER.kind, namespace, n) for n in sorted(names)))
    return [provider for provider in found if provider is not None]


def entries(obj: Mapping[str, Any], providers: Sequence[Mapping[str, Any]], namespace: str) -> list[Entry]:
    """Each resource entry of ``obj`` with its provider, from ``providers`` (the operator's namespace's)."""
    by_name = {p["metadata"]["name"]: p for p in providers}
    resolved = []
    for index, resource in enumerate(spec(obj).get("resources") or ()):
        if not isinstance(resource, Mapping):
            continue
        template = resource.get("template") or {}
        if name := (resource.get("provider") or {}).get("name"):
            provider = by_name.get(name)
            problem = "" if provider else f"there is no ResourceProvider {name} in namespace {namespace}"
            resolved.append(Entry(index, template, provider, True, problem))
            continue
        matching = sorted((p for p in providers if spec(p).get("match") and _matches(spec(p)["match"], template)),
                          key=lambda p: p["metadata"]["name"])
        if not matching:
            problem = f"no ResourceProvider in namespace {namespace} matches the template; name one in provider.name"
            resolved.append(Entry(index, template, None, False, problem))
        elif len(matching) > 1:
            names = ", ".join(p["metadata"]["name"] for p in matching)
            problem = f"the template matches ResourceProviders {names}; judged by the first, name one in provider.name"
            resolved.append(Entry(index, template, matching[0], False, problem))
        else:
            resolved.append(Entry(index, template, matching[0], False))
    return resolved


def _matches(pattern: Any, value: Any) -> bool:
    """Every field of the partial resource ``pattern`` is in ``value`` with the same value."""
    if not isinstance(pattern, Mapping) or not isinstance(value, Mapping):
        return bool(pattern == value)
    return all(key in value and _matches(item, value[key]) for key, item in pattern.items())


def defaulted(entry: Entry, claim: Mapping[str, Any] | None) -> Mapping[str, Any]:
    """The template with the provider's ``default`` merged under it; raises TemplateError.

    ``claim`` is the claim being admitted, None for a pool's template.
    """
    assert entry.provider is not None
    provider_spec = spec(entry.provider)
    default = provider_spec.get("default") or {}
    if (provider_spec.get("template") or {}).get("enable"):
        variables = template_variables(resource_claim=claim, resource_index=entry.index,
                                       resource_provider=entry.provider)
        default = render_object(default, variables, "/spec/default")
    return _merged(default, entry.template)


def _merged(under: Any, over: Any) -> Any:
    if isinstance(under, Mapping) and isinstance(over, Mapping):
        return {**under, **{key: _merged(under.get(key), value) for key, value in over.items()}}
    return over


async def providers_result(resolved: Sequence[Entry]) -> CheckResult:
    causes = [
        Cause(e.problem, f"{e.field}.provider.name" if e.named else f"{e.field}.provider")
        for e in resolved
        if e.provider is None
    ]
    warnings = tuple(f"{e.field}: {e.problem}" for e in resolved if e.provider is not None and e.problem)
    return CheckResult.deny(*causes, warnings=warnings) if causes else CheckResult.ok(*warnings)


async def templates_result(resolved: Sequence[Entry], claim: Mapping[str, Any] | None) -> CheckResult:
    """Every violation of every provider's schema, each at its field.

    A provider whose schema is itself broken makes this an internal error:
    the provider must be fixed, and until then the user may skip the check.
    """
    causes: list[Cause] = []
    warnings: list[str] = []
    for entry in resolved:
        schema = (spec(entry.provider).get("validation") or {}).get("openAPIV3Schema")
        if not isinstance(schema, Mapping):
            continue  # no provider (claim-providers says so), or nothing to validate against
        try:
            violations = validate_schema(defaulted(entry, claim), schema)
        except TemplateError as err:
            warnings.append(_not_rendered(entry, err))
            continue
        except InvalidSchemaError as err:
            return CheckResult.error(Cause(f"ResourceProvider {entry.provider_name}: {err}", f"{entry.field}.provider"))
        causes += [Cause(v.message, field_path(f"{entry.field}.template", v.path)) for v in violations]
    return CheckResult.deny(*causes, warnings=tuple(warnings)) if causes else CheckResult.ok(*warnings)


async def checks_result(resolved: Sequence[Entry], claim: Mapping[str, Any] | None) -> CheckResult:
    """The providers' ``validation.checks`` that fail, each named."""
    causes: list[Cause] = []
    warnings: list[str] = []
    for entry in resolved:
        checks = (spec(entry.provider).get("validation") or {}).get("checks")
        if not checks:
            continue
        try:
            template = defaulted(entry, claim)
        except TemplateError as err:
            warnings.append(_not_rendered(entry, err))
            continue
        variables = check_variables(template, resource_claim=claim, resource_index=entry.index,
                                    resource_provider=entry.provider)
        causes += [
            Cause(f"{failure} (ResourceProvider {entry.provider_name})", f"{entry.field}.template")
            for failure in run_checks(checks, variables)
        ]
    return CheckResult.deny(*causes, warnings=tuple(warnings)) if causes else CheckResult.ok(*warnings)


def _not_rendered(entry: Entry, error: TemplateError) -> str:
    """A default that cannot be rendered at admission is the provider's to fix, not the user's."""
    return (f"{entry.field}.template not validated: the default of ResourceProvider {entry.provider_name} "
            f"could not be rendered ({error})")
