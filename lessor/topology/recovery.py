"""What changed while no lessor was running: found once, when the informers have listed.

An informer delivers a deletion only for an object it saw before; whatever
was deleted (or ended) while lessor was down is never announced. It shows in
the listed cluster as a live object that names an object which is gone, or a
lease which has ended. `missed_while_down` finds each such reference and says
which actor must hear of it, as the change it missed:

- an Exporter whose `status.leaseRef` names a lease that is gone or ended:
  the exporter is told, and frees itself for its waiters;
- a live Lease whose `status.exporterRef` names an exporter that is gone:
  the lease is told, and ends `Ready=False/Evicted`;
- a ResourceHandle whose `spec.resourcePool` names a pool that is gone: the
  pool's actor is woken, and deletes the pool's unbound handles (whose
  actors delete their resources);
- a created resource whose handle label names a handle that is gone: the
  handle's actor is woken, and deletes the resources labelled with it;
- an ended Lease whose `lessor.dev/lease-ended` label was taken off: its
  actor is woken, and puts the label back (ended leases are not announced).

The other changes made while lessor was down need nothing from here: every
live object is announced to its actor at `Synced`, and each actor's
`started()` rebuilds its state from what is there (see "Changed while lessor
was down" in docs/architecture.md).

One reference can dangle while lessor runs, too (`bound_to_a_gone_claim`): a
handle bound to a claim whose deletion the topology saw first. The handles'
watch is a stream of its own, so the binding can arrive after the deletion
was routed, when neither the claim's actor nor the deletion's route could
name the handle; the handle is told, as the deletion it missed.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from lessor.topology.changes import JSON, Change
from lessor.model.fields import deleting
from lessor.model.handles import claim_of
from lessor.model.views.leasing import ExporterView, LeaseView
from lessor.topology.fields import HANDLE_POOL, STATUS_EXPORTER_REF, is_inert
from lessor.topology.keys import CLAIM, EXPORTER, HANDLE, LEASE, ObjectKey, address
from lessor.model.labels import HANDLE_NAME, LEASE_ENDED

if TYPE_CHECKING:
    from lessor.topology.graph import Topology


@dataclass(frozen=True, slots=True)
class Missed:
    """Tell the actor at `target` that `key` is now `obj` (None: gone), as a watch event would have."""

    target: str
    key: ObjectKey
    obj: JSON | None


def missed_while_down(topology: Topology) -> list[Missed]:
    """Every change that lessor missed while it was down, in a stable order (see the module's list)."""
    return [*_held_for_ended_leases(topology), *_leased_to_gone_exporters(topology),
            *_gone_owners(topology, HANDLE_POOL), *_gone_owners(topology, HANDLE_NAME),
            *_unlabelled_ended_leases(topology)]


def _held_for_ended_leases(topology: Topology) -> Iterator[Missed]:
    # The held ones, then sorted: sorting every exporter's key is one call that holds the interpreter lock
    # (0.2-0.6 s at 100,000 exporters), and few are held.
    held = [(key, lease) for key in topology.keys(EXPORTER) if (lease := _holder(topology, key)) is not None]
    for key, lease in sorted(held):
        lease_key = ObjectKey(LEASE, key.namespace, lease)
        obj = topology.get(lease_key)
        target = address(key)
        if (obj is None or LeaseView.ended_body(obj)) and target is not None:
            yield Missed(target, lease_key, obj)


def _holder(topology: Topology, key: ObjectKey) -> str | None:
    exporter = ExporterView.maybe(topology.get(key))
    return exporter.held_by if exporter is not None else None


def _leased_to_gone_exporters(topology: Topology) -> Iterator[Missed]:
    for exporter, leases in sorted(topology.dangling(STATUS_EXPORTER_REF).items()):
        for lease in sorted(leases):
            obj = topology.get(lease)
            target = address(lease)
            if obj is not None and not is_inert(lease, obj) and target is not None:
                yield Missed(target, exporter, None)


def _unlabelled_ended_leases(topology: Topology) -> Iterator[Missed]:
    ended = [key for key in topology.keys(LEASE) if LeaseView.ended_body(topology.get(key))]  # as above
    for key in sorted(ended):
        obj = topology.get(key)
        target = address(key)
        lease = LeaseView.maybe(obj) if obj is not None else None
        if lease is not None and target is not None and lease.meta.labels.get(LEASE_ENDED) != "true":
            yield Missed(target, key, obj)


def _gone_owners(topology: Topology, field: str) -> Iterator[Missed]:
    """Objects named through `field` that are gone: their own actors clean up after them."""
    for owner in sorted(topology.dangling(field)):
        target = address(owner)
        if target is not None:
            yield Missed(target, owner, None)


def bound_to_a_gone_claim(topology: Topology, change: Change) -> Missed | None:
    """A handle just bound to a claim the topology does not hold: tell it the claim is gone (its actor asks the
    API before it ends, so a claim whose creation the topology has not seen yet keeps its handle).

    A binding may land as its claim is being deleted (a pool decides from a request the claim made before), and
    the topology may see the deletion first. The handle's actor may have learned of its binding before the
    topology, from the answer to a write of its own, and read the claim from the API while it still existed;
    then nothing else would tell it, and it would stay bound to a claim that is gone."""
    if change.key.kind != HANDLE or change.new is None or deleting(change.new):
        return None
    bound = claim_of(change.new)
    if bound is None or bound == claim_of(change.old):
        return None
    claim, target = ObjectKey(CLAIM, *bound), address(change.key)
    return Missed(target, claim, None) if target is not None and claim not in topology else None
