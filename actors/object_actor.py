"""What every actor of one lessor object shares: its address, its status writes, its commits, its manners.

An object actor lives at `prefix/namespace/name` (`lessor.model.keys`), keeps
the object as last seen in `obj`, and is guarded (`guard.Guarded`): a version of
its object it keeps failing on is given up. On top of that it gets:

- `write_status`: a status write that keeps `obj` in step; an object deleted
  meanwhile is not an error (its deletion event ends the actor);
- `commit`: a write under a resourceVersion precondition, retried on conflict
  while the object still is as the actor believed (the commit points of the
  exporter's `leaseRef` and of a pool's handle bindings and deletions);
- `unexpected`: one answer to a message the actor does not know;
- with `honours_ignore`, the ignore label (`lessor.model.labels.IGNORE`): while the object carries it,
  every message but a change of the object is dropped (`while_parked` answers askers), and `started` of the
  subclass returns early (`view.meta.ignored`); the label's removal restarts the actor afresh.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Hashable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from opentelemetry import trace

from lessor.mailbox import Actor
from lessor.model.fields import mapping_at
from lessor.model.keys import split_address
from lessor.model.views import Meta, View
from lessor.model.views.conditions import Condition, StatusView, condition_dicts

from .api import Api, Conflict, Kind, NotFound
from .context import Context
from .guard import Guarded, Parked
from .inflight import InFlight
from .observed import Observed

log = logging.getLogger(__name__)

COMMIT_ATTEMPTS = 5
"""Conflicts in a row a commit retries through before it gives up for now (the next event tries again)."""

T = TypeVar("T")
V = TypeVar("V", bound=View)
Object = Mapping[str, Any]


class ObjectActor(Guarded, Actor):
    """The actor of one object of kind `kind`. Subclasses add their state in `__init__` after `super().__init__`."""

    __slots__ = ("ctx", "namespace", "name", "obj", "parked", "_view")
    kind: Kind
    view_kind: type[StatusView] = StatusView
    """The view of this actor's kind (`LeaseView`, `ClaimView`, ...): `seen_as` builds it, once per version."""
    honours_ignore = False
    """Whether the ignore label on the object makes this actor leave it alone (claims, handles, pools)."""

    def __init__(self, address: str, ctx: Context) -> None:
        self.ctx = ctx
        self.namespace, self.name = split_address(address)
        self.obj: Object | None = None
        self.parked: Parked | None = None
        self._view: View | None = None

    def seen_as(self, kind: type[V]) -> V | None:
        """`obj` through its kind's view (`view_kind`, of which `kind` is the class or a base the caller needs),
        built once per version of `obj`; None when there is no object."""
        if self.obj is None:
            return None
        view = self._view
        if view is None or view.body is not self.obj:
            view = self._view = self.view_kind.of(self.obj)
        if not isinstance(view, kind):
            raise TypeError(f"{type(self).__name__} sees its object as {type(view).__name__}, not {kind.__name__}")
        return view

    async def write_status(self, status: Mapping[str, Any]) -> bool:
        """Patch the object's status and keep the written object; False (and `obj` unchanged) when it is gone."""
        before = _conditions(self.obj)
        try:
            self.obj = await self.ctx.api.patch_status(self.kind, self.namespace, self.name, dict(status))
        except NotFound:
            return False
        if "conditions" in status:
            _condition_events(before, status["conditions"])
        return True

    async def write_status_as_seen(self, status: Mapping[str, Any]) -> Outcome[Object]:
        """Patch the status only if the object is still the version this actor decided from (a
        resourceVersion precondition), so a paused or deposed replica cannot overwrite a newer decision.

        `Lost(fresh)`: someone wrote first; `obj` is now `fresh`, and the caller decides again from it.
        """
        assert self.obj is not None
        version = Meta.of(self.obj).resource_version
        patch: dict[str, Any] = {"status": dict(status)}
        if version:
            patch["metadata"] = {"resourceVersion": version}
        before = _conditions(self.obj)
        try:
            written = await self.ctx.api.merge_patch(self.kind, self.namespace, self.name, patch,
                                                     subresource="status")
        except NotFound:
            return Gone()
        except Conflict:
            fresh = await self.ctx.api.get(self.kind, self.namespace, self.name)
            if fresh is None:
                return Gone()
            self.obj = fresh
            return Lost(fresh)
        self.obj = written
        if "conditions" in status:
            _condition_events(before, status["conditions"])
        return Written(written)

    async def still_parked(self, message: Any) -> bool:
        """The crash guard's parking (`guard.Guarded`), and before it the ignore label's: True when `message`
        is dealt with."""
        if self.honours_ignore and self._left_alone(message):
            return True
        return await super().still_parked(message)

    def _left_alone(self, message: Any) -> bool:
        own = isinstance(message, Observed) and (message.kind, message.namespace, message.name) == (
            self.kind.kind, self.namespace, self.name)
        if own and message.object is not None and Meta.of(message.object).ignored:
            if not self._ignored():
                log.info("%s %s/%s: labelled ignored: left alone until the label goes", self.kind.kind,
                         self.namespace, self.name)
                self.release()  # askers waiting on it look elsewhere
            self.obj = message.object
            return True
        if not self._ignored():
            return False
        if own:  # the label went (a fresh incarnation decides from the object as it is), or the object did
            if message.object is None:
                self.stop()  # deleted while ignored: what it made is left as it is, too
            else:
                self.restart()
            return True
        self.while_parked(message)
        return True

    def _ignored(self) -> bool:
        seen = self.seen_as(View)
        return seen is not None and seen.meta.ignored

    def unexpected(self, message: Any) -> None:
        """A message no case of `receive` knows: a bug in the sender, said loudly but harmlessly."""
        log.warning("%s %s/%s: unexpected message %r", self.kind.kind, self.namespace, self.name, message)



def _conditions(obj: Object | None) -> tuple[Mapping[str, Any], ...]:
    return condition_dicts(mapping_at(obj, "status"))


def _condition_events(before: Any, after: Any) -> None:
    """A span event per condition the write changed (type, status, reason, message): a trace then says why
    a lease waited, where its spans alone say only how long."""
    span = trace.get_current_span()
    if not span.is_recording():
        return
    old = {c.type: c for c in _typed(before)}
    for condition in _typed(after):
        previous = old.get(condition.type)
        if previous is None or (previous.status, previous.reason, previous.message) != (
                condition.status, condition.reason, condition.message):
            span.add_event("condition changed", {"lessor.condition.type": condition.type,
                                                 "lessor.condition.status": condition.status,
                                                 "lessor.condition.reason": condition.reason,
                                                 "lessor.condition.message": condition.message})


def _typed(conditions: Any) -> list[Condition]:
    return [Condition.of(c) for c in conditions or () if isinstance(c, Mapping)]


@dataclass(frozen=True, slots=True)
class Written(Generic[T]):
    """The write went through; `result` is what it returned."""

    result: T


@dataclass(frozen=True, slots=True)
class Gone:
    """The object no longer exists."""


@dataclass(frozen=True, slots=True)
class Lost:
    """Someone else wrote first and the object is no longer as the commit needs it: `fresh` is how it is now."""

    fresh: Object


@dataclass(frozen=True, slots=True)
class GaveUp:
    """Conflicts `COMMIT_ATTEMPTS` times in a row; `fresh` is the object as last read."""

    fresh: Object


Outcome = Written[T] | Gone | Lost | GaveUp


def _bound(write: Callable[[Object], Awaitable[T]], obj: Object) -> Callable[[], Awaitable[T]]:
    return lambda: write(obj)


async def commit(api: Api, kind: Kind, namespace: str, name: str, obj: Object,
                 write: Callable[[Object], Awaitable[T]], still: Callable[[Object], bool], *,
                 attempts: int = COMMIT_ATTEMPTS, inflight: InFlight | None = None,
                 naming: Hashable | None = None) -> Outcome[T]:
    """Write `obj` under its resourceVersion (`write(obj)` carries the precondition); on a conflict read the
    object again and retry while `still(fresh)` says it is as the actor believed.

    With `inflight`, each write outlives a kill of the caller (see `inflight.py`), known there as naming
    `naming` (the object the write decides for).
    Only `Conflict` and `NotFound` are answered here; any other refusal is the caller's.
    """
    for _ in range(attempts):
        try:
            if inflight is not None:
                return Written(await inflight.run((kind.kind, namespace, name), _bound(write, obj), naming=naming))
            return Written(await write(obj))
        except NotFound:
            return Gone()
        except Conflict:  # usually a status write of the object's own agent or actor: read again
            fresh = await api.get(kind, namespace, name)
            if fresh is None:
                return Gone()
            if not still(fresh):
                return Lost(fresh)
            obj = fresh
    return GaveUp(obj)
