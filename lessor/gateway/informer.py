"""List, then watch from that resourceVersion; relist on 410 Gone; reconnect silent streams.

A failed list or watch is tried again after a short, jittered backoff that a list or a watch that succeeds
resets: its ceiling is `RETRY_CEILING` while the API server answers at all (a restarting one answers 429 and
503 for a few seconds, and says how long to wait: Retry-After, honoured), `REFUSED_CEILING` only while it does
not, so that an informer is back within seconds of the API server being ready again.

The informer keeps the last version of every object it delivered, so a relist
can tell the consumer exactly what changed while it was not watching,
including objects that vanished (delivered as DELETED with their last state).
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

import orjson
from opentelemetry import context as otel_context
from opentelemetry.context import Context

from lessor.gateway.client import ApiError, Gateway, failure_code
from lessor.gateway.resources import Resource
from lessor.gateway.retries import answer_reason, failure_reason
from lessor.gateway.strings import STRINGS
from lessor.model.fields import mapping_at

log = logging.getLogger(__name__)

RETRY_CEILING = 2.0
"""The longest wait before a list or watch is tried again while the API server answers (a 5xx, a 429)."""
REFUSED_CEILING = 4.0
"""The same while it answers nothing (connections refused, timeouts): a little longer, yet short enough that
an informer waiting when the API server becomes ready lists within seconds."""
RETRY_AFTER_CAP = 10.0

Key = tuple[str, str]  # (namespace, name)
# An annotation kubectl writes (a copy of the whole object) that lessor never reads.
LAST_APPLIED = "kubectl.kubernetes.io/last-applied-configuration"


def slim(obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as it is cached, changed in place: what lessor never reads dropped (`_drop`), and its string
    values shared with the other cached objects' (`strings`)."""
    return STRINGS.share(_drop(obj))


def _drop(obj: dict[str, Any]) -> dict[str, Any]:
    """Drop, in place, what lessor never reads before the object is cached: `managedFields` (more than
    half of a typical object) and kubectl's last-applied copy. lessor never PUTs a cached object back
    (it patches and applies), so nothing is lost on the server."""
    meta = obj.get("metadata")
    if isinstance(meta, dict):
        meta.pop("managedFields", None)
        annotations = meta.get("annotations")
        if isinstance(annotations, dict) and annotations.pop(LAST_APPLIED, None) is not None and not annotations:
            del meta["annotations"]
    return obj


def _compacted(page: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """A list page's objects slimmed and rebuilt once the originals are freed (the caller's list, emptied
    here, holds their only references).

    Slimming in place would leave the dropped fields' memory as holes between the cached objects, which
    the allocator cannot hand back (at 10k exporters about 3 KB each); the rebuilt copies are made once
    the page is freed, so they fill that space densely. Watch events are only slimmed: rebuilding each one
    too made no difference beyond noise (20k exporters, four runs) and costs CPU on every event."""
    kept = orjson.dumps([_drop(obj) for obj in page])
    page.clear()
    return [STRINGS.share(obj) for obj in cast(list[dict[str, Any]], orjson.loads(kept))]


@dataclass(frozen=True)
class WatchEvent:
    type: str  # ADDED, MODIFIED or DELETED
    object: dict[str, Any]
    previous: dict[str, Any] | None = None
    """MODIFIED: the object as the cache held it before, for a handler that must tell what changed."""

    @property
    def key(self) -> Key:
        return _key(self.object)


Handler = Callable[[WatchEvent], Awaitable[None] | None]


class _Expired(Exception):
    """The resourceVersion we watch from is gone (410): relist."""


class Informer:
    def __init__(
        self,
        gateway: Gateway,
        resource: Resource,
        handler: Handler,
        *,
        namespace: str | None = None,
        label_selector: str | None = None,
        inactivity_timeout: float = 120.0,
        watch_timeout: int = 300,
        retry_delay: float = 0.5,
    ) -> None:
        self.gateway = gateway
        self.resource = resource
        self.namespace = namespace
        self.label_selector = label_selector
        self.inactivity_timeout = inactivity_timeout
        self.watch_timeout = watch_timeout
        self.retry_delay = retry_delay
        self._handler = handler
        self.store: dict[Key, dict[str, Any]] = {}
        self.resource_version: str | None = None
        self.synced = asyncio.Event()
        self.relists = 0
        self._refreshes: list[asyncio.Future[None]] = []  # `refresh` callers, answered by the next listing
        self._refresh_in: Context | None = None  # the trace the asked-for listing belongs to
        self._watching: Any = None  # the watch response being read, which `refresh` closes
        self.reconnects = 0
        self.expirations = 0
        self.handler_failures = 0
        self._failures = 0  # lists and watches failed since the last that succeeded

    async def run(self, *, first_list_in: Context | None = None) -> None:
        """Run until cancelled; transient errors are retried with backoff, never raised. `first_list_in`: the
        trace the first listing's requests belong to (the operator's start-up), rather than a root each."""
        self._failures = 0
        while True:
            try:
                if self.resource_version is None or self._refreshes:
                    asked, self._refreshes = self._refreshes, []  # asked before this listing began
                    in_trace = first_list_in if first_list_in is not None else self._refresh_in if asked else None
                    token = otel_context.attach(in_trace) if in_trace is not None else None
                    try:
                        await self._relist()
                    finally:
                        if token is not None:
                            otel_context.detach(token)
                            first_list_in = None
                    for waiter in asked:
                        if not waiter.done():
                            waiter.set_result(None)
                await self._watch()
            except _Expired:
                self.expirations += 1
                self.gateway.watch_failed(self.resource.kind, "410")
                self.resource_version = None
            except asyncio.CancelledError:
                raise
            except Exception as err:  # network, 5xx, auth: keep the last state, back off, go on
                self._failures += 1
                code = _code(err)
                self.gateway.watch_failed(self.resource.kind, code)
                delay = self._backoff(err)
                reason = _transient_reason(err)
                if reason is not None:  # the API server's bad minute: one line per outage (`Outages`)
                    self.gateway.retried(reason, f"{self.resource.kind} list/watch: {err}")
                    log.debug("informer %s: %s; retrying in %.1fs", self.resource.kind, err, delay)
                else:
                    log.warning("informer %s: %s; retrying in %.1fs", self.resource.kind, err, delay)
                await asyncio.sleep(delay)

    def _backoff(self, err: Exception) -> float:
        """The wait before trying again: what the answer asked for, else doubling from `retry_delay` per
        failure since the last list or watch that succeeded, up to a ceiling that is short while the API
        server answers at all."""
        asked = err.retry_after if isinstance(err, ApiError) else None
        if asked is not None:
            return min(RETRY_AFTER_CAP, asked) * random.uniform(1.0, 1.2)
        ceiling = RETRY_CEILING if isinstance(err, ApiError) else REFUSED_CEILING
        return float(min(ceiling, self.retry_delay * 2 ** min(self._failures - 1, 8)) * random.uniform(0.5, 1.0))

    async def refresh(self, *, in_trace: Context | None = None) -> None:
        """List afresh (a consistent read), deliver what changed since the cache's last event, and watch on
        from there; return once that listing is delivered. A new leader calls it before it decides anything,
        so that its cache holds every write the API server admitted before its term began, although the watch
        may deliver some of them late (a busy replica reads its watch late): a claim it binds then is one
        the deposed leader had not bound already. `in_trace`: the trace its requests belong to."""
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._refresh_in = in_trace
        self._refreshes.append(waiter)
        if self._watching is not None:
            self._watching.close()  # the watch ends; the loop lists, then watches again
        await waiter

    async def _relist(self) -> None:
        seen: set[Key] = set()
        rv: str | None = None
        async for page, version in self.gateway.list_pages(self.resource, self.namespace,
                                                           label_selector=self.label_selector):
            rv = version or rv
            for obj in _compacted(page):
                event_type = "ADDED"
                key = _key(obj)
                seen.add(key)
                old = self.store.get(key)
                if old is not None:
                    if _version(old) == _version(obj):
                        continue
                    event_type = "MODIFIED"
                await self._deliver(WatchEvent(event_type, obj))
        self.relists += 1
        self._failures = 0  # a list that succeeds: the API server is back, the next failure waits briefly
        for key in [k for k in self.store if k not in seen]:
            await self._deliver(WatchEvent("DELETED", self.store[key]))
        self.resource_version = rv
        self.synced.set()

    async def _watch(self) -> None:
        params = {
            "watch": "true",
            "resourceVersion": self.resource_version,
            "allowWatchBookmarks": "true",
            "timeoutSeconds": int(self.watch_timeout * random.uniform(0.8, 1.0)),
            "labelSelector": self.label_selector,
        }
        # asyncio.timeout, not wait_for: Python 3.11's wait_for swallows a cancellation that arrives as the
        # awaited call completes, and an informer whose cancellation was swallowed never lets the operator stop.
        if self._refreshes:
            return  # a listing is asked for first
        try:
            async with asyncio.timeout(self.inactivity_timeout):
                resp = await self.gateway.stream(self.resource.kind, self.resource.path(self.namespace), params)
        except TimeoutError:  # no answer at all: the API server is stopped or unreachable
            self.reconnects += 1
            self.gateway.watch_failed(self.resource.kind, "timeout")
            self.gateway.reachability.failed(f"watch {self.resource.plural}: no answer in {self.inactivity_timeout:g}s")
            return
        except ApiError as err:
            if err.gone:
                raise _Expired() from err
            raise
        self._failures = 0  # a watch that opens: the same
        self._watching = resp
        try:
            while not self._refreshes:
                try:
                    async with asyncio.timeout(self.inactivity_timeout):
                        line = await resp.content.readline()
                except TimeoutError:
                    self.reconnects += 1
                    log.info("informer %s: no event for %.0fs; reconnecting", self.resource.kind,
                             self.inactivity_timeout)
                    return
                except Exception:
                    if self._refreshes:
                        return  # closed by `refresh`
                    raise
                if not line:
                    return  # the server ended the watch (timeoutSeconds): resume from our resourceVersion
                await self._on_line(line)
        finally:
            self._watching = None
            resp.close()

    async def _on_line(self, line: bytes) -> None:
        self.gateway.reachability.answered()
        event = orjson.loads(line)
        kind, obj = event.get("type"), event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise _Expired()
            raise ApiError(int(obj.get("code") or 500), obj, f"WATCH {self.resource.plural}")
        if kind == "BOOKMARK":
            self.resource_version = _version(obj)
            return
        obj.setdefault("apiVersion", self.resource.api_version)
        obj.setdefault("kind", self.resource.kind)
        await self._deliver(WatchEvent(kind, slim(obj)))
        self.resource_version = _version(obj)

    async def _deliver(self, event: WatchEvent) -> None:
        """Store, then hand over. A handler that fails on one object is logged and the stream goes on:
        an error that one object's content causes would fail again at every relist, and hold back
        every object after it (a poison pill)."""
        key = _key(event.object)
        if event.type == "DELETED":
            self.store.pop(key, None)
        else:
            previous = self.store.get(key)
            self.store[key] = event.object
            if previous is not None and event.type == "MODIFIED":
                event = WatchEvent(event.type, event.object, previous)
        try:
            result = self._handler(event)
            if result is not None:
                await result
        except asyncio.CancelledError:
            raise
        except Exception:
            self.handler_failures += 1
            log.exception("informer %s: handling %s %s/%s failed; going on with the next event",
                          self.resource.kind, event.type, *key)


def _code(err: Exception) -> str:
    """The label a failed watch is counted under."""
    if isinstance(err, ApiError):
        return str(err.status)
    return failure_code(err)


def _transient_reason(err: Exception) -> str | None:
    """The reason a failed list or watch is the API server's bad minute (retries.py), else None."""
    if isinstance(err, ApiError):
        return answer_reason(err.status, err.body)
    return failure_reason(err)


def _key(obj: Mapping[str, Any]) -> Key:
    """(namespace, name), read without building a `Meta`: every event of every kind comes here."""
    meta = mapping_at(obj, "metadata")
    return str(meta.get("namespace") or ""), str(meta.get("name") or "")


def _version(obj: Mapping[str, Any]) -> str:
    return str(mapping_at(obj, "metadata").get("resourceVersion") or "")
