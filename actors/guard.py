"""The crash guard: an actor that keeps failing on one version of its object gives up on that version.

A handler that raises is restarted by its supervisor, which cures what
goes away (a conflict, a lost answer). A failure caused by what the object
says (a date that overflows, a value nobody foresaw) comes back on every
try: the actor would crash-loop, and keep what it holds. So after
`GIVE_UP_AFTER` failures in a row on the same `resourceVersion` of its
object (`lessor.mailbox` counts them, `Actor.failed` asks), the actor:

- writes a condition on the object: `Ready=False`, reason `InternalError`,
  with the error's message (`Valid=False` for the kinds whose condition is
  `Valid`: clients, policies, providers);
- releases what it holds, as each actor defines it (a lease gives back its
  exporter and offers; a claim keeps its handle, a handle its resources);
- ignores that version: the next change of the object (a new
  resourceVersion other than the one its own condition write made, or a
  change of a kind it names in `wake_kinds`) restarts it, to try afresh.

Failures of the API server, the network or a timeout are not the object's
fault: they are never given up on, and restart as always.
"""

from __future__ import annotations

import logging
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from lessor.mailbox import AskTimeout
from lessor.model.views import Meta
from lessor.model.views.conditions import StatusView

from .api import ApiFailure, Kind
from .conditions import READY, merge_condition, new_condition, remove_condition
from .context import Context
from .events import record_transitions
from .observed import Observed

log = logging.getLogger(__name__)

GIVE_UP_AFTER = 3
"""Failures in a row on one version of an object before its actor gives up on that version."""

INTERNAL_ERROR = "InternalError"
_TRANSIENT = (ApiFailure, OSError, TimeoutError, AskTimeout)
_TRANSPORT_MODULES = frozenset({"aiohttp", "ssl"})


@dataclass(frozen=True, slots=True)
class Parked:
    """An actor that gave up on these versions of its object (the failing one, and its own condition write's)."""

    kind: str
    versions: frozenset[str]
    wake_kinds: frozenset[str] = frozenset()


def version_of(obj: Mapping[str, Any] | None) -> str | None:
    """The object's resourceVersion: what `failure_key` counts failures in a row by."""
    return Meta.of(obj).resource_version or None


def gives_up(error: Exception, attempts: int) -> bool:
    """Whether this failure is the object's doing and has come back often enough to stop trying."""
    return attempts >= GIVE_UP_AFTER and not _transient(error)


def _transient(error: Exception) -> bool:
    """The API server, the connection to it (the HTTP client's errors, named by module: actors know no HTTP)
    or a timeout: worth retrying, whatever the object says."""
    return isinstance(error, _TRANSIENT) or any(
        cls.__module__.partition(".")[0] in _TRANSPORT_MODULES for cls in type(error).__mro__)


async def park(ctx: Context, kind: Kind, namespace: str, name: str, obj: Mapping[str, Any] | None,
               error: Exception, attempts: int, *, condition: str = READY,
               wake_kinds: Collection[str] = ()) -> Parked:
    """Write the `InternalError` condition on the object and return what the actor is parked on."""
    version = version_of(obj)
    message = (f"lessor failed {attempts} times on resourceVersion {version} of this {kind.kind} and stopped "
               f"trying it until the object changes: {type(error).__name__}: {error}")
    log.error("%s %s/%s: %s", kind.kind, namespace, name, message, exc_info=error)
    versions = {version} if version is not None else set()
    seen = StatusView.maybe(obj)
    before = seen.condition_dicts if seen is not None else ()
    conditions = merge_condition(before, new_condition(
        condition, False, INTERNAL_ERROR, message, now=ctx.now(),
        observed_generation=seen.meta.generation if seen is not None else None))
    try:
        written = await ctx.api.patch_status(kind, namespace, name, {"conditions": conditions})
        record_transitions(ctx.events, kind, written, before, conditions)
        if (after := version_of(written)) is not None:
            versions.add(after)
    except ApiFailure as failure:  # deleted, or the API is down: parked all the same, the next change wakes it
        log.warning("%s %s/%s: writing %s failed: %s", kind.kind, namespace, name, INTERNAL_ERROR, failure)
    return Parked(kind.kind, frozenset(versions), frozenset(wake_kinds))


def wakes(parked: Parked, message: Any, namespace: str, name: str) -> bool:
    """Whether `message` is a change that ends the parking: a new version of the object (or its deletion),
    or any change of a kind in `wake_kinds`."""
    if not isinstance(message, Observed):
        return False
    if message.kind in parked.wake_kinds:
        return True
    if (message.kind, message.namespace, message.name) != (parked.kind, namespace, name):
        return False
    return message.object is None or version_of(message.object) not in parked.versions


class Guarded:
    """The crash guard's hooks for an actor of one object, mixed in before `Actor`.

    The actor has `ctx`, `namespace`, `name`, `obj` (its object as last seen) and a `parked` slot
    (None), sets `kind` (its object's kind), and awaits `still_parked(message)` first in `receive`.
    `release` gives back what it holds; `condition` and `wake_kinds` may be overridden.
    """

    __slots__ = ()
    kind: Kind
    condition = READY
    wake_kinds: tuple[str, ...] = ()
    ctx: Context
    namespace: str
    name: str
    obj: Mapping[str, Any] | None
    parked: Parked | None

    def failure_key(self) -> Any:
        return version_of(self.obj)

    async def failed(self, error: Exception, attempts: int) -> bool:
        if not gives_up(error, attempts) or self.obj is None:
            return False
        self.release()
        # The slot is the actor's (ObjectActor's), which mypy cannot see from this mixin.
        self.parked = await park(  # type: ignore[misc]
            self.ctx, self.kind, self.namespace, self.name, self.obj, error, attempts,
            condition=self.condition, wake_kinds=self.wake_kinds)
        return True

    def release(self) -> None:
        """Give back what this actor holds for its object (nothing, unless the actor says otherwise)."""

    def while_parked(self, message: Any) -> None:
        """A message to a parked actor (other than the change that wakes it): ignored unless overridden."""

    async def still_parked(self, message: Any) -> bool:
        """True when the actor is parked and `message` is dealt with. A change that wakes it takes the
        `InternalError` condition off (the next incarnation says anew what it finds) and restarts it."""
        if self.parked is None:
            return False
        if not wakes(self.parked, message, self.namespace, self.name):
            self.while_parked(message)
            return True
        own = (message.kind, message.namespace, message.name) == (self.parked.kind, self.namespace, self.name)
        latest = StatusView.maybe(message.object if own else self.obj)
        found = latest.condition(self.condition) if latest is not None else None
        if latest is not None and found is not None and found.reason == INTERNAL_ERROR:
            try:
                await self.ctx.api.patch_status(
                    self.kind, self.namespace, self.name,
                    {"conditions": remove_condition(latest.condition_dicts, self.condition)})
            except ApiFailure as failure:
                log.warning("%s %s/%s: clearing %s failed: %s", self.kind.kind, self.namespace, self.name,
                            INTERNAL_ERROR, failure)
        self.restart()  # type: ignore[attr-defined]  # Actor.restart: the next incarnation tries afresh
        return True
