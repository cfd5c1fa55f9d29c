"""The topology as an actor: the one owner of the graph, fed by the gateway, asked by actors.

Watch events come in as `Event`s, in the order each informer delivers them;
each change is routed to the actors it concerns as an `Observed` snapshot.
Until `Synced` (every informer has listed once) changes are recorded but not
routed: a lease must not be judged against a half-listed cluster. At
`Synced`, every object that has an actor is announced once, and then what
changed while lessor was down is told to the actors that must act on it
(`recovery.missed_while_down`): the start-up reconciliation. `Synced` comes
again whenever this replica starts to act (a new leader), and so does the
reconciliation.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from lessor.actors.observed import Observed
from lessor.actors.queries import GetObject, GetObjects, ListObjects
from lessor.mailbox import Actor, Cause
from lessor.model.fields import mapping_at
from lessor.model.views.meta import ref_name
from lessor.topology.fields import is_inert
from lessor.topology.graph import Topology
from lessor.topology.domain import Domain
from lessor.topology.keys import CLAIM, PROVIDER, ObjectKey, address
from lessor.topology.recovery import bound_to_a_gone_claim, missed_while_down

JSON = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class Event:
    type: str
    object: JSON


@dataclass(frozen=True, slots=True)
class Synced:
    """Every informer has delivered its first list."""


def tenant_of(message: Any) -> str | None:
    """The namespace a message to the topology is about: its mailbox takes namespaces in turn, so one
    namespace's storm of events and questions does not queue another's ahead of it (`mailbox.fair_inbox`).
    None (a cluster-scoped object, `Synced`, the topology's own messages) waits for all before it."""
    if isinstance(message, Event):
        namespace = mapping_at(message.object, "metadata").get("namespace")  # every event: no `Meta` built
    else:
        namespace = getattr(message, "namespace", None)
    return namespace if isinstance(namespace, str) and namespace else None


@dataclass(frozen=True, slots=True)
class _Announce:
    """Sent to self: announce `keys[start:]`, a chunk at a time, so that the loop (probes, the actors just
    spawned, their questions to the topology) runs between chunks instead of stalling for the whole pass."""

    keys: tuple[ObjectKey, ...]
    start: int


ASK_TIMEOUT = math.inf
"""The topology kind's `ask_timeout`: asks to it wait for their answer. The topology is one mailbox that
answers every actor, so under load it is busy, not gone; an asker that timed out would fail, restart and
ask again, adding to the very queue that made it wait (and a restarted lease would redo all of its work).
A kill of the topology still answers its askers with `ActorKilled`; slow answers are counted
(`lessor_mailbox_slow_asks{kind="topology"}`). Waiting on it cannot deadlock: the topology only tells,
it never asks (keep it so)."""

ANNOUNCE_CHUNK = 500
"""Objects announced per message: a few milliseconds of spawning, then the mailbox takes its turn."""


@dataclass
class TopologyState:
    """What outlives one incarnation of the topology actor: the `Topology` (a cache of the watch,
    which the informers never re-send), whether it is complete, and the domains' own state (`domains`: the
    questions only a domain asks, such as leasing's compiled policies; the app wires them)."""

    topology: Topology
    synced: bool = False
    domains: tuple[Domain, ...] = ()
    causes: OrderedDict[ObjectKey, Cause] = field(default_factory=OrderedDict)
    """While tracing: the trace of the last watch event of each object received before `Synced` (oldest first,
    at most `KEPT_CAUSES`). Its actor starts at `Synced` on that trace's behalf, so that a lease created while
    this replica followed is one story from its creation to its Ready, not a root of its own plus a start-up
    12 s later in the new leader's trace."""

    def __post_init__(self) -> None:
        self.answering: dict[type, Domain] = {question: domain for domain in self.domains
                                              for question in domain.questions}

    def keep_cause(self, key: ObjectKey, cause: Cause | None) -> None:
        if cause is None or not cause.sampled:
            self.causes.pop(key, None)
            return
        self.causes[key] = cause.detached()
        self.causes.move_to_end(key)
        while len(self.causes) > KEPT_CAUSES:
            self.causes.popitem(last=False)


KEPT_CAUSES = 4096
"""Objects whose pre-`Synced` event `TopologyState.causes` keeps (about 200 bytes each); the rest of a large
cluster starts in the trace of `Synced`, as all did before."""


class TopologyActor(Actor):
    __slots__ = ("state", "topology")

    def __init__(self, state: TopologyState) -> None:
        self.state = state
        self.topology = state.topology

    async def started(self) -> None:
        # A restart may have lost the routing of the event it was handling: announce everything.
        if self.state.synced:
            self._announce_all()

    async def receive(self, message: Any) -> Any:
        match message:
            case Event(type=event_type, object=obj):
                # The informer's object itself, as every cached object is only read: a copy cost 184 B each.
                change = self.topology.apply(event_type, obj if isinstance(obj, dict) else dict(obj))
                if change is not None:  # before any actor can ask again
                    for domain in self.state.domains:
                        domain.changed(change)
                if change is not None and not self.state.synced:
                    self.state.keep_cause(change.key, self.cause() if change.new is not None else None)
                if change is not None and self.state.synced:
                    targets = self.topology.route(change)
                    if change.key.kind == PROVIDER:  # which provider an unbound claim uses may change with it
                        targets |= self._unbound_claims()
                    for target in targets:
                        self._observe(target, change.key, change.new)
                    if (missed := bound_to_a_gone_claim(self.topology, change)) is not None:
                        self._observe(missed.target, missed.key, missed.obj)
            case Synced():
                self.state.synced = True
                self._announce_all()
            case _Announce(keys=keys, start=start):
                self._announce(keys, start)
            case GetObject(kind=kind, namespace=namespace, name=name):
                return self.topology.get(ObjectKey(kind, namespace, name))
            case GetObjects(kind=kind, namespace=namespace, names=names):
                return tuple(self.topology.get(ObjectKey(kind, namespace, name)) for name in names)
            case ListObjects(kind=kind, namespace=namespace):
                return self._objects(kind, namespace)
            case _ if (answerer := self.state.answering.get(type(message))) is not None:
                return answerer.answer(self.topology, message)
            case _:
                raise TypeError(f"the topology does not answer {type(message).__name__}")
        return None

    def _observe(self, target: str, key: ObjectKey, obj: JSON | None, cause: Cause | None = None) -> None:
        message = Observed(key.kind, key.namespace, key.name, obj)
        self.tell(target, message, coalesce=(target, message.coalesce_key), on_behalf_of=cause)

    def _announce_all(self) -> None:
        """Tell every live object's actor of its object, in chunks (`_Announce`); then the missed changes."""
        self._announce(tuple(self.topology.in_order()), 0)

    def _announce(self, keys: tuple[ObjectKey, ...], start: int) -> None:
        end = start + ANNOUNCE_CHUNK
        for key in keys[start:end]:
            target = address(key)
            obj = self.topology.get(key)  # as it is now: a change since the pass began is already in it
            cause = self.state.causes.pop(key, None) if self.state.causes else None
            if target is not None and obj is not None and not is_inert(key, obj):
                self._observe(target, key, obj, cause)  # in the trace of the object's last event, if kept
        if end < len(keys):
            self.tell(self.address, _Announce(keys, end))
        else:
            self._tell_missed()

    def _tell_missed(self) -> None:
        """The start-up reconciliation: after the announcements, so each actor has started first."""
        for missed in missed_while_down(self.topology):
            self._observe(missed.target, missed.key, missed.obj)

    def _objects(self, kind: str, namespace: str) -> tuple[JSON, ...]:
        keys = sorted(self.topology.keys(kind, namespace))
        return tuple(obj for key in keys if (obj := self.topology.get(key)) is not None)

    def _unbound_claims(self) -> frozenset[str]:
        return frozenset(
            found for key in self.topology.keys(CLAIM)
            if (obj := self.topology.get(key)) is not None
            and not ref_name(mapping_at(obj, "status").get("resourceHandle"))
            and (found := address(key)) is not None
        )
