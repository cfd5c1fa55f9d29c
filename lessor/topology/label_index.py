"""Inverted index from labels to objects, so a selector query never scans a namespace.

For one kind it keeps, per namespace, `key=value` → objects and `key` → objects.
A query intersects the sets of the selector's positive requirements (`In`: the
union over its values; `Exists`: the key's set), smallest first, then subtracts
those of its negative ones (`NotIn`, `DoesNotExist`). Only a selector without a
positive requirement starts from every object in the namespace. The cost
follows the sizes of the sets involved, not the number of objects.
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from typing import Any

from lessor.model.selectors import Operator, Requirement, Selector
from lessor.topology.keys import ObjectKey

Labels = Mapping[str, str]

# A slot that one object alone fills (a serial number, a hostname: common on
# exporters) holds that object's key instead of a one-element set, which would
# cost some 200 bytes per exporter.
Members = ObjectKey | set[ObjectKey]


class LabelIndex:
    __slots__ = ("_pairs", "_keys")

    def __init__(self) -> None:
        self._pairs: dict[tuple[str, str, str], Members] = {}
        self._keys: dict[tuple[str, str], Members] = {}

    def update(self, key: ObjectKey, old: Labels, new: Labels) -> None:
        """Move `key` from its old labels to its new ones ({} for absent)."""
        if old == new:
            return
        namespace = key.namespace
        for label, value in old.items():
            if new.get(label) != value:
                _remove(self._pairs, (namespace, label, value), key)
                if label not in new:
                    _remove(self._keys, (namespace, label), key)
        for label, value in new.items():
            if old.get(label) != value:
                _add(self._pairs, (namespace, label, value), key)
                if label not in old:
                    _add(self._keys, (namespace, label), key)

    def weigh(self, namespace: str, requirement: Requirement) -> int:
        """How many objects of `namespace` a positive requirement lets through."""
        if requirement.operator is Operator.EXISTS:
            return _size(self._keys.get((namespace, requirement.key)))
        return sum(_size(self._pairs.get((namespace, requirement.key, value))) for value in requirement.values)

    def select(self, namespace: str, selector: Selector, everything: Set[ObjectKey]) -> set[ObjectKey]:
        """The objects of `namespace` that `selector` matches; `everything` is all of them."""
        if selector.nothing:
            return set()
        positive: list[list[Set[ObjectKey]]] = []  # per requirement, the sets it lets through
        negative: list[Set[ObjectKey]] = []
        for requirement in selector.requirements:
            label = requirement.key
            if requirement.operator in (Operator.IN, Operator.NOT_IN):
                found = [_as_set(m) for v in requirement.values if (m := self._pairs.get((namespace, label, v)))]
                if requirement.operator is Operator.NOT_IN:
                    negative.extend(found)
                elif not found:
                    return set()
                else:
                    positive.append(found)
            else:
                members = self._keys.get((namespace, label))
                if requirement.operator is Operator.DOES_NOT_EXIST:
                    if members:
                        negative.append(_as_set(members))
                elif not members:
                    return set()
                else:
                    positive.append([_as_set(members)])
        if len(positive) > 1:
            positive.sort(key=lambda sets: sum(map(len, sets)))
            # Intersect the two smallest without copying either, then narrow the result:
            # each step walks the smaller side, never a whole set of the index.
            first, second, *rest = positive
            result = set().union(*(a & b for a in first for b in second))
            for sets in rest:
                if not result:
                    break
                result = set().union(*(result & members for members in sets))
        elif positive:
            result = set().union(*positive[0])
        else:
            result = set(everything)
        for excluded in negative:
            if not result:
                break
            result = result - excluded  # CPython walks the smaller of the two sets here
        return result


def _add(table: dict[Any, Members], slot: tuple[str, ...], key: ObjectKey) -> None:
    members = table.get(slot)
    if members is None:
        table[slot] = key
    elif isinstance(members, set):
        members.add(key)
    else:
        table[slot] = {members, key}


def _remove(table: dict[Any, Members], slot: tuple[str, ...], key: ObjectKey) -> None:
    members = table[slot]
    if not isinstance(members, set):
        del table[slot]
        return
    members.discard(key)
    if len(members) == 1:
        table[slot] = next(iter(members))


def _as_set(members: Members) -> Set[ObjectKey]:
    return members if isinstance(members, set) else frozenset((members,))


def _size(members: Members | None) -> int:
    if members is None:
        return 0
    return len(members) if isinstance(members, set) else 1
