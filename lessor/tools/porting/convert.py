"""Poolboy and Jumpstarter manifests to lessor's, with a note for every field that does not carry over.

Pure: objects in, objects and notes out; reading files and writing YAML is `lessor.tools.porting.commands`.
What carries over is listed per kind (`_CARRIED`); anything else in a spec is left out and named
in a note saying why, so nothing is dropped silently. Poolboy's kinds are told apart from the
Jumpstarter controller's by kind (their groups differ between installations).

Each note says what happened to its field (`Note.verb`): left out, changed, will not work (kept, but
lessor refuses it or cannot render it: `judging.py` asks lessor's own code), replaced (the old
operator's status and bookkeeping, which lessor writes anew) or copied unchanged. Left out and will
not work are losses (`Note.loss`): `lessor convert` exits 1 on them unless `--allow-loss`.
"""

from __future__ import annotations

import copy
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from lessor.model.fields import mapping_at
from lessor.model.labels import IGNORE
from lessor.templates import parse_duration, strings_in
from lessor.model.labels import POOL_NAME, POOL_SCALING

from .judging import judged, template_problems

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
    "ResourcePool": frozenset({"minAvailable", "maxUnready", "resources", "provider", "lifespan", "preferenceScore",
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
_WHY: dict[str, str] = {}

_TYPED = re.compile(r"^\{\{(?!.*\{\{).*\|\s*(bool|float|int|list|object)\s*\}\}$", re.DOTALL)
_TEXT = re.compile(r"^\{\{(?!.*\{\{).*\|\s*string\s*-?\}\}$", re.DOTALL)  # text already, in both tools
_LONE = re.compile(r"^\{\{(?!.*\{\{)(?!.*\{%)(.*)\}\}$", re.DOTALL)
_SERVER_SET = ("uid", "resourceVersion", "creationTimestamp", "generation", "managedFields", "selfLink",
               "deletionTimestamp", "deletionGracePeriodSeconds")


LEFT_OUT = "left out"
CHANGED = "changed"
WILL_NOT_WORK = "will not work"
"""Kept as it was, but lessor refuses it or cannot render it."""
REPLACED = "replaced"
"""The old operator's own status or bookkeeping: lessor writes its own."""
COPIED = "copied unchanged"
VERBS = (LEFT_OUT, WILL_NOT_WORK, CHANGED, REPLACED, COPIED)
LOSSES = (LEFT_OUT, WILL_NOT_WORK)


@dataclass(frozen=True)
class Note:
    """One thing that did not carry over unchanged: `subject` (kind namespace/name), the field, and why.

    `dropped`: the field is not in the output. `outcome` (one of `VERBS`) says more; without it a note is
    left out, or changed when not `dropped`."""

    subject: str
    field: str
    message: str
    dropped: bool = True
    outcome: str = ""

    @property
    def verb(self) -> str:
        return self.outcome or (LEFT_OUT if self.dropped else CHANGED)

    @property
    def loss(self) -> bool:
        """Something of the input that is not in lessor's objects, or will not work there."""
        return self.verb in LOSSES

    def __str__(self) -> str:
        return f"{self.subject}: {self.field}: {self.verb}: {self.message}"


@dataclass
class Conversion:
    objects: list[dict[str, Any]] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Notes by verb, every verb present."""
        return {verb: sum(1 for note in self.notes if note.verb == verb) for verb in VERBS}

    @property
    def lossy(self) -> bool:
        return any(note.loss for note in self.notes)


def convert(docs: Iterable[Mapping[str, Any]], *, operator_namespace: str = "lessor-system") -> Conversion:
    """lessor's objects for Poolboy's and Jumpstarter's; other kinds are copied unchanged, with a note.

    Then what lessor would refuse in them is noted as `will not work` (`judging.judged`)."""
    result = Conversion()
    subjects: list[str] = []
    providers: dict[str, tuple[str, dict[str, Any]]] = {}
    for doc in _flattened(docs):
        obj, notes = convert_object(doc, operator_namespace=operator_namespace)
        if obj is not None:
            result.objects.append(obj)
            subjects.append(_subject(doc))
            if doc.get("kind") == "ResourceProvider" and obj.get("apiVersion") != doc.get("apiVersion"):
                providers[str(mapping_at(obj, "metadata").get("name"))] = (subjects[-1], obj)
        result.notes += notes
    result.notes += trust_linked_values(providers)
    for index, problems in judged(result.objects, api=API).items():
        noted = {note.field for note in result.notes if note.subject == subjects[index] and note.loss}
        result.notes += [Note(subjects[index], where, why, False, WILL_NOT_WORK) for where, why in problems
                         if where not in noted]
    broken = {(note.subject, note.field) for note in result.notes if note.verb == WILL_NOT_WORK}
    result.notes = [note for note in result.notes  # what does not work was not "changed" into lessor's
                    if note.verb != CHANGED or (note.subject, note.field) not in broken]
    return result


def trust_linked_values(providers: Mapping[str, tuple[str, dict[str, Any]]]) -> list[Note]:
    """Keep Poolboy's behaviour for linked values: set `spec.trustLinkedParameterValues: true` on each converted
    provider (by name: (subject, object)) whose parameters could refuse what another's link gives it, and say so.

    Poolboy uses a link's `parameterValues` as given; lessor judges them by the linked provider's parameters
    unless it trusts them. Which values a link's templates give is known only per claim, so "could refuse" is
    a value for a parameter that has a `validation`, or for one the provider does not declare."""
    givers: dict[str, list[str]] = {}
    for name, (_, obj) in providers.items():
        for index, link in enumerate(mapping_at(obj, "spec").get("linkedResourceProviders") or ()):
            link = link if isinstance(link, Mapping) else {}
            target, values = providers.get(str(link.get("name"))), link.get("parameterValues")
            if target is not None and isinstance(values, Mapping) and _may_refuse(mapping_at(target[1], "spec"), values):
                givers.setdefault(str(link.get("name")), []).append(
                    f"ResourceProvider {name}'s spec.linkedResourceProviders[{index}] ({', '.join(map(str, values))})")
    notes = []
    for name, by in givers.items():
        subject, obj = providers[name]
        spec = obj.setdefault("spec", {})
        if "trustLinkedParameterValues" in spec:
            continue
        spec["trustLinkedParameterValues"] = True
        notes.append(Note(subject, "spec.trustLinkedParameterValues", "set to true: Poolboy uses unchecked the values that reach "
                          f"this provider's parameters through {'; '.join(by)}, which lessor would judge by them; "
                          "true keeps Poolboy's behaviour. Set it to false to have lessor refuse a linked value "
                          "these parameters do not allow (docs/migrating.md)", False, CHANGED))
    return notes


def _may_refuse(spec: Mapping[str, Any], values: Mapping[str, Any]) -> bool:
    """Whether a provider's parameters (its spec) could refuse some of `values`: a name it does not declare,
    or one whose parameter has a `validation`."""
    declared = {str(p.get("name")): p for p in spec.get("parameters") or () if isinstance(p, Mapping)}
    return any(name not in declared or declared[name].get("validation") for name in values)


def _subject(doc: Mapping[str, Any]) -> str:
    metadata = mapping_at(doc, "metadata")
    name = metadata.get("name") or metadata.get("generateName") or ""
    return f"{doc.get('kind') or '(no kind)'} {metadata.get('namespace') or ''}/{name}"


def convert_object(doc: Mapping[str, Any], *, operator_namespace: str = "lessor-system",
                   keep_status: bool = False) -> tuple[dict[str, Any] | None, list[Note]]:
    """One object converted, or None when it cannot be; `keep_status` keeps `status` (for `migrate`)."""
    kind = str(doc.get("kind") or "")
    metadata = mapping_at(doc, "metadata")
    subject = _subject(doc)
    notes: list[Note] = []
    if kind in NOT_PORTED_KINDS:
        return None, [Note(subject, "(object)", NOT_PORTED_KINDS[kind])]
    group = str(doc.get("apiVersion") or "").partition("/")[0]
    theirs = group == "jumpstarter.dev" or group.endswith((".jumpstarter.dev", "poolboy.gpte.redhat.com"))
    if kind not in _CARRIED and theirs:
        return None, [Note(subject, "(object)", f"lessor has no {kind}: not converted")]
    if kind not in _CARRIED or group == "lessor.dev":
        return dict(doc), [Note(subject, "(object)", "not a Poolboy or Jumpstarter kind", False, COPIED)]
    obj: dict[str, Any] = {"apiVersion": API, "kind": kind,
                           "metadata": _metadata(metadata, group, kind, operator_namespace, subject, notes)}
    spec = mapping_at(doc, "spec")
    kept: dict[str, Any] = {}
    if kind in POOLBOY:  # every template and check as written, before the typing below changes it
        notes += [Note(subject, where, why, False, WILL_NOT_WORK) for where, why in template_problems(kind, spec)]
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
                                                 "writes its own. `lessor migrate` keeps live bindings",
                              outcome=REPLACED))
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
        renamed = {("ResourceClaim", "annotations"): (f"{group}/resource-pool-name", POOL_NAME),
                   # a handle made for a scaling: extra to its pool, never deleted as a surplus
                   ("ResourceHandle", "labels"): (f"{group}/resource-pool-scaling-name", POOL_SCALING)}
        old_key, new_key = renamed.get((kind, section), ("", ""))
        if old_key in theirs:
            theirs.remove(old_key)  # lessor reads the same under its own domain
            out[section] = {**values, new_key: values[old_key]}
            del out[section][old_key]
            values = out[section]
            notes.append(Note(subject, f"metadata.{section}.{old_key}", f"-> {new_key}", False))
        if section == "labels" and kind in POOLBOY and f"{group}/ignore" in theirs:  # left alone in both tools
            theirs.remove(f"{group}/ignore")
            out[section] = {**{k: v for k, v in values.items() if k != f"{group}/ignore"},
                            IGNORE: values[f"{group}/ignore"]}
            values = out[section]
            notes.append(Note(subject, f"metadata.labels.{group}/ignore", f"-> {IGNORE}", False))
        for key in theirs:
            notes.append(Note(subject, f"metadata.{section}.{key}", "the old operator's bookkeeping; lessor writes "
                                                                     "its own lessor.dev/ ones", outcome=REPLACED))
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
            _reference(entry, "provider", ("name",), f"spec.resources[{index}].provider", subject, notes)
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
        _reference(spec, "resourcePool", ("name",), "spec.resourcePool", subject, notes, operator_namespace)
    if isinstance(spec.get("provider"), dict):  # provider mode: lessor names providers by name only
        _reference(spec, "provider", ("name", "parameterValues"), "spec.provider", subject, notes)
    if isinstance(spec.get("resourceClaim"), dict):
        _reference(spec, "resourceClaim", ("name", "namespace"), "spec.resourceClaim", subject, notes)
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
        for key in [k for k in template if k not in ("enable", "definition", "style")]:
            notes.append(Note(subject, f"spec.template.{key}", "lessor does not implement it"))
        if "enable" in template and template["enable"] is not spec["template"]["enable"]:
            notes.append(Note(subject, "spec.template.enable", f"{template['enable']!r} -> false: lessor's templates "
                                                               "are enabled by true only", False))
        if isinstance(template.get("definition"), dict):  # rendered whatever enable says, in both tools
            spec["template"]["definition"] = _typed(template["definition"], "spec.template.definition", subject, notes)
        for index, link in enumerate(spec.get("linkedResourceProviders") or ()):
            if isinstance(link, dict) and isinstance(link.get("parameterValues"), dict):
                link["parameterValues"] = _typed(link["parameterValues"],
                                                 f"spec.linkedResourceProviders[{index}].parameterValues", subject,
                                                 notes)
        for index, parameter in enumerate(spec.get("parameters") or ()):
            default = parameter.get("default") if isinstance(parameter, dict) else None
            if isinstance(default, dict) and isinstance(default.get("template"), str):
                default["template"] = _typed(default["template"], f"spec.parameters[{index}].default.template",
                                             subject, notes)
        if template.get("enable") is not True:
            return
        for section in ("default", "override", "vars"):
            if isinstance(spec.get(section), dict):
                spec[section] = _typed(spec[section], f"spec.{section}", subject, notes)


def _reference(spec: dict[str, Any], key: str, kept: tuple[str, ...], path: str, subject: str, notes: list[Note],
               namespace: str | None = None) -> None:
    """A reference cut to the keys lessor reads (`namespace`: placed there), with a note when that changed it:
    lessor's kinds are its own, and its providers, pools and handles all in its namespace."""
    old = spec[key]
    new = {k: old[k] for k in kept if k in old}
    if namespace is not None:
        new["namespace"] = namespace
    spec[key] = new
    changes = [f"{k} {old[k]!r} -> {new[k]!r}" if k in old else f"{k} set to {new[k]!r}"
               for k in new if old.get(k) != new[k]]
    gone = [k for k in old if k not in new]
    if gone:
        changes.append(f"without {', '.join(gone)}")
    if changes:
        notes.append(Note(subject, path, f"{'; '.join(changes)}: lessor reads only {' and '.join(kept)}"
                          + (" in its namespace" if namespace else ""), False))


def _typed(value: Any, path: str, subject: str, notes: list[Note]) -> Any:
    """`_typed_as_poolboy(value)`, with a note for each string it changed."""
    from lessor.model.jsonpatch import field_path

    typed = _typed_as_poolboy(value)
    broken = {note.field for note in notes if note.verb == WILL_NOT_WORK}  # not "changed": it does not work at all
    for (pointer, old), (_, new) in zip(strings_in(value), strings_in(typed)):
        if old != new and field_path(path, pointer) not in broken:
            notes.append(Note(subject, field_path(path, pointer), f"{old!r} -> {new!r}: lessor keeps a lone "
                                                                  "expression's type, Poolboy renders it to text",
                              False))
    return typed


def _typed_as_poolboy(value: Any) -> Any:
    """Poolboy renders `"{{ x }}"` to text unless a last `| int`-like filter types it; lessor keeps x's
    type. So a lone expression without such a filter gets `| string`: the same text as before."""
    if isinstance(value, str):
        match = _LONE.match(value)
        if match and not _TYPED.match(value) and not _TEXT.match(value):
            expression = match.group(1).strip().strip("-+").strip()
            return f"{{{{ ({expression}) | string }}}}"
        return value
    if isinstance(value, dict):
        return {key: _typed_as_poolboy(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_typed_as_poolboy(item) for item in value]
    return value
