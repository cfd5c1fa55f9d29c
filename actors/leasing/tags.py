"""Lease `spec.tags` as labels, so leases can be listed by tag (`kubectl get leases -l metadata.lessor.dev/team=qa`).

The lease controller lessor replaces stores its tags the same way (under its own prefix). Tags are
immutable (the CRD refuses changes), so the labels are written once and only added, never removed.
"""

from __future__ import annotations

from lessor.model.labels import TAG_PREFIX
from lessor.model.views.leasing import LeaseView


def missing_tag_labels(lease: LeaseView) -> dict[str, str]:
    """The `metadata.lessor.dev/<key>` labels the lease's tags call for and its metadata lacks (or differs on)."""
    labels = lease.meta.labels
    wanted = {TAG_PREFIX + str(key): str(value) for key, value in lease.tags.items()}
    return {key: value for key, value in wanted.items() if labels.get(key) != value}
