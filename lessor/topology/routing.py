"""Which actors a change concerns: the routing table.

A change goes to the changed object's own actor (when its kind has one), and
to the actors of known objects that it concerns:

- forward: the objects that the old or the new version names in a field of
  `FORWARD` (a lease's exporterRefs, a handle's pool and claim, a claim's
  handle, any object's handle label);
- backward: the live objects that name the changed one in a field of
  `BACKWARD` (leases naming an exporter or a client, the exporter whose
  leaseRef names a lease, pools and handles using a provider, handles
  referencing a created resource);
- by selector: for an exporter, the live leases whose selector matches its
  old or new labels; for a policy, the live leases whose client matches one
  of its old or new clientSelectors.

Ended leases are inert (see `fields.is_inert`): they hear only of their own
changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

from lessor.topology.changes import JSON, Change
from lessor.topology.fields import (
    CLAIM_HANDLE,
    CLIENT_REF,
    HANDLE_CLAIM,
    HANDLE_POOL,
    LEASE_REF,
    PROVIDER_REF,
    SPEC_EXPORTER_REF,
    SPEC_REFERENCE,
    STATUS_EXPORTER_REF,
    STATUS_REFERENCE,
    client_selectors,
    labels_of,
    references,
)
from lessor.topology.keys import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, PROVIDER, SCALING, ObjectKey, address
from lessor.model.labels import HANDLE_NAME

if TYPE_CHECKING:
    from lessor.topology.graph import Topology

FORWARD: Mapping[str, frozenset[str]] = {
    LEASE: frozenset({SPEC_EXPORTER_REF, STATUS_EXPORTER_REF, HANDLE_NAME}),
    HANDLE: frozenset({HANDLE_POOL, HANDLE_CLAIM, HANDLE_NAME}),
    CLAIM: frozenset({CLAIM_HANDLE, HANDLE_NAME}),
    SCALING: frozenset({HANDLE_POOL}),  # a scaling is served by its pool's actor
}
FORWARD_ANY_KIND = frozenset({HANDLE_NAME})

BACKWARD: Mapping[str, tuple[str, ...]] = {
    EXPORTER: (SPEC_EXPORTER_REF, STATUS_EXPORTER_REF, SPEC_REFERENCE, STATUS_REFERENCE),
    # the exporter whose leaseRef names the lease hears of it (deleted, ended, granted elsewhere) and heals
    LEASE: (LEASE_REF, SPEC_REFERENCE, STATUS_REFERENCE),
    CLIENT: (CLIENT_REF, SPEC_REFERENCE, STATUS_REFERENCE),
    PROVIDER: (PROVIDER_REF, SPEC_REFERENCE, STATUS_REFERENCE),
}
BACKWARD_ANY_KIND = (SPEC_REFERENCE, STATUS_REFERENCE)


def route(topology: Topology, change: Change) -> frozenset[str]:
    key = change.key
    concerned = topology.referrers(key, *BACKWARD.get(key.kind, BACKWARD_ANY_KIND))
    forward = FORWARD.get(key.kind, FORWARD_ANY_KIND)
    for obj in change.versions():
        concerned.update(
            edge.target for edge in references(key, obj, topology.operator_namespace) if edge.field in forward
        )
        if key.kind == POLICY:
            concerned |= _leases_of_clients(topology, key, obj)
    if key.kind == EXPORTER and not status_only(change):
        label_sets = [labels_of(obj) for obj in change.versions()]
        if len(label_sets) == 2 and label_sets[0] == label_sets[1]:
            del label_sets[1]  # a spec change: one lookup, not two
        for labels in label_sets:
            concerned |= topology.leases_selecting(key.namespace, labels)
    addresses = {found for target in concerned if target in topology and (found := address(target))}
    own = address(key)
    if own is not None:
        addresses.add(own)
    return frozenset(addresses)


def _leases_of_clients(topology: Topology, policy: ObjectKey, obj: JSON) -> set[ObjectKey]:
    leases: set[ObjectKey] = set()
    for _, selector in client_selectors(policy, obj):
        for client in topology.clients(policy.namespace, selector):
            leases |= topology.referrers(client, CLIENT_REF)
    return leases


def status_only(change: Change) -> bool:
    """An update that changed neither labels nor spec: a heartbeat, a commit, a condition.

    It cannot change which leases select the exporter, so it goes only to the exporter's
    actor and the leases that name it; the exporter actor tells its queued leases itself
    when its availability changes. Otherwise every heartbeat would reach every waiting
    lease that selects the exporter.
    """
    if change.old is None or change.new is None:
        return False
    # raw: every heartbeat comes here (see `fields._references`)
    return labels_of(change.old) == labels_of(change.new) and change.old.get("spec") == change.new.get("spec")
