"""What lessor would make of converted objects, asked of lessor's own code, never of a copy of its rules.

`lessor convert` reports a problem only where lessor itself finds one, so the report stays true as
lessor changes (a template function added to the sandbox, a refusal lifted):

- templates: each function, filter or test lessor's templates lack, with its line, wherever Poolboy
  renders a template or evaluates a check (`lessor.templates.missing_names`, which reads the
  sandbox's own environment);
- providers: the rule the webhook and the operator's `Valid` condition apply (`provider_errors`);
- claims and pools whose providers are all in the input: resolved as the claim and pool actors
  resolve them (`resolve_claim`, `resolve_pool`): linked values a provider refuses, schemas, checks;
- a provider that links others and that no claim of the input uses: its links, with its parameters'
  defaults (`parameter_values`, `expand`).

Jinja2 and the operator's provisioning code are imported only when the input has templates or
providers, so converting Jumpstarter objects stays cheap (docs/cli.md, Start-up cost).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.views import Meta, View
from lessor.templates import strings_in

#: (field as the manifest spells it, what is wrong)
Found = tuple[str, str]

#: Poolboy's template globals (its own and Jinja2's defaults): missing wherever read, if lessor lacks them.
POOLBOY_GLOBALS = frozenset({"now", "datetime", "timezone", "lipsum", "cycler", "joiner"})
#: What to write in lessor instead of a Poolboy name it lacks (Poolboy's own functions it has: templates/poolboy.py).
#: Whether lessor lacks a name is asked of lessor.templates, never of this list.
HINTS = {
    "lipsum": "no placeholder text generator",
    "cycler": "use loop.cycle(...) inside a for loop",
    "joiner": "use loop.first or | join",
}
_MARKUP = ("{{", "{%", "{#")
#: Errors that need the claim as the API server makes it (its uid...): the webhook only warns of them too.
_NOT_JUDGED = frozenset({"ProviderTemplateError"})


# ------------------------------------------------------------------------------- templates


def template_problems(kind: str, spec: Mapping[str, Any]) -> list[Found]:
    """Each use of a function, filter or test lessor's templates lack in a Poolboy object's spec, with its line."""
    from lessor.model.jsonpatch import field_path  # RE2 with it: only for Poolboy's kinds

    templates, expressions = _template_places(kind, spec)
    defined = set(_mapping(spec.get("vars"))) | {str(p.get("name")) for p in _list(spec.get("parameters"))
                                                 if isinstance(p, Mapping)}
    found: list[Found] = []
    for field, value, expression in [(f, v, False) for f, v in templates] + [(f, v, True) for f, v in expressions]:
        for pointer, source in strings_in(value):
            if expression or any(mark in source for mark in _MARKUP):
                found += _missing(field_path(field, pointer), source, expression, POOLBOY_GLOBALS - defined)
    return found


def _missing(field: str, source: str, expression: bool, also: Iterable[str]) -> list[Found]:
    from lessor.templates import missing_names
    from lessor.templates.errors import describe

    try:
        missing = missing_names(source, expression=expression, also=also)
    except Exception as error:  # whatever Jinja2 raises while parsing is the template's error
        return [(field, f"lessor's templates cannot parse it: {describe(error)}")]
    return [(field, f"{m}" + (f": {HINTS[m.name]}" if m.name in HINTS else "")) for m in missing]


def _template_places(kind: str, spec: Mapping[str, Any]) -> tuple[list[tuple[str, Any]], list[tuple[str, Any]]]:
    """(templates, expressions) of a Poolboy object, by field: where Poolboy renders or evaluates them."""
    templates: list[tuple[str, Any]] = []
    expressions: list[tuple[str, Any]] = []
    if kind in ("ResourceProvider", "ResourcePool", "ResourceHandle"):
        templates.append(("spec.vars", spec.get("vars")))  # a var's strings are templates wherever it is read
    if kind == "ResourceClaim":
        for key in ("autoDelete", "autoDetach"):
            expressions.append((f"spec.{key}.when", _mapping(spec.get(key)).get("when")))
    if kind != "ResourceProvider":
        return templates, [(f, v) for f, v in expressions if isinstance(v, str)]
    template = _mapping(spec.get("template"))
    if template.get("enable") is True:
        templates += [("spec.default", spec.get("default")), ("spec.override", spec.get("override"))]
    templates += [("spec.template.definition", template.get("definition")),
                  ("spec.statusSummaryTemplate", spec.get("statusSummaryTemplate"))]
    for i, link in enumerate(_list(spec.get("linkedResourceProviders"))):
        link = _mapping(link)
        templates.append((f"spec.linkedResourceProviders[{i}].parameterValues", link.get("parameterValues")))
        expressions += [(f"spec.linkedResourceProviders[{i}].{key}", link.get(key)) for key in ("when", "waitFor")]
    for i, parameter in enumerate(_list(spec.get("parameters"))):
        parameter = _mapping(parameter)
        templates.append((f"spec.parameters[{i}].default.template", _mapping(parameter.get("default")).get("template")))
        expressions += _checks(f"spec.parameters[{i}].validation.checks", parameter.get("validation"))
    expressions += _checks("spec.validation.checks", spec.get("validation"))
    expressions += [(f"spec.{key}", spec.get(key)) for key in ("readinessCheck", "healthCheck")]
    return templates, [(f, v) for f, v in expressions if isinstance(v, str)]


def _checks(field: str, validation: Any) -> list[tuple[str, Any]]:
    return [(f"{field}[{j}].check", _mapping(check).get("check"))
            for j, check in enumerate(_list(_mapping(validation).get("checks")))]


# ------------------------------------------------------------------------------- lessor's rules


def judged(objects: Sequence[Mapping[str, Any]], *, api: str,
           now: dt.datetime | None = None) -> dict[int, list[Found]]:
    """What lessor refuses in each converted object (by index in `objects`), by lessor's own rules."""
    found: dict[int, list[Found]] = {}
    ours = [(i, obj) for i, obj in enumerate(objects) if obj.get("apiVersion") == api]
    if not any(obj.get("kind") == "ResourceProvider" for _, obj in ours):
        return found
    from lessor.actors.provisioning.provider import provider_from

    now = now or dt.datetime.now(dt.UTC).replace(microsecond=0)
    providers: dict[str, Any] = {}
    for i, obj in ours:
        if obj.get("kind") == "ResourceProvider":
            try:
                providers[Meta.of(obj).name] = provider_from(obj)
            except Exception as error:  # a shape lessor's CRD would refuse
                found.setdefault(i, []).append(_unreadable(error))
    used: set[str] = set()
    for i, obj in ours:
        try:
            found[i] = found.get(i, []) + _judged_one(obj, providers, used, now)
        except Exception as error:  # a shape lessor's CRD would refuse
            found.setdefault(i, []).append(_unreadable(error))
    for i, obj in ours:
        name = Meta.of(obj).name
        if obj.get("kind") == "ResourceProvider" and name not in used and name in providers and providers[name].links:
            try:
                found.setdefault(i, []).extend(_links_with_defaults(providers[name], providers, now))
            except Exception as error:
                found.setdefault(i, []).append(_unreadable(error))
    return {i: problems for i, problems in found.items() if problems}


def _unreadable(error: Exception) -> Found:
    return "(object)", f"lessor's rules cannot read it ({type(error).__name__}: {error}): check it against lessor's CRD"


def _judged_one(obj: Mapping[str, Any], providers: Mapping[str, Any], used: set[str], now: dt.datetime) -> list[Found]:
    """What lessor's rules refuse in one object; adds the providers a claim or pool uses to `used`."""
    from lessor.actors.provisioning.claim_spec import resolve_claim, resolve_pool
    from lessor.actors.provisioning.validity import KIND_NOT_FIXED, provider_errors

    found: list[Found] = []
    kind, spec = obj.get("kind"), View.of(obj).spec
    if kind == "ResourceProvider":
        link_only = bool(spec.get("linkedResourceProviders")) and "definition" not in _mapping(spec.get("template"))
        for refused in provider_errors(obj):
            what = "a provider that only links others and creates nothing itself: " \
                if link_only and refused.reason == KIND_NOT_FIXED else ""
            found.append((refused.field, f"{what}lessor refuses this provider ({refused.reason}): "
                                         f"{refused.message}"))
    elif kind in ("ResourceClaim", "ResourcePool"):
        needed = _providers_needed(spec, providers)
        used |= needed or set()
        if not needed or not needed <= set(providers):
            return found  # a provider that is not in the input, or one chosen by match: nothing to judge against
        claim = _as_created(obj, now)
        resolved = resolve_claim(claim, providers, now=now) if kind == "ResourceClaim" else \
            resolve_pool(claim, providers, now=now)
        for error in resolved.all_errors:
            if error.reason not in _NOT_JUDGED:
                found.append((error.field, f"lessor refuses this {kind} ({error.reason}): {error.message}"))
    return found


def _links_with_defaults(provider: Any, providers: Mapping[str, Any], now: dt.datetime) -> list[Found]:
    """The values its links give, with the provider's parameter defaults, that their providers refuse."""
    from lessor.actors.provisioning.parameters import FIELD, parameter_values
    from lessor.actors.provisioning.provider_mode import expand

    if not provider.valid or not _links_known(provider, providers, set()):
        return []
    claim = _as_created({"apiVersion": "", "kind": "ResourceClaim", "metadata": {"name": "example", "namespace": "x"},
                         "spec": {"provider": {"name": provider.name, "parameterValues": {}}}}, now)
    values, errors = parameter_values(provider, claim, now=now)
    if errors:
        return []  # a required parameter without a default: only a claim's values can tell
    _, errors = expand(provider, values, claim, providers, now=now)
    return [("spec.linkedResourceProviders", f"with the parameters' defaults, {error.message}")
            for error in errors if error.field.startswith(FIELD)]


def _providers_needed(spec: Mapping[str, Any], providers: Mapping[str, Any]) -> set[str] | None:
    """The providers a claim or pool uses, with those they link (None: one is chosen by `match`)."""
    names: set[str] = set()
    entries = [spec["provider"]] if isinstance(spec.get("provider"), Mapping) else \
        [_mapping(entry).get("provider") for entry in _list(spec.get("resources"))]
    for entry in entries:
        name = _mapping(entry).get("name")
        if not isinstance(name, str):
            return None
        names.add(name)
    for name in list(names):
        if name in providers:
            _links_known(providers[name], providers, names)
    return names


def _links_known(provider: Any, providers: Mapping[str, Any], seen: set[str]) -> bool:
    """Whether every provider `provider` links (recursively) is in `providers`; adds their names to `seen`."""
    known = True
    for link in provider.links:
        if link.name in seen:
            continue
        seen.add(link.name)
        known = link.name in providers and _links_known(providers[link.name], providers, seen) and known
    return known


def _as_created(obj: Mapping[str, Any], now: dt.datetime) -> dict[str, Any]:
    """The object with what the API server adds on creation, which templates may read."""
    metadata = {"uid": "00000000-0000-0000-0000-000000000000", "creationTimestamp": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "generation": 1, **mapping_at(obj, "metadata")}
    return {**obj, "metadata": metadata}


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []
