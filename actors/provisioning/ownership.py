"""Whose a created resource is: lessor touches only what carries its handle's marks.

A resource belongs to a handle when its `lessor.dev/resource-handle-name`
and `lessor.dev/resource-handle-namespace` labels (else annotations, for a
value that cannot be a label) name that handle. lessor writes them when it
creates the resource, and creates only names that are free; so a resource
that lacks them existed before, or was made by someone else, and lessor
neither applies to it, nor deletes it, nor shows its content on a claim.
Two exceptions are deliberate, both acts of an administrator: `lessor migrate poolboy`
(lessor/tools/porting/migrate.py) marks a resource that a Poolboy handle lists and that carries
Poolboy's marks for it; and a handle imported under the ignore label adopts the resource its
hand-written status names (`imported`), once the label goes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from lessor.model.labels import CLAIM_NAME, CLAIM_NAMESPACE, HANDLE_NAME, HANDLE_NAMESPACE
from lessor.model.views.meta import Meta

_REFERENCE_KEYS = ("apiVersion", "kind", "namespace", "name")


def _marks(resource: Mapping[str, Any]) -> Mapping[str, Any]:
    """The labels that carry lessor's handle name, else the annotations (as the topology reads them)."""
    meta = Meta.of(resource)  # any kind of resource: its metadata is all that is read
    return meta.labels if meta.labels.get(HANDLE_NAME) else meta.annotations


def handle_of(resource: Mapping[str, Any]) -> tuple[str, str] | None:
    """(namespace, name) of the handle the resource is marked for; None when it has no such marks."""
    marks = _marks(resource)
    name, namespace = marks.get(HANDLE_NAME), marks.get(HANDLE_NAMESPACE)
    if isinstance(name, str) and name and isinstance(namespace, str) and namespace:
        return namespace, name
    return None


def owned_by(resource: Mapping[str, Any] | None, handle_namespace: str, handle_name: str) -> bool:
    """Whether lessor made `resource` for the handle `handle_namespace/handle_name`, and so may change
    or delete it. The one rule for every actor that writes created resources."""
    return resource is not None and handle_of(resource) == (handle_namespace, handle_name)


def owner_text(resource: Mapping[str, Any]) -> str:
    """Who the resource belongs to, for a message: another handle (and its claim), or nobody lessor knows."""
    owner = handle_of(resource)
    if owner is None:
        return f"was not created by lessor (it has no {HANDLE_NAME} label)"
    marks = _marks(resource)
    claim = (marks.get(CLAIM_NAMESPACE), marks.get(CLAIM_NAME))
    text = f"belongs to ResourceHandle {owner[0]}/{owner[1]}"
    return text + (f" (ResourceClaim {claim[0]}/{claim[1]})" if all(claim) else "")


def imported(handle: Mapping[str, Any], index: int, reference: Mapping[str, Any],
             found: Mapping[str, Any]) -> bool:
    """Whether `found`, which lessor did not create, is `handle`'s by an administrator's import (Poolboy's
    test-ignore-01): the handle's status, which lessor has never written (no `Rendered` condition), names
    exactly that resource, as the handle renders it (`reference`: apiVersion, kind, namespace, name, index
    `index`), and the resource carries no handle's marks.

    Only the operator and administrators may write a handle's status in the operator's namespace; lessor
    writes it at its first look at a handle, and writes references only to what it created. So a status
    lessor has not written was written by an administrator, which the ignore label gives the time to do:
    the namespace's RBAC is the proof of ownership (docs/claims.md). A claim's template, a pool, or a
    handle lessor has looked at never get a resource this way. The caller checks the handle's namespace."""
    if handle_of(found) is not None:
        return False  # another handle's (or this one's already): never taken over
    if rendered_before(handle):
        return False  # lessor has looked at the handle: what its status names since is not an import
    status = handle.get("status")
    reported = status.get("resources") if isinstance(status, Mapping) else None
    entry = reported[index] if isinstance(reported, list) and index < len(reported) else None
    named = entry.get("reference") if isinstance(entry, Mapping) else None
    return isinstance(named, Mapping) and all(named.get(key) == reference.get(key) and reference.get(key)
                                              for key in _REFERENCE_KEYS)


def rendered_before(handle: Mapping[str, Any]) -> bool:
    """Whether lessor has written the handle's status (its `Rendered` condition): it has judged the handle."""
    status = handle.get("status")
    conditions = status.get("conditions") if isinstance(status, Mapping) else None
    return isinstance(conditions, list) and any(isinstance(c, Mapping) and c.get("type") == "Rendered"
                                                for c in conditions)
