"""The router: a client's `Dial` and its exporter's `Listen` meet on one `RouterService.Stream` pair.

`Dial` (a client, its own Ready lease) makes two one-use tokens, one per side: it tells the exporter its
token through its open `Listen` stream, and answers the client the same endpoint and the other token, so a
client cannot take both sides of its own pair. Both then open `RouterService.Stream` with their token as
bearer; the router pairs the two calls and copies each side's frames to the other, through a queue per
direction bounded in frames and in bytes (`BYTES_IN_FLIGHT`: a reader that does not read slows its writer,
nothing is dropped, and the server holds no more), until either side's call ends, or the lease ends or
moves to another exporter (both streams are then closed). A side that finishes sending half-closes: the
other side gets a GOAWAY frame and may still send.

In memory, on the replica that answered `Dial`: the exporter's `Listen` and both streams must reach the
same replica (the leader; see docs/jumpstarter-grpc.md).
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

import logging

import grpc
from jumpstarter_protocol.jumpstarter.v1 import jumpstarter_pb2, router_pb2, router_pb2_grpc

from lessor.health.memory import malloc_trim

log = logging.getLogger(__name__)

FRAMES_IN_FLIGHT = 64
"""Frames one direction holds before its writer waits for the reader."""

BYTES_IN_FLIGHT = 8 * 1024 * 1024
"""Payload bytes one direction holds before its writer waits for the reader (a frame may be 4 MiB: 64 of
them were 245 MB held for a reader that never read)."""

_EOF = object()
"""In a side's queue: the other side finished sending (it is told with a GOAWAY frame, and may still send)."""

PAIRING_TIMEOUT = 30.0
"""Seconds a token waits for its other side (the exporter may take a moment to dial in)."""

PAIRS_PER_CLIENT = 32
"""Dialled pairs one client may hold at once, waiting or connected: each holds up to twice
`BYTES_IN_FLIGHT`, so this bounds what one client can make the server hold (`jmp shell` uses one)."""


TRIM_AFTER = 1024 * 1024
"""A pair that held this many payload bytes in one direction hands the C heap back when it ends (`malloc_trim`):
glibc keeps big freed frames for reuse (past its first multi-MiB free it stops giving them back on its own), so
a reader that never read left the server 40 MB bigger for good."""

TRIM_EVERY = 1.0
"""Seconds between two such trims at the most: pairs that end in a flood trim once, not once each."""


class TooManyPairs(Exception):
    """The client holds `PAIRS_PER_CLIENT` pairs already (answered RESOURCE_EXHAUSTED)."""


class _Frames:
    """One direction's frames, bounded in count and in payload bytes: `put` waits while either is reached
    (a frame bigger than the byte bound still passes alone); the end markers (`None`, `_EOF`) never wait."""

    def __init__(self, frames: int = FRAMES_IN_FLIGHT, size: int = BYTES_IN_FLIGHT) -> None:
        self._queue: collections.deque[Any] = collections.deque()
        self._frames, self._size = frames, size
        self.held = 0  # payload bytes in the queue
        self.peak = 0  # the most it held at once
        self._changed = asyncio.Event()

    async def put(self, frame: Any) -> None:
        while self._queue and (len(self._queue) >= self._frames or self.held >= self._size):
            self._changed.clear()
            await self._changed.wait()
        self.put_nowait(frame)

    def put_nowait(self, frame: Any) -> None:
        self._queue.append(frame)
        self.held += len(getattr(frame, "payload", b"") or b"")
        self.peak = max(self.peak, self.held)
        self._changed.set()

    def drop(self) -> None:
        """Forget what is queued (the pair is over: nobody will read it)."""
        self._queue.clear()
        self.held = 0
        self._changed.set()

    async def get(self) -> Any:
        while not self._queue:
            self._changed.clear()
            await self._changed.wait()
        frame = self._queue.popleft()
        self.held -= len(getattr(frame, "payload", b"") or b"")
        self._changed.set()
        return frame


@dataclass
class _Side:
    frames: _Frames = field(default_factory=_Frames)
    joined: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass
class _Pair:
    """One dialled connection: the client's side and the exporter's, and whether its lease still holds."""

    namespace: str
    lease: str
    exporter: str
    alive: Callable[[], bool]
    client: str = ""
    sides: list[_Side] = field(default_factory=lambda: [_Side(), _Side()])  # the client's, the exporter's
    taken: int = 0
    ended: int = 0  # sides whose stream ended


class Router:
    """The open `Listen` streams (by exporter) and the dialled pairs (by token)."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self._listeners: dict[tuple[str, str], asyncio.Queue[Any]] = {}
        self._pairs: dict[str, tuple[_Pair, int]] = {}  # a token → its pair and its side (0: client)
        self._held: collections.Counter[tuple[str, str]] = collections.Counter()  # (namespace, client) → pairs
        self._trimmed_at = -TRIM_EVERY

    def listening(self, namespace: str, exporter: str) -> bool:
        return (namespace, exporter) in self._listeners

    @contextlib.asynccontextmanager
    async def listen(self, namespace: str, exporter: str) -> AsyncIterator[asyncio.Queue[Any]]:
        """The exporter's `Listen`: the ListenResponses of the Dials to it, while the context is open."""
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._listeners[(namespace, exporter)] = queue
        try:
            yield queue
        finally:
            if self._listeners.get((namespace, exporter)) is queue:
                del self._listeners[(namespace, exporter)]

    def dial(self, namespace: str, lease: str, exporter: str, alive: Callable[[], bool], client: str = "") -> Any:
        """A new pair for the lease; the exporter is told at once. The DialResponse for the client;
        TooManyPairs when the client holds `PAIRS_PER_CLIENT` already."""
        if self._held[(namespace, client)] >= PAIRS_PER_CLIENT:
            raise TooManyPairs(f"client {namespace}/{client} holds {PAIRS_PER_CLIENT} router connections "
                               "(Dials waiting for their streams, or connected): close one first")
        pair = _Pair(namespace, lease, exporter, alive, client)
        self._held[(namespace, client)] += 1
        client, agent = secrets.token_urlsafe(32), secrets.token_urlsafe(32)
        self._pairs[client], self._pairs[agent] = (pair, 0), (pair, 1)
        asyncio.get_running_loop().call_later(PAIRING_TIMEOUT, self._expire, (client, agent))
        self._listeners[(namespace, exporter)].put_nowait(
            jumpstarter_pb2.ListenResponse(router_endpoint=self.endpoint, router_token=agent))
        return jumpstarter_pb2.DialResponse(router_endpoint=self.endpoint, router_token=client)

    def _expire(self, tokens: tuple[str, str]) -> None:
        unjoined = [found for token in tokens if (found := self._pairs.pop(token, None)) is not None]
        if unjoined:
            pair = unjoined[0][0]
            for side in pair.sides:
                side.frames.put_nowait(None)  # a side that joined alone stops waiting
            pair.ended += len(unjoined)  # the sides that never came count as ended
            self._release_if_done(pair)

    def ended(self, pair: _Pair) -> None:
        """One side's stream ended; with both, the client's count of pairs goes down."""
        pair.ended += 1
        self._release_if_done(pair)

    def _release_if_done(self, pair: _Pair) -> None:
        if pair.ended >= 2:
            key = (pair.namespace, pair.client)
            self._held[key] -= 1
            if self._held[key] <= 0:
                del self._held[key]
            for side in pair.sides:
                side.frames.drop()
            if max(side.frames.peak for side in pair.sides) >= TRIM_AFTER:
                self._hand_memory_back()

    def _hand_memory_back(self) -> None:
        """The frames a big pair held are garbage now: give the heap they used back to the system."""
        now = time.monotonic()
        if now - self._trimmed_at >= TRIM_EVERY:
            self._trimmed_at = now
            malloc_trim()

    def take(self, token: str) -> tuple[_Pair, _Side, _Side] | None:
        """Join the side of `token`: (pair, this side, the other side); None if the token is unknown or used."""
        found = self._pairs.pop(token, None)  # one use
        if found is None:
            return None
        pair, index = found
        mine, theirs = pair.sides[index], pair.sides[1 - index]
        pair.taken += 1
        mine.joined.set()
        return pair, mine, theirs


class RouterService(router_pb2_grpc.RouterServiceServicer):
    def __init__(self, router: Router) -> None:
        self.router = router

    # grpc.aio also takes a coroutine that writes with `context.write` (the stubs type only generators)
    async def Stream(self, request_iterator: Any, context: grpc.aio.ServicerContext) -> None:  # type: ignore[override]
        metadata = {key.lower(): value for key, value in context.invocation_metadata() or ()}
        scheme, _, token = str(metadata.get("authorization", "")).partition(" ")
        joined = self.router.take(token) if scheme.lower() == "bearer" else None
        if joined is None:
            await context.abort(grpc.StatusCode.UNAUTHENTICATED,
                                "not a router token of a Dial (each is used by one client and one exporter, once)")
            return
        pair, mine, theirs = joined
        try:
            await self._relay(pair, mine, theirs, request_iterator, context)
        finally:
            self.router.ended(pair)

    async def _relay(self, pair: _Pair, mine: _Side, theirs: _Side, request_iterator: Any,
                     context: grpc.aio.ServicerContext) -> None:
        """This side's frames to the other, and the other's to this side's caller, until either ends."""
        try:  # asyncio.timeout, not wait_for, which can swallow a cancellation in 3.11
            async with asyncio.timeout(PAIRING_TIMEOUT):
                await theirs.joined.wait()
        except TimeoutError:
            await context.abort(grpc.StatusCode.DEADLINE_EXCEEDED,
                                f"the other side of lease {pair.namespace}/{pair.lease}'s connection never came")
            return

        async def forward() -> None:
            """This side's frames to the other side's queue (waits while it is full); its end as `_EOF`."""
            async for frame in request_iterator:
                await theirs.frames.put(frame)
            await theirs.frames.put(_EOF)

        reader = asyncio.create_task(forward())
        getting: asyncio.Task[Any] | None = None
        peer_done = False
        reason = "both sides ended"
        try:
            while not (peer_done and reader.done()):
                if getting is None:
                    getting = asyncio.create_task(mine.frames.get())
                waiting = {getting} if reader.done() else {getting, reader}
                done, _ = await asyncio.wait(waiting, timeout=1.0, return_when=asyncio.FIRST_COMPLETED)
                if reader in done and reader.exception() is not None:
                    raise reader.exception()  # type: ignore[misc]
                if getting in done:
                    frame, getting = getting.result(), None
                    if frame is None:
                        reason = "the other side is gone"
                        return
                    if frame is _EOF:  # the other side is done sending: half-close, as the tools expect
                        peer_done = True
                        frame = router_pb2.StreamRequest(frame_type=router_pb2.FRAME_TYPE_GOAWAY)
                    await context.write(router_pb2.StreamResponse(payload=frame.payload, frame_type=frame.frame_type))
                elif not done and not pair.alive():
                    reason = "its lease ended"
                    await context.abort(grpc.StatusCode.ABORTED,
                                        f"lease {pair.namespace}/{pair.lease} ended: its connections are closed")
        except BaseException as err:
            reason = f"{type(err).__name__}: {err}"
            raise
        finally:
            log.debug("router: a stream of lease %s/%s closed (%s)", pair.namespace, pair.lease, reason)
            if getting is not None:
                getting.cancel()
            reader.cancel()
            with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
                await reader
            theirs.frames.put_nowait(None)
