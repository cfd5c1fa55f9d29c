"""Each namespace's ExporterAccessPolicies, compiled once and shared by every lease of the namespace.

A lease resolves against the policies that apply to its candidates. Compiling
(or even listing and sorting) a namespace's policies for every lease made the
cost of a lease grow with the namespace. Here each policy is compiled once per
resourceVersion, and each namespace's `PolicySet` is built once and handed to
every `LeaseWorld` answer until one of the namespace's policies changes. The set
is immutable apart from its memos (which policies apply to a label set, which
admit a client), so every lease shares what the others have already worked out.
"""

from __future__ import annotations

from lessor.actors.access_policy import AccessPolicy, PolicySet, compile_policy
from lessor.topology.graph import Topology
from lessor.topology.keys import POLICY, ObjectKey


class PolicySets:
    """Compiled policies by object, and the current `PolicySet` of each namespace asked for since its last change."""

    __slots__ = ("_compiled", "_sets")

    def __init__(self) -> None:
        self._compiled: dict[ObjectKey, tuple[str | None, AccessPolicy]] = {}
        self._sets: dict[str, PolicySet] = {}

    def changed(self, key: ObjectKey, deleted: bool) -> None:
        """A policy was created, changed or deleted: its namespace's set is built again when next asked for."""
        self._sets.pop(key.namespace, None)
        if deleted:
            self._compiled.pop(key, None)

    def of(self, topology: Topology, namespace: str) -> PolicySet:
        """The namespace's compiled policies; the same object until one of them changes."""
        found = self._sets.get(namespace)
        if found is None:
            found = self._sets[namespace] = PolicySet.of(self._compile(topology, namespace))
        return found

    def _compile(self, topology: Topology, namespace: str) -> list[AccessPolicy]:
        """Only policies whose resourceVersion moved are compiled again (a version-less draft always is)."""
        compiled = []
        for key in topology.keys(POLICY, namespace):
            obj = topology.get(key)
            if obj is None:
                continue
            version = (obj.get("metadata") or {}).get("resourceVersion")
            known = self._compiled.get(key)
            if known is not None and version is not None and known[0] == version:
                policy = known[1]
            else:
                policy = compile_policy(obj)
                self._compiled[key] = (version, policy)
            compiled.append(policy)
        return compiled
