"""What a ResourceHandle says of its claim: the binding reference and the claim templates it was made from."""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from .fields import mapping_at
from .jsonpatch import escape

from .labels import CLAIM_TEMPLATES


def claim_of(handle: Mapping[str, Any] | None) -> tuple[str, str] | None:
    """(namespace, name) of the claim a handle is bound to; None while unbound."""
    ref = mapping_at(mapping_at(handle, "spec"), "resourceClaim")
    name, namespace = ref.get("name"), ref.get("namespace")
    return (namespace, name) if isinstance(name, str) and name and isinstance(namespace, str) else None


def reference_of(obj: Mapping[str, Any]) -> dict[str, str]:
    """A reference (`apiVersion`, `kind`, `name`, `namespace`) to `obj`, as a handle's status lists resources."""
    metadata = obj.get("metadata") or {}
    return {"apiVersion": str(obj.get("apiVersion") or ""), "kind": str(obj.get("kind") or ""),
            "name": str(metadata.get("name") or ""), "namespace": str(metadata.get("namespace") or "")}


def templates_record(templates: Sequence[Any]) -> str:
    """The value of the `CLAIM_TEMPLATES` annotation for these templates."""
    return json.dumps(list(templates), sort_keys=True, separators=(",", ":"))


def recorded_templates(handle: Mapping[str, Any]) -> list[Any] | None:
    """The claim templates recorded on `handle`; None when it has no readable record (made before records were kept)."""
    text = ((handle.get("metadata") or {}).get("annotations") or {}).get(CLAIM_TEMPLATES)
    try:
        value = json.loads(text) if isinstance(text, str) else None
    except ValueError:
        return None
    return value if isinstance(value, list) else None


def record_templates_op(handle: Mapping[str, Any], templates: Sequence[Any]) -> dict[str, Any]:
    """A JSON Patch operation writing the `CLAIM_TEMPLATES` record on `handle`."""
    if isinstance((handle.get("metadata") or {}).get("annotations"), Mapping):
        return {"op": "add", "path": f"/metadata/annotations/{escape(CLAIM_TEMPLATES)}",
                "value": templates_record(templates)}
    return {"op": "add", "path": "/metadata/annotations", "value": {CLAIM_TEMPLATES: templates_record(templates)}}
