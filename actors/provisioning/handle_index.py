"""A pool's unbound handles indexed by what claims match on, so a bind looks at one bucket, not every handle.

`matches_handle` (claim_spec) is the rule: same providers in order, each
template equal to the handle's except at the provider's `matchIgnore` paths.
That relation is not an equivalence (an ignored `{x: 1}` matches a missing
key, which does not match `{}`), so the index key is only a necessary
condition: the set of (pointer, value) of every scalar leaf no `matchIgnore`
pattern covers. Two templates that match have the same key; the bucket's
handles are then checked with `matches_handle` itself, in the pool's order of
preference, and the first that passes is taken. Buckets are kept sorted as
handles come and go (stale entries are skipped and compacted away), so a bind
costs O(1) amortised when the pool's handles match, instead of a scan.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterator, Mapping
from functools import lru_cache
from typing import Any

from lessor.model.fields import deleting
from lessor.model.handles import claim_of
from lessor.model.jsonpatch import escape
from lessor.model.views.provisioning import HandleView, provider_name
from lessor.templates.regexes import Regex, compile_regex

from .claim_spec import ClaimSpec, matches_handle

Patterns = tuple[tuple[str, ...], ...]
"""Per resource of a claim, its provider's `matchIgnore` patterns."""
Key = tuple[Any, ...]
Preference = tuple[Any, ...]


@lru_cache(maxsize=256)
def _regexes(patterns: tuple[str, ...]) -> tuple[Regex, ...]:
    return tuple(compile_regex(pattern) for pattern in patterns)


def _scalar(value: Any) -> Any:
    """A hashable stand-in with `json_equal`'s equality: `1 == 1.0`, `True != 1`."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, (int, float)):
        return ("number", float(value))
    return ("other", value)


def _leaves(value: Any, path: str, ignored: tuple[Regex, ...]) -> Iterator[tuple[str, Any]]:
    if any(regex.fullmatch(path) for regex in ignored):
        return
    if isinstance(value, Mapping):
        for key, item in value.items():
            yield from _leaves(item, f"{path}/{escape(str(key))}", ignored)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _leaves(item, f"{path}/{index}", ignored)
    else:
        yield path, _scalar(value)


def template_key(template: Any, patterns: tuple[str, ...]) -> frozenset[tuple[str, Any]]:
    """The scalar leaves of `template` no pattern covers: equal for any two templates `matches_ignoring` accepts."""
    return frozenset(_leaves(template, "", _regexes(patterns)))


def claim_key(spec: ClaimSpec, patterns: Patterns) -> Key:
    return tuple((resource.provider.name if resource.provider else None, template_key(resource.template, ignore))
                 for resource, ignore in zip(spec.resources, patterns))


def handle_key(handle: Mapping[str, Any], patterns: Patterns) -> Key | None:
    resources = HandleView.of(handle).resources
    if len(resources) != len(patterns):
        return None  # matches no claim with these patterns
    return tuple((provider_name(theirs), template_key(theirs.get("template") or {}, ignore))
                 for theirs, ignore in zip(resources, patterns))


def patterns_of(spec: ClaimSpec) -> Patterns:
    return tuple(resource.provider.match_ignore if resource.provider else () for resource in spec.resources)


class _Index:
    """The unbound handles bucketed by the key for one tuple of patterns."""

    __slots__ = ("patterns", "buckets", "entries")

    def __init__(self, patterns: Patterns) -> None:
        self.patterns = patterns
        self.buckets: dict[Key, list[tuple[Preference, str]]] = {}
        self.entries: dict[str, tuple[Key, Preference]] = {}  # live entries: name -> (key, preference)

    def put(self, name: str, handle: Mapping[str, Any] | None, preference: Preference | None) -> None:
        if handle is None or preference is None:
            self.entries.pop(name, None)  # its bucket entry goes stale
            return
        key = handle_key(handle, self.patterns)
        if key is None:
            self.entries.pop(name, None)
            return
        if self.entries.get(name) == (key, preference):
            return
        self.entries[name] = (key, preference)
        bucket = self.buckets.setdefault(key, [])
        bisect.insort(bucket, (preference, name))
        if len(bucket) > 2 * len(self.entries) + 64:  # mostly stale: compact
            self.buckets[key] = list(self._live(key, bucket))

    def _live(self, key: Key, bucket: list[tuple[Preference, str]]) -> Iterator[tuple[Preference, str]]:
        seen: set[str] = set()
        for preference, name in bucket:
            if self.entries.get(name) == (key, preference) and name not in seen:
                seen.add(name)
                yield preference, name

    def candidates(self, key: Key) -> Iterator[str]:
        bucket = self.buckets.get(key)
        if not bucket:
            return
        stale = 0  # the most preferred handles are bound first: drop their stale entries once, not per claim
        while stale < len(bucket) and self.entries.get(bucket[stale][1]) != (key, bucket[stale][0]):
            stale += 1
        del bucket[:stale]
        for _, name in self._live(key, bucket):
            yield name


class UnboundHandles:
    """The pool's free handles (neither bound nor being deleted), findable by claim in preference order."""

    __slots__ = ("free", "preference", "indexes")

    def __init__(self, preference: Callable[[Mapping[str, Any]], Preference]) -> None:
        self.free: dict[str, Mapping[str, Any]] = {}
        self.preference = preference
        self.indexes: dict[Patterns, _Index] = {}

    def put(self, name: str, handle: Mapping[str, Any] | None) -> None:
        """`handle` as now seen (None: gone, bound or being deleted)."""
        if handle is None:
            if self.free.pop(name, None) is not None:
                for index in self.indexes.values():
                    index.put(name, None, None)
            return
        self.free[name] = handle
        preference = self.preference(handle)
        for index in self.indexes.values():
            index.put(name, handle, preference)

    def best(self, spec: ClaimSpec, taken: set[str]) -> Mapping[str, Any] | None:
        """The most preferred free handle matching the claim, not in `taken`."""
        if not spec.valid:
            return None
        patterns = patterns_of(spec)
        index = self.indexes.get(patterns)
        if index is None:
            if len(self.indexes) >= 16:  # claims with other providers' patterns: keep a few indexes only
                self.indexes.clear()
            index = self.indexes[patterns] = _Index(patterns)
            for name, handle in self.free.items():
                index.put(name, handle, self.preference(handle))
        for name in index.candidates(claim_key(spec, patterns)):
            handle = self.free[name]
            if name not in taken and matches_handle(spec, handle):
                return handle
        return None


class IndexedHandles(dict[str, Mapping[str, Any]]):
    """The pool's handles by name (bound or not), keeping `unbound` and the handle bound to each claim in step
    with every assignment and removal."""

    def __init__(self, free: Callable[[Mapping[str, Any]], bool],
                 preference: Callable[[Mapping[str, Any]], Preference]) -> None:
        super().__init__()
        self.is_free = free
        self.unbound = UnboundHandles(preference)
        self._claims: dict[str, tuple[str, str]] = {}  # handle -> the claim it is bound to (not being deleted)
        self._bound: dict[tuple[str, str], set[str]] = {}

    def __setitem__(self, name: str, handle: Mapping[str, Any]) -> None:
        super().__setitem__(name, handle)
        self.unbound.put(name, handle if self.is_free(handle) else None)
        self._unbind(name)
        claim = claim_of(handle)
        if claim is not None and not deleting(handle):
            self._claims[name] = claim
            self._bound.setdefault(claim, set()).add(name)

    def __delitem__(self, name: str) -> None:
        super().__delitem__(name)
        self.unbound.put(name, None)
        self._unbind(name)

    def pop(self, name: str, *default: Any) -> Any:
        self.unbound.put(name, None)
        self._unbind(name)
        return super().pop(name, *default)

    def _unbind(self, name: str) -> None:
        claim = self._claims.pop(name, None)
        if claim is not None and (names := self._bound.get(claim)) is not None:
            names.discard(name)
            if not names:
                del self._bound[claim]

    def bound_to(self, claim: tuple[str, str]) -> Mapping[str, Any] | None:
        """A handle bound to `claim` and not being deleted (the first by name if, wrongly, several are)."""
        names = self._bound.get(claim)
        return self[min(names)] if names else None
