"""Poolboy and Jumpstarter manifests to lessor's, with a note for every field that does not carry over.

Pure: objects in, objects and notes out; reading files and writing YAML is `lessor.tools.porting.commands`.
What carries over is listed per kind (`_CARRIED`); anything else in a spec is left out and named
in a note saying why, so nothing is dropped silently. Poolboy's kinds are told apart from the
Jumpstarter controller's by kind (their groups differ between installations).
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lessor.actors.provisioning.pool_scaling import SCALING_LABEL
from lessor.model.fields import mapping_at
from lessor.templates import parse_duration, strings_in

API = "lessor.dev/v1alpha1"
POOLBOY = ("ResourceProvider", "ResourcePool", "ResourceHandle", "ResourceClaim", "ResourcePoolScaling")
JUMPSTARTER = ("Client", "Exporter", "ExporterAccessPolicy", "Lease")
NOT_PORTED_KINDS = {
    "ResourceWatch": "lessor watches what handles create by itself; nothing replaces it",
}

#: spec fields that mean the same in lessor, per kind.
_CARRIED: dict[str, frozenset[str]] = {
    "ResourceProvider": frozenset({"default", "override", "match", "matchIgnore", "updateFilters", "validation",
                                   "lifespan", "resourceRequiresClaim", "resourceName", "readinessCheck",
                                   "template", "vars", "disableCreation", "approval", "statusSummaryTemplate",
                                   "healthCheck", "parameters", "resourceClaimLabels", "resourceClaimAnnotations",
                                   "linkedResourceProviders"}),
    "ResourcePool": frozenset({"minAvailable", "maxUnready", "resources", "lifespan", "preferenceScore",
                               "resourceLabels", "resourceAnnotations", "vars", "deleteUnhealthyResourceHandles"}),
    "ResourceHandle": frozenset({"resourceClaim", "resourcePool", "resources", "lifespan", "vars",
                                 "resourceLabels", "resourceAnnotations", "preferenceScore", "provider"}),
    "ResourceClaim": frozenset({"resources", "provider", "lifespan", "disableCreation", "autoDelete", "autoDetach"}),
    "ResourcePoolScaling": frozenset({"resourcePool", "count", "at"}),
    "Client": frozenset({"username"}),
    "Exporter": frozenset({"enabled", "username"}),
    "ExporterAccessPolicy": frozenset({"exporterSelector", "policies"}),
    "Lease": frozenset({"clientRef", "duration", "selector", "exporterRef", "tags", "allowDisabled", "release",
                        "beginTime", "endTime", "context"}),
}

#: Why a Poolboy field is left out, where there is more to say than "lessor does not implement it".
_WHY: dict[str, str] = {
    "provider": "provider mode (a provider with parameters instead of resources) is implemented for claims, not "
                "for pools in lessor",
}

#: Names Poolboy's templates have that lessor's sandbox does not (its own functions it has: templates/poolboy.py).
_POOLBOY_ONLY = {
    "lipsum(": "no placeholder text generator",
    "cycler(": "use loop.cycle(...) inside a for loop",
    "joiner(": "use loop.first or | join",
}
_TYPED = re.compile(r"^\{\{(?!.*\{\{).*\|\s*(bool|float|int|list|object)\s*\}\}$", re.DOTALL)
_LONE = re.compile(r"^\{\{(?!.*\{\{)(?!.*\{%)(.*)\}\}$", re.DOTALL)
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
               "deletionTimestamp", "deletionGracePeriodSeconds")


@dataclass(frozen=True)
class Note:
    """One thing that did not carry over unchanged: `subject` (kind namespace/name), the field, and why."""

    subject: str
    field: str
    message: str
    dropped: bool = True

    def __str__(self) -> str:
        verb = "left out" if self.dropped else "changed"
        return f"{self.subject}: {self.field}: {verb}: {self.message}"


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


def convert(docs: Iterable[Mapping[str, Any]], *, operator_namespace: str = "lessor-system") -> Conversion:
    """lessor's objects for Poolboy's and Jumpstarter's; other kinds are copied unchanged, with a note."""
    result = Conversion()
    for doc in _flattened(docs):
        obj, notes = convert_object(doc, operator_namespace=operator_namespace)
        if obj is not None:
            result.objects.append(obj)
        result.notes += notes
    return result


def convert_object(doc: Mapping[str, Any], *, operator_namespace: str = "lessor-system",
                   keep_status: bool = False) -> tuple[dict[str, Any] | None, list[Note]]:
    """One object converted, or None when it cannot be; `keep_status` keeps `status` (for `migrate`)."""
    kind = str(doc.get("kind") or "")
    metadata = mapping_at(doc, "metadata")
    name = metadata.get("name") or metadata.get("generateName") or ""
    subject = f"{kind or '(no kind)'} {metadata.get('namespace') or ''}/{name}"
    notes: list[Note] = []
    if kind in NOT_PORTED_KINDS:
        return None, [Note(subject, "(object)", NOT_PORTED_KINDS[kind])]
    group = str(doc.get("apiVersion") or "").partition("/")[0]
    theirs = group == "jumpstarter.dev" or group.endswith((".jumpstarter.dev", "poolboy.gpte.redhat.com"))
    if kind not in _CARRIED and theirs:
        return None, [Note(subject, "(object)", f"lessor has no {kind}: not converted")]
    if kind not in _CARRIED or group == "lessor.dev":
        return dict(doc), [Note(subject, "(object)", "not a Poolboy or Jumpstarter kind: copied unchanged", False)]
    obj: dict[str, Any] = {"apiVersion": API, "kind": kind,
                           "metadata": _metadata(metadata, group, kind, operator_namespace, subject, notes)}
    spec = mapping_at(doc, "spec")
    if kind == "ResourcePool" and "provider" in spec and not spec.get("resources"):
        return None, notes + [Note(subject, "spec.provider", _WHY["provider"] + f"; the {kind} is not converted")]
    kept: dict[str, Any] = {}
    for key, value in spec.items():
        if key in _CARRIED[kind]:
            kept[key] = copy.deepcopy(value)
        else:
            notes.append(Note(subject, f"spec.{key}", _WHY.get(key, "lessor does not implement it")))
    if kind in POOLBOY:
        _poolboy_spec(kind, kept, operator_namespace, subject, notes)
    obj["spec"] = kept
    if "status" in doc:
        if keep_status:
            obj["status"] = copy.deepcopy(doc["status"])
        else:
            notes.append(Note(subject, "status", "written by the operator (or the exporter's agent); lessor "
                                                 "writes its own. `lessor migrate` keeps live bindings"))
    return obj, notes


# ----------------------------------------------------------------------------------------- parts


def _flattened(docs: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    for doc in docs:
        if isinstance(doc, Mapping) and str(doc.get("kind") or "").endswith("List") and "items" in doc:
            yield from (item for item in doc.get("items") or () if isinstance(item, Mapping))
        elif isinstance(doc, Mapping):
            yield doc


def _metadata(metadata: Mapping[str, Any], group: str, kind: str, operator_namespace: str, subject: str,
              notes: list[Note]) -> dict[str, Any]:
    out = {key: copy.deepcopy(value) for key, value in metadata.items() if key not in _SERVER_SET}
    if kind in ("ResourceProvider", "ResourcePool", "ResourceHandle", "ResourcePoolScaling"):
        if out.get("namespace") not in (None, operator_namespace):
            notes.append(Note(subject, "metadata.namespace", f"{out['namespace']} -> {operator_namespace}: lessor "
                                                             "keeps providers, pools, scalings and handles in its "
                                                             "namespace",
                              False))
        out["namespace"] = operator_namespace
    for section in ("labels", "annotations"):
        values = out.get(section)
        if not isinstance(values, Mapping):
            continue
        theirs = sorted(key for key in values if group and str(key).startswith(f"{group}/"))
        renamed = {("ResourceClaim", "annotations"): (f"{group}/resource-pool-name", "lessor.dev/resource-pool-name"),
                   # a handle made for a scaling: extra to its pool, never deleted as a surplus
                   ("ResourceHandle", "labels"): (f"{group}/resource-pool-scaling-name", SCALING_LABEL)}
        old_key, new_key = renamed.get((kind, section), ("", ""))
        if old_key in theirs:
            theirs.remove(old_key)  # lessor reads the same under its own domain
            out[section] = {**values, new_key: values[old_key]}
            del out[section][old_key]
            values = out[section]
            notes.append(Note(subject, f"metadata.{section}.{old_key}", f"-> {new_key}", False))
        for key in theirs:
            notes.append(Note(subject, f"metadata.{section}.{key}", "the old operator's bookkeeping; lessor writes "
                                                                     "its own lessor.dev/ ones"))
        out[section] = {key: value for key, value in values.items() if key not in theirs}
        if not out[section]:
            del out[section]
    for key, why in (("finalizers", "the old operator's finalizers would block deletion without it"),
                     ("ownerReferences", "they name the old objects by uid")):
        if out.pop(key, None):
            notes.append(Note(subject, f"metadata.{key}", why))
    return out


def _poolboy_spec(kind: str, spec: dict[str, Any], operator_namespace: str, subject: str,
                  notes: list[Note]) -> None:
    for index, entry in enumerate(spec.get("resources") or ()):
        if isinstance(entry, dict) and isinstance(entry.get("provider"), Mapping):
            entry["provider"] = {"name": entry["provider"].get("name")}
        template = entry.get("template") if isinstance(entry, dict) else None
        metadata = template.get("metadata") if isinstance(template, dict) else None
        if kind == "ResourceClaim" and isinstance(metadata, dict):
            # metadata.name carries over: lessor lets a claim name its resource where the provider's schema
            # declares metadata.name, as Poolboy's providers allow it (and refuses it, naming the field, elsewhere)
            if "namespace" in metadata:
                notes.append(Note(subject, f"spec.resources[{index}].template.metadata.namespace",
                                  f"{metadata.pop('namespace')!r}: a claim cannot choose the namespace of its resource "
                                  "in lessor (Forbidden); the provider's override decides"))
            if not metadata and isinstance(template, dict):
                del template["metadata"]
    if isinstance(spec.get("resourcePool"), dict):
        spec["resourcePool"] = {"name": spec["resourcePool"].get("name"), "namespace": operator_namespace}
    if isinstance(spec.get("provider"), dict):  # provider mode: lessor names providers by name only
        spec["provider"] = {k: spec["provider"][k] for k in ("name", "parameterValues") if k in spec["provider"]}
    if isinstance(spec.get("resourceClaim"), dict):
        spec["resourceClaim"] = {k: spec["resourceClaim"][k] for k in ("name", "namespace")
                                 if k in spec["resourceClaim"]}
    lifespan = spec.get("lifespan")
    if isinstance(lifespan, dict):
        for key in [k for k in lifespan if k not in ("start", "end")]:
            if key != "unclaimed" and isinstance(lifespan[key], str) and ("{{" in lifespan[key] or "{%" in lifespan[key]):
                continue  # a template, rendered for each claim as in Poolboy
            try:
                parse_duration(lifespan[key])
            except (TypeError, ValueError):
                notes.append(Note(subject, f"spec.lifespan.{key}", f"{lifespan[key]!r} is not a duration lessor "
                                                                   "reads (write it as 1d12h, 30m...)"))
                del lifespan[key]
    if kind != "ResourceProvider":
        return
    template = spec.get("template")
    if isinstance(template, Mapping):
        style = template.get("style")
        if style not in (None, "jinja2"):
            notes.append(Note(subject, "spec.template.style", f"{style!r}: lessor's templates are Jinja2"))
        spec["template"] = {"enable": template.get("enable") is True}
        if isinstance(template.get("definition"), dict):  # rendered whatever enable says, in both tools
            _sandbox_notes(template["definition"], "spec.template.definition", subject, notes)
            spec["template"]["definition"] = _typed_as_poolboy(template["definition"])
        for index, link in enumerate(spec.get("linkedResourceProviders") or ()):
            if isinstance(link, dict) and isinstance(link.get("parameterValues"), dict):
                _sandbox_notes(link["parameterValues"], f"spec.linkedResourceProviders[{index}].parameterValues",
                               subject, notes)
                link["parameterValues"] = _typed_as_poolboy(link["parameterValues"])
        for index, parameter in enumerate(spec.get("parameters") or ()):
            default = parameter.get("default") if isinstance(parameter, dict) else None
            if isinstance(default, dict) and isinstance(default.get("template"), str):
                _sandbox_notes(default["template"], f"spec.parameters[{index}].default.template", subject, notes)
                default["template"] = _typed_as_poolboy(default["template"])
        if template.get("enable") is not True:
            return
        for section in ("default", "override", "vars"):
            if isinstance(spec.get(section), dict):
                _sandbox_notes(spec[section], f"spec.{section}", subject, notes)
                spec[section] = _typed_as_poolboy(spec[section])


def _sandbox_notes(value: Any, path: str, subject: str, notes: list[Note]) -> None:
    """A note for each template that uses something Poolboy's templates have and lessor's sandbox lacks."""
    for pointer, source in strings_in(value):
        if "{{" not in source and "{%" not in source:
            continue
        for name, hint in _POOLBOY_ONLY.items():
            if re.search(r"(?<![\w.])" + re.escape(name), source):
                notes.append(Note(subject, path + pointer, f"uses {name.rstrip('(.')}, which lessor's sandbox "
                                                           f"does not have: {hint}", False))


def _typed_as_poolboy(value: Any) -> Any:
    """Poolboy renders `"{{ x }}"` to text unless a last `| int`-like filter types it; lessor keeps x's
    type. So a lone expression without such a filter gets `| string`: the same text as before."""
    if isinstance(value, str):
        match = _LONE.match(value)
        if match and not _TYPED.match(value):
            expression = match.group(1).strip().strip("-+").strip()
            return f"{{{{ ({expression}) | string }}}}"
        return value
    if isinstance(value, dict):
        return {key: _typed_as_poolboy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed_as_poolboy(item) for item in value]
    return value
