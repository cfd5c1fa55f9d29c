"""Lease `spec.tags` as labels, so leases can be listed by tag (`kubectl get leases -l metadata.lessor.dev/team=qa`).

The lease controller lessor replaces stores its tags the same way (under its own prefix). Tags are
immutable (the CRD refuses changes), so the labels are written once and only added, never removed.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.model.labels import TAG_PREFIX



def missing_tag_labels(lease: Mapping[str, Any]) -> dict[str, str]:
    """The `metadata.lessor.dev/<key>` labels the lease's tags call for and its metadata lacks (or differs on)."""
    tags = (lease.get("spec") or {}).get("tags")
    labels = (lease.get("metadata") or {}).get("labels") or {}
    if not isinstance(tags, Mapping):
        return {}
    wanted = {TAG_PREFIX + str(key): str(value) for key, value in tags.items()}
    return {key: value for key, value in wanted.items() if labels.get(key) != value}
