"""Watching the kinds that ResourceProviders create, so created resources reach their handle actors.

One informer per (apiVersion, kind), cluster-wide (a provider's override may
place resources in any namespace), limited by label selector to the objects
labelled `lessor.dev/resource-handle-name`: the operator never lists or
caches anybody else's ConfigMaps. A kind is watched from the first time it is
seen:

- in a ResourceProvider whose apiVersion and kind are fixed (the operator
  looks at every provider event), so that at start-up the resources that
  exist are listed before the topology announces the handles;
- in a `WatchKind` that a handle actor tells the `kinds` actor before it
  applies a resource (covers providers whose override renders the kind).

A kind the API server does not serve (yet) is not remembered: the next
sighting tries again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

from lessor.actors.provisioning.protocol import WatchKind
from lessor.actors.provisioning.provider import provider_from
from lessor.gateway import LESSOR_RESOURCES, ApiError, Gateway, Informer
from lessor.gateway.informer import Handler
from lessor.mailbox import Actor
from lessor.mailbox.lanes import READING, tenant_context
from lessor.model.labels import HANDLE_NAME

log = logging.getLogger(__name__)

KindKey = tuple[str, str]  # (apiVersion, kind)
_ALREADY_WATCHED = frozenset((r.api_version, r.kind) for r in LESSOR_RESOURCES)


class CreatedKinds:
    """The informers of created kinds; started in the operator's task group."""

    def __init__(self, gateway: Gateway, handler: Handler, *, inactivity_timeout: float) -> None:
        self.gateway = gateway
        self.handler = handler
        self.inactivity_timeout = inactivity_timeout
        self.informers: dict[KindKey, Informer] = {}
        self._starting: dict[KindKey, asyncio.Task[None]] = {}
        self._tasks: asyncio.TaskGroup | None = None

    def attach(self, tasks: asyncio.TaskGroup) -> None:
        self._tasks = tasks

    def watch_provider(self, provider: Mapping[str, Any]) -> None:
        view = provider_from(provider)
        if view.api_version and view.kind:
            self.watch(view.api_version, view.kind)

    def watch(self, api_version: str, kind: str) -> None:
        """Start watching the kind unless it is watched or starting; never waits."""
        key = (api_version, kind)
        if key in self.informers or key in self._starting or key in _ALREADY_WATCHED or self._tasks is None:
            return
        self._starting[key] = self._tasks.create_task(self._start(key), name=f"watch {api_version} {kind}")

    async def _start(self, key: KindKey) -> None:
        try:
            resource = await self.gateway.resolve(*key)
        except (LookupError, ApiError) as error:
            log.info("cannot watch %s %s (yet): %s", *key, error)
            return
        finally:
            self._starting.pop(key, None)
        informer = Informer(self.gateway, resource, self.handler, label_selector=HANDLE_NAME,
                            inactivity_timeout=self.inactivity_timeout)
        self.informers[key] = informer
        assert self._tasks is not None
        self._tasks.create_task(informer.run(), name=f"informer {resource.kind}",
                                context=tenant_context(READING))  # read as it comes (`lanes.Reading`)
        log.info("watching %s %s labelled %s", *key, HANDLE_NAME)

    async def synced(self, timeout: float) -> None:
        """Wait (at most `timeout`) until the kinds seen so far have listed once."""
        async def all_synced() -> None:
            while self._starting:
                await asyncio.gather(*self._starting.values(), return_exceptions=True)
            await asyncio.gather(*(informer.synced.wait() for informer in self.informers.values()))

        try:  # asyncio.timeout, not wait_for: 3.11's wait_for can swallow a cancellation (a SIGTERM) that
            # arrives as the wait ends, and the operator then never stops
            async with asyncio.timeout(timeout):
                await all_synced()
        except TimeoutError:
            log.warning("created kinds not listed within %.0fs: %s", timeout,
                        ", ".join(f"{k[0]} {k[1]}" for k, i in self.informers.items() if not i.synced.is_set()))


class KindsActor(Actor):
    """The `kinds` address: handle actors tell it `WatchKind` before they apply a resource."""

    __slots__ = ("kinds",)

    def __init__(self, kinds: CreatedKinds) -> None:
        self.kinds = kinds

    async def receive(self, message: Any) -> Any:
        match message:
            case WatchKind(api_version=api_version, kind=kind):
                self.kinds.watch(api_version, kind)
            case _:
                raise TypeError(f"the kinds actor does not handle {type(message).__name__}")
        return None
