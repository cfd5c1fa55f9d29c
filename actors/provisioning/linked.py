"""A provider's `spec.linkedResourceProviders`: the resources it brings along, in provider mode (Poolboy's).

A claim in provider mode gets, before the provider's own resource, one
resource for each linked provider (recursively, at most `MAX_DEPTH` deep,
never in a cycle), named by the link's `resourceName`. The link's
`parameterValues` are templates over the claim's values; `when`, an
expression over them, leaves the link out when false. At the handle, a
resource whose provider links another waits (`waitingFor: Linked
ResourceProvider`) until the linked resource exists and the link's `waitFor`
holds on it, and its templates see the link's `templateVars`: values read
from the linked resource's live state by JSON pointer.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from lessor.model.jsonpatch import JsonPatchError, parse_pointer, resolve_pointer
from lessor.templates import TemplateError, check_expression, template_errors
from lessor.templates.errors import describe
from lessor.templates.sandbox import compile_expression

MAX_DEPTH = 5
WAITING_FOR_LINKED = "Linked ResourceProvider"


@dataclass(frozen=True)
class TemplateVar:
    name: str
    pointer: str


@dataclass(frozen=True)
class Link:
    """One `spec.linkedResourceProviders[]` entry."""

    name: str
    resource_name: str
    parameter_values: Mapping[str, Any]
    wait_for: str | None
    when: str | None
    template_vars: tuple[TemplateVar, ...]


def parse_links(spec: Mapping[str, Any]) -> tuple[tuple[Link, ...], list[str]]:
    """The provider's links and the problems in them, each `spec.linkedResourceProviders[i].<field>: message`."""
    entries = spec.get("linkedResourceProviders")
    if entries is None:
        return (), []
    if not isinstance(entries, list):
        return (), ["spec.linkedResourceProviders: must be a list"]
    links, errors = [], []
    for i, entry in enumerate(entries):
        field = f"spec.linkedResourceProviders[{i}]"
        if not isinstance(entry, Mapping) or not isinstance(entry.get("name"), str) or not entry["name"]:
            errors.append(f"{field}.name: is required")
            continue
        values = entry.get("parameterValues") or {}
        if not isinstance(values, Mapping):
            errors.append(f"{field}.parameterValues: must be an object")
            continue
        problems = template_errors(f"{field}.parameterValues", values)
        for key in ("waitFor", "when"):
            expression = entry.get(key)
            if expression is None:
                continue
            try:
                compile_expression(str(expression))
            except Exception as error:  # whatever Jinja2 raises while parsing is the expression's error
                problems.append(f"{field}.{key}: {describe(error)}")
        template_vars = []
        for j, item in enumerate(entry.get("templateVars") or ()):
            name = item.get("name") if isinstance(item, Mapping) else None
            pointer = item.get("from") if isinstance(item, Mapping) else None
            if not isinstance(name, str) or not name.isidentifier():
                problems.append(f"{field}.templateVars[{j}].name: must be a template variable name")
            elif not isinstance(pointer, str) or not _pointer(pointer):
                problems.append(f"{field}.templateVars[{j}].from: must be a JSON pointer (/status/url)")
            else:
                template_vars.append(TemplateVar(name, pointer))
        errors += problems
        if not problems:
            links.append(Link(entry["name"], str(entry.get("resourceName") or entry["name"]), dict(values),
                              entry.get("waitFor"), entry.get("when"), tuple(template_vars)))
    return tuple(links), errors


def _pointer(text: str) -> bool:
    try:
        parse_pointer(text)
    except JsonPatchError:
        return False
    return True


def linked_index(link: Link, entries: Sequence[Mapping[str, Any]]) -> int | None:
    """The handle resource a link names: its provider and its name."""
    for index, entry in enumerate(entries):
        if (entry.get("provider") or {}).get("name") == link.name and entry.get("name") == link.resource_name:
            return index
    return None


def linked_variables(links: Sequence[Link], entries: Sequence[Mapping[str, Any]],
                     states: Sequence[Mapping[str, Any] | None], variables: Mapping[str, Any]
                     ) -> tuple[dict[str, Any], str]:
    """The template variables the links give a resource, and why it waits ("" when it need not).

    A link whose resource the handle does not have is skipped (Poolboy does the same).
    """
    found: dict[str, Any] = {}
    for link in links:
        index = linked_index(link, entries)
        if index is None:
            continue
        state = states[index] if index < len(states) else None
        values = _template_vars(link, state)
        if link.wait_for is not None:
            if state is None:
                return found, f"waits for linked resource {link.resource_name} to exist"
            try:
                holds = check_expression(link.wait_for, {**variables, **found, **values,
                                                         "linked_resource_state": state})
            except TemplateError as error:
                return found, f"waits: waitFor of the link to {link.resource_name} could not be evaluated: " \
                              f"{error.message}"
            if not holds:
                return found, f"waits for linked resource {link.resource_name}: waitFor {link.wait_for!r} is false"
        found.update(values)
    return found, ""


def _template_vars(link: Link, state: Mapping[str, Any] | None) -> dict[str, Any]:
    """The link's templateVars read from the linked resource; one it does not have (yet) is left undefined,
    so `| default(...)` applies."""
    found: dict[str, Any] = {}
    for var in link.template_vars if state is not None else ():
        try:
            found[var.name] = resolve_pointer(state, var.pointer)
        except JsonPatchError:
            continue
    return found
