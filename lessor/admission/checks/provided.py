"""Resource templates judged by their ResourceProvider, as pools and claims both have them: the operator's rules.

A claim's resources are resolved by the claim actor's own function
(`lessor.actors.claim_spec.resolve_claim`: provider matching, the claim-only
restrictions, the provider's ``default``, schema and checks), a pool's by
`resolve_pool` (named providers, schema only). The checks only sort its
errors under their names, so the webhook refuses exactly what the operator
would mark ``Valid`` False, at the same fields.

Two things are the webhook's own: a provider name no object can have is
never looked up (and is named so), and a ``default`` that cannot be
rendered at admission (it uses a variable set only later, such as the
claim's uid) is a warning: the template is then not validated here.
"""

from __future__ import annotations

import asyncio
import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lessor.actors.provisioning.claim_spec import ClaimSpec, ResourceError, resolve_claim, resolve_pool
from lessor.actors.provisioning.provider import Provider, provider_from
from lessor.actors.provisioning.throttle import Throttle
from lessor.admission.checker import Lookup
from lessor.admission.results import Cause, CheckResult
from lessor.admission.checks.fields import name_problem, operator_field, spec
from lessor.model.views.meta import Meta
from lessor.gateway.resources import PROVIDER
from lessor.templates import offload

_PROVIDERS = ("NoResources", "ProviderNotFound", "ProviderAmbiguous", "ProviderInvalid", "ProviderThrottled")
# UpdateRefused from resolving is a provider-mode parameter that may not change once bound (parameters.py).
_TEMPLATES = ("Forbidden", "InvalidTemplate", "SchemaViolation", "UpdateRefused")
_CHECKS = ("CheckFailed",)
_NOT_RENDERED = "ProviderTemplateError"
_MANY = 20
"""More distinct provider names than this are judged against the list of all providers."""
# InvalidLifespan is claim-lifespan's (claims.py), UpdateRefused of templates claim-update-filters'.


@dataclass(frozen=True)
class Resolution:
    """A claim's or pool's resources as the operator resolves them, its errors sorted by check."""

    spec: ClaimSpec
    providers: tuple[Cause, ...] = ()
    templates: tuple[Cause, ...] = ()
    checks: tuple[Cause, ...] = ()
    not_rendered: tuple[str, ...] = ()

    @property
    def resolved_providers(self) -> list[Provider]:
        """The provider of each resource that has exactly one."""
        return [resource.provider for resource in self.spec.resources if resource.provider is not None]


async def resolve_resources(obj: Mapping[str, Any], lookup: Lookup, namespace: str, *,
                            claim: bool, throttle: Throttle | None = None) -> tuple[Resolution, list[Mapping[str, Any]]]:
    """``obj``'s resources resolved against the providers they may use, and those providers.

    An entry left to ``match`` is judged against the list of every provider, which a cache may
    give one event late: a provider created a moment ago would be missing (or one deleted, still
    there). Such a denial is confirmed against the API server's current list before it is given.
    """
    providers = await fetch_providers(obj, lookup, namespace)
    resolution = await resolve(obj, providers, namespace, claim=claim, throttle=throttle)
    matched = {i for i, r in enumerate(_resources(obj)) if _named(r) is None}
    if any(error.index in matched and error.reason in ("ProviderNotFound", "ProviderAmbiguous")
           for error in resolution.spec.all_errors):
        providers = await fetch_providers(obj, lookup, namespace, consistent=True)
        resolution = await resolve(obj, providers, namespace, claim=claim, throttle=throttle)
    return resolution, providers


async def fetch_providers(obj: Mapping[str, Any], lookup: Lookup, namespace: str, *,
                          consistent: bool = False) -> list[Mapping[str, Any]]:
    """The providers that ``obj``'s resource entries may use.

    Named ones are looked up by name; only an entry left to ``match`` needs
    the list of all of them (``consistent``: as etcd has it now). A name no
    object can have is not looked up.
    """
    names = {_named(r) for r in _resources(obj)}
    wanted = sorted(n for n in names if isinstance(n, str) and not name_problem(n))
    # A claim in provider mode may need its provider's linked providers too, and theirs: all of them (the cache).
    if None in names or isinstance(spec(obj).get("provider"), Mapping):
        return list(await lookup.list(PROVIDER.group, PROVIDER.kind, namespace, consistent=consistent))
    if len(wanted) <= _MANY:
        return await _get_each(lookup, namespace, wanted)
    # Many names (a pool of thousands of entries naming as many providers): one list, not a read per name.
    # A name it lacks is confirmed as a single name is (a get), or, when many are, by one current list.
    listed = {Meta.of(p).name: p
              for p in await lookup.list(PROVIDER.group, PROVIDER.kind, namespace, consistent=consistent)}
    missing = [n for n in wanted if n not in listed]
    if len(missing) > _MANY and not consistent:
        listed = {Meta.of(p).name: p
                  for p in await lookup.list(PROVIDER.group, PROVIDER.kind, namespace, consistent=True)}
    elif missing:
        listed.update({Meta.of(p).name: p for p in await _get_each(lookup, namespace, missing)})
    return [listed[n] for n in wanted if n in listed]


async def _get_each(lookup: Lookup, namespace: str, names: Sequence[str]) -> list[Mapping[str, Any]]:
    found = await asyncio.gather(*(lookup.get(PROVIDER.group, PROVIDER.kind, namespace, n) for n in names))
    return [provider for provider in found if provider is not None]


def _resources(obj: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    resources = spec(obj).get("resources")
    return [r for r in resources if isinstance(r, Mapping)] if isinstance(resources, list) else []


def _named(resource: Mapping[str, Any]) -> Any:
    """The provider name the entry gives (of any type); None when it leaves the choice to ``match``."""
    provider = resource.get("provider")
    name = provider.get("name") if isinstance(provider, Mapping) else provider
    return None if name is None or name == "" else name


async def resolve(obj: Mapping[str, Any], providers: Sequence[Mapping[str, Any]], namespace: str, *,
                  claim: bool, throttle: Throttle | None = None) -> Resolution:
    """Resolve ``obj`` (a claim, or a pool when not ``claim``) with the operator's function, in a render thread
    under the template budget as the operator does: the event loop serving reviews only awaits. The thread
    is one of the tenant's turns in the render queue (a pool's: the operator namespace's), and does all that
    grows with the object: compiling its providers, resolving, sorting thousands of errors."""
    tenant = Meta.of(obj).namespace or namespace
    return await offload(_resolve, obj, providers, namespace, claim, dt.datetime.now(dt.UTC), throttle, key=tenant)


def _resolve(obj: Mapping[str, Any], providers: Sequence[Mapping[str, Any]], namespace: str, claim: bool,
             now: dt.datetime, throttle: Throttle | None) -> Resolution:
    by_name = {provider.name: provider for provider in map(provider_from, providers)}
    resolved = (resolve_claim if claim else resolve_pool)(obj, by_name, now=now, throttle=throttle)
    resources = spec(obj).get("resources")
    return _sorted(resolved, resources if isinstance(resources, list) else [], namespace)


def _sorted(resolved: ClaimSpec, resources: Sequence[Any], namespace: str) -> Resolution:
    found: dict[str, list[Cause]] = {"providers": [], "templates": [], "checks": []}
    not_rendered: list[str] = []
    for error in resolved.all_errors:
        if error.reason == _NOT_RENDERED:
            field = f"spec.resources[{error.index}].template"
            not_rendered.append(f"{field} not validated: {error.message} (a default that cannot be rendered at "
                                "admission is the provider's to fix, not the claim's)")
        elif error.reason in _PROVIDERS:
            found["providers"].append(_provider_cause(error, resources, namespace))
        elif error.reason in _TEMPLATES:
            found["templates"].append(Cause(error.message, operator_field(error.field)))
        elif error.reason in _CHECKS:
            provider = resolved.resources[error.index].provider if error.index is not None else None
            suffix = f" (ResourceProvider {provider.name})" if provider is not None else ""
            found["checks"].append(Cause(error.message + suffix, operator_field(error.field)))
    return Resolution(resolved, tuple(found["providers"]), tuple(found["templates"]), tuple(found["checks"]),
                      tuple(not_rendered))


def _provider_cause(error: ResourceError, resources: Sequence[Any], namespace: str) -> Cause:
    """The operator's error; a name no object can have, or one missing, says which namespace was looked in."""
    if error.reason == "ProviderNotFound" and error.index is not None and error.index < len(resources) \
            and isinstance(resources[error.index], Mapping):
        name = _named(resources[error.index])
        if isinstance(name, str) and (problem := name_problem(name)):
            return Cause(f"no ResourceProvider can be named so: {problem}", error.field)
        if isinstance(name, str):
            return Cause(f"there is no ResourceProvider {name} in namespace {namespace}", error.field)
    return Cause(error.message, operator_field(error.field))


async def providers_result(resolution: Resolution) -> CheckResult:
    """A provider named that does not exist (or is invalid), or a ``match`` that fits none or several."""
    return _result(resolution.providers)


async def templates_result(resolution: Resolution) -> CheckResult:
    """Every schema violation, and for claims what a claim's template may not say, each at its field."""
    return _result(resolution.templates, resolution.not_rendered)


async def checks_result(resolution: Resolution) -> CheckResult:
    """The providers' ``validation.checks`` that fail, each named."""
    return _result(resolution.checks, resolution.not_rendered)


def _result(causes: Sequence[Cause], warnings: Sequence[str] = ()) -> CheckResult:
    return CheckResult.deny(*causes, warnings=tuple(warnings)) if causes else CheckResult.ok(*warnings)
