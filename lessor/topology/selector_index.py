"""Selectors filed by what they require, so "which selectors match these labels" is not a scan.

Each selector is filed under one anchor it cannot match without: one of its
positive requirements, as `key=value` pairs (an `In`, under each of its
values) or as a key (an `Exists`); else under its namespace alone (the
residue: selectors made only of negative requirements, or of none). A lookup
gathers the selectors filed under the labels' pairs and keys plus the
residue, and tests only those. The anchor is the requirement that `weigh`
finds most selective, so few selectors are tested in vain.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from lessor.model.selectors import Operator, Requirement, Selector
from lessor.topology.keys import ObjectKey

Entry = tuple[ObjectKey, str]
"""One selector: its owner and the field that holds it."""

FieldSelectors = tuple[tuple[str, Selector], ...]

Weigh = Callable[[str, Requirement], int]
"""How many objects of a namespace a positive requirement lets through (fewer is better)."""

# An anchor: (namespace, key, value), (namespace, key) or (namespace,). The
# lengths differ, so the three kinds share one table without colliding.
Slot = tuple[str, ...]


def by_values(namespace: str, requirement: Requirement) -> int:
    """A weight that knows nothing of the objects: fewest values first, `Exists` last."""
    return len(requirement.values) if requirement.operator is Operator.IN else 1 << 30


class SelectorIndex:
    __slots__ = ("_weigh", "_owned", "_selector", "_anchors", "_filed")

    def __init__(self, weigh: Weigh = by_values) -> None:
        self._weigh = weigh
        self._owned: dict[ObjectKey, FieldSelectors] = {}
        self._selector: dict[Entry, Selector] = {}
        self._anchors: dict[Entry, list[Slot]] = {}
        self._filed: dict[Slot, set[Entry]] = {}

    def replace(self, owner: ObjectKey, selectors: FieldSelectors) -> None:
        """Make `selectors` the ones `owner` holds (none removes the owner)."""
        old = self._owned.get(owner, ())
        if old == selectors:
            return
        for field, _ in old:
            entry = (owner, field)
            del self._selector[entry]
            for slot in self._anchors.pop(entry):
                filed = self._filed[slot]
                filed.discard(entry)
                if not filed:
                    del self._filed[slot]
        if selectors:
            self._owned[owner] = selectors
        else:
            self._owned.pop(owner, None)
        for field, selector in selectors:
            entry = (owner, field)
            self._selector[entry] = selector
            self._anchors[entry] = anchors = self._anchor(owner.namespace, selector)
            for slot in anchors:
                self._filed.setdefault(slot, set()).add(entry)

    def selectors(self, owner: ObjectKey) -> FieldSelectors:
        return self._owned.get(owner, ())

    def matching(self, namespace: str, labels: Mapping[str, str]) -> set[Entry]:
        """The entries in `namespace` whose selector matches `labels`."""
        filed = self._filed
        candidates = set(filed.get((namespace,), ()))
        for label, value in labels.items():
            if found := filed.get((namespace, label, value)):
                candidates |= found
            if found := filed.get((namespace, label)):
                candidates |= found
        selector = self._selector
        return {entry for entry in candidates if selector[entry].matches(labels)}

    def owners_matching(self, namespace: str, labels: Mapping[str, str]) -> set[ObjectKey]:
        return {owner for owner, _ in self.matching(namespace, labels)}

    def _anchor(self, namespace: str, selector: Selector) -> list[Slot]:
        positive = [r for r in selector.requirements if r.operator in (Operator.IN, Operator.EXISTS)]
        if not positive:
            return [(namespace,)]
        best = min(positive, key=lambda requirement: self._weigh(namespace, requirement))
        if best.operator is Operator.EXISTS:
            return [(namespace, best.key)]
        return [(namespace, best.key, value) for value in best.values]
