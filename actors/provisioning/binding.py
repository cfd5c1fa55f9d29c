"""The binding of a handle to a claim: what the commit writes, and which handles may be given away.

Two writers bind, each with the same compare-and-set write (a merge patch
carrying the handle's resourceVersion, `commit` in `object_actor`): a pool
binds its own unbound handles (`pool.py`, the single arbiter of those), and a
claim binds a free-standing handle (no pool, no claim: made by an admin, or
left by `lessor migrate`) as Poolboy does (`claim.py`, `_bind_free_standing`).
A free-standing handle has no arbiter; the precondition is what keeps two
claims from both binding it: the second write fails with Conflict, the fresh
read shows the handle bound, and that claim looks elsewhere.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from lessor.model.fields import deleting
from lessor.model.views.meta import Meta
from lessor.model.labels import CLAIM_TEMPLATES
from lessor.model.handles import claim_of, templates_record
from lessor.model.views.provisioning import HandleView
from lessor.templates import format_timestamp

from .claim_spec import ClaimSpec, bound_templates
from .lifespan import LifespanConfig, claim_lifespan_of, handle_lifespan_spec, rendered_lifespan


def free(handle: Mapping[str, Any]) -> bool:
    """Neither bound to a claim nor being deleted nor labelled ignored: a handle that may still be given away."""
    return claim_of(handle) is None and not deleting(handle) and not Meta.of(handle).ignored


def free_standing(handle: Mapping[str, Any]) -> bool:
    """Free and in no pool: a handle a claim may bind by itself."""
    return free(handle) and not HandleView.of(handle).pooled


def ending(handle: Mapping[str, Any], now: datetime) -> bool:
    """Its `spec.lifespan.end` has come: it is about to go, and is bound by nobody."""
    end = HandleView.of(handle).lifespan_end
    return end is not None and end <= now


ready = HandleView.ready_of
healthy = HandleView.healthy_of


def preference(handle: Mapping[str, Any]) -> tuple[bool, float, str, str]:
    """Ready handles first, then the highest `spec.preferenceScore`, then the oldest: the order in which
    handles are handed out."""
    view = HandleView.of(handle)
    created = view.meta.created
    return not view.ready, -view.preference_score, format_timestamp(created) if created else "", view.name


def binding_patch(handle: Mapping[str, Any], spec: ClaimSpec, claim: Mapping[str, Any], claim_key: tuple[str, str],
                  *, start: datetime, lifespan: LifespanConfig | None = None) -> dict[str, Any]:
    """The commit: the claim, its values at the ignored paths, the end of the lifespan starting at `start`, and
    the references of the resources the handle's actor made and reported in its status (it leaves them out of
    the spec of a pool's unbound handle: written here, they cost no write of their own); under the handle's
    resourceVersion.

    The lifespan settings are the handle's own; `lifespan` stands in for a handle that has none (a
    free-standing one binds with the claim's providers' settings, as a handle the claim made would have)."""
    view = HandleView.of(handle)
    # a setting written as a template (the pool's, as in Poolboy) is rendered for the claim it binds
    config, _ = rendered_lifespan(view.lifespan_given, claim=claim, handle=handle, now=start)
    if lifespan is not None and config == LifespanConfig():
        config = lifespan
    claim_lifespan, _ = claim_lifespan_of(config, claim, start=start, now=start)
    resources = [copy.deepcopy(dict(entry)) for entry in view.resources]
    reported = view.reported
    for index, (entry, template) in enumerate(zip(resources, bound_templates(spec, handle))):
        entry["template"] = template
        found = reported[index] if index < len(reported) else None
        reference = found.get("reference") if found is not None else None
        if not entry.get("reference") and isinstance(reference, Mapping):
            entry["reference"] = copy.deepcopy(reference)
    namespace, name = claim_key
    lifespan_spec: dict[str, Any] = handle_lifespan_spec(config, claim_lifespan.end if claim_lifespan else None)
    lifespan_spec.setdefault("end", None)  # an unbound pool handle's end (its wait for a claim) ends with the wait
    patch: dict[str, Any] = {
        "metadata": {"resourceVersion": view.meta.resource_version,
                     "annotations": {CLAIM_TEMPLATES: templates_record(spec.templates)}},
        "spec": {
            "resourceClaim": {"name": name, "namespace": namespace},
            "resources": resources,
            "lifespan": lifespan_spec,
        },
    }
    if (provider := spec.provider_reference()) is not None:
        patch["spec"]["provider"] = provider
    return patch
