"""The questions only one domain asks the topology, answered from its graph: each domain's part is a
`lessor.topology.domain.Domain` that `topology_state` hands the topology actor, so the topology knows no domain.

Leasing (`LeaseWorlds`): `LeaseWorld`, a lease's candidates, its client, the holders of its candidates and its
namespace's access policies, compiled once and shared by every lease of the namespace; an exporter's waiting
leases and Ready holders. Provisioning (`HandleQuestions`): the handles of a pool, a provider, a claim, and the
resources of a handle.

A lease resolves against the policies that apply to its candidates. Compiling
(or even listing and sorting) a namespace's policies for every lease made the
cost of a lease grow with the namespace. Here each policy is compiled once per
spec, and each namespace's `PolicySet` is built once and handed to every
`LeaseWorld` answer until a policy of the namespace is created, deleted or has
its spec changed (a status write, such as its own `Valid` condition, changes
nothing a lease resolves against, and keeps the set and its memos). The set
is immutable apart from its memos (which policies apply to a label set, which
admit a client), so every lease shares what the others have already worked out.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.actors.leasing.access_policy import AccessPolicy, PolicySet, compile_policy
from lessor.actors.leasing.world import LeaseWorld, LeaseWorldView, ReadyHolders, WaitingLeases
from lessor.actors.provisioning.questions import ClaimHandles, FreeHandles, HandleResources, PoolHandles
from lessor.model.selectors import SelectorError, parse_selector
from lessor.model.views.leasing import ClientView, ExporterView, LeaseView, PolicyView
from lessor.model.views.meta import Meta
from lessor.topology.actor import TopologyState
from lessor.topology.changes import Change
from lessor.topology.fields import FREE_HANDLE_PROVIDER, HANDLE_CLAIM, SPEC_EXPORTER_REF, STATUS_EXPORTER_REF
from lessor.topology.graph import Topology
from lessor.topology.keys import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER, ObjectKey


class PolicySets:
    """Compiled policies by object, and the current `PolicySet` of each namespace asked for since its last change."""

    __slots__ = ("_compiled", "_sets")

    def __init__(self) -> None:
        self._compiled: dict[ObjectKey, AccessPolicy] = {}
        self._sets: dict[str, PolicySet] = {}

    def changed(self, change: Change) -> None:
        """A policy's change: unless only its status or metadata changed, it is compiled again now (as it
        arrives, not on the first lease's question) and its namespace's set built again when next asked for."""
        new = PolicyView.maybe(change.new)
        if change.old is not None and new is not None and PolicyView.of(change.old).spec == new.spec:
            return
        self._sets.pop(change.key.namespace, None)
        if new is None:
            self._compiled.pop(change.key, None)
        else:
            self._compiled[change.key] = compile_policy(new)

    def of(self, topology: Topology, namespace: str) -> PolicySet:
        """The namespace's compiled policies; the same object until one of them changes."""
        found = self._sets.get(namespace)
        if found is None:
            found = self._sets[namespace] = PolicySet.of(self._compile(topology, namespace))
        return found

    def _compile(self, topology: Topology, namespace: str) -> list[AccessPolicy]:
        """Compiled as they arrived; compiled here only if this object never went through `changed`."""
        compiled = []
        for key in topology.keys(POLICY, namespace):
            policy = self._compiled.get(key)
            if policy is None:
                obj = topology.get(key)
                if obj is None:
                    continue
                policy = self._compiled[key] = compile_policy(PolicyView.of(obj))
            compiled.append(policy)
        return compiled


class LeaseWorlds:
    """The leasing domain of the topology: answers its questions, keeps the policies compiled as they change."""

    questions: tuple[type, ...] = (LeaseWorld, WaitingLeases, ReadyHolders)

    __slots__ = ("policies",)

    def __init__(self) -> None:
        self.policies = PolicySets()

    def changed(self, change: Change) -> None:
        if change.key.kind == POLICY:  # before any lease can ask again
            self.policies.changed(change)

    def answer(self, topology: Topology, question: Any) -> Any:
        match question:
            case WaitingLeases(namespace=namespace, exporter=exporter):
                return _waiting_leases(topology, namespace, exporter)
            case ReadyHolders(namespace=namespace, exporter=exporter):
                return _ready_holders(topology, namespace, exporter)
        return self._world(topology, question)

    def _world(self, topology: Topology, question: LeaseWorld) -> LeaseWorldView:
        ns = question.namespace
        if question.exporter_ref:
            pinned = topology.view(ObjectKey(EXPORTER, ns, question.exporter_ref), ExporterView)
            exporters: tuple[ExporterView, ...] = (pinned,) if pinned is not None else ()
        elif question.selector is not None:
            try:
                selector = parse_selector(question.selector, "spec.selector")
            except SelectorError:
                selector = None
            keys = sorted(topology.exporters(ns, selector)) if selector is not None else []
            exporters = tuple(found for key in keys if (found := topology.view(key, ExporterView)) is not None)
        else:
            exporters = ()
        holders = {}
        for exporter in exporters:
            ref = exporter.held_by
            if ref and (lease := topology.view(ObjectKey(LEASE, ns, ref), LeaseView)) is not None:
                holders[ref] = lease
        return LeaseWorldView(
            exporters=exporters,
            policies=self.policies.of(topology, ns),
            client=topology.view(ObjectKey(CLIENT, ns, question.client), ClientView),
            holders=holders,
        )


def _ready_holders(topology: Topology, namespace: str, exporter: str) -> tuple[str, ...]:
    names = []
    for lease_key in sorted(topology.referrers(ObjectKey(EXPORTER, namespace, exporter), STATUS_EXPORTER_REF)):
        lease = topology.view(lease_key, LeaseView)
        if lease is not None and lease.ready_on(exporter):
            names.append(lease_key.name)
    return tuple(names)


def _waiting_leases(topology: Topology, namespace: str, exporter: str) -> tuple[str, ...]:
    key = ObjectKey(EXPORTER, namespace, exporter)
    obj = topology.get(key)
    if obj is None:
        return ()
    # The labels from the object, not through `view`: every exporter asks this as it starts, and their views
    # would fill the topology's cache (16,384 kept) with ones no lease asks for, made and dropped by the
    # tens of thousands among the actors that stay (the allocator keeps such holes).
    interested = topology.leases_selecting(namespace, Meta.of(obj).labels)
    interested |= topology.referrers(key, SPEC_EXPORTER_REF)
    names = []
    for lease_key in sorted(interested):
        lease = topology.view(lease_key, LeaseView)
        if lease is not None and lease.exporter is None:
            names.append(lease_key.name)
    return tuple(names)


class HandleQuestions:
    """The provisioning domain of the topology: which handles a pool, a provider or a claim has, and which
    resources a handle has, from the topology's edges (no state of its own)."""

    questions: tuple[type, ...] = (PoolHandles, FreeHandles, ClaimHandles, HandleResources)

    __slots__ = ()

    def changed(self, change: Change) -> None:
        pass

    def answer(self, topology: Topology, question: Any) -> tuple[Mapping[str, Any], ...]:
        match question:
            case PoolHandles(namespace=namespace, pool=pool):
                keys = topology.handles_of_pool(ObjectKey(POOL, namespace, pool))
            case FreeHandles(namespace=namespace, provider=provider):
                keys = topology.referrers(ObjectKey(PROVIDER, namespace, provider), FREE_HANDLE_PROVIDER)
            case ClaimHandles(namespace=namespace, claim=claim):
                keys = topology.referrers(ObjectKey(CLAIM, namespace, claim), HANDLE_CLAIM)
            case HandleResources(namespace=namespace, handle=handle):
                keys = topology.resources_of_handle(ObjectKey(HANDLE, namespace, handle))
            case _:
                raise TypeError(f"not a question about handles: {type(question).__name__}")
        return tuple(obj for key in sorted(keys) if (obj := topology.get(key)) is not None)


def topology_state(topology: Topology) -> TopologyState:
    """The topology actor's state over `topology`, with the domains that ask it questions of their own."""
    return TopologyState(topology, domains=(LeaseWorlds(), HandleQuestions()))
