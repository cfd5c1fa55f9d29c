"""Requests to the API server: configuration, JSON in and out, counting, the retry of the API server's transient
answers (retries.py), and the fence that a leader's writes pass at the moment they are sent."""

from __future__ import annotations

import asyncio
import contextlib
import re
import builtins
import collections
import os
import ssl
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlencode, urlsplit

import aiohttp
import logging
import orjson
from aiohttp.abc import AbstractStreamWriter
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Histogram

from lessor.gateway.fair_slots import FairSlots
from lessor.gateway.causes import Key, WriteCauses, key_of
from lessor.gateway.resources import GROUP, Resource, known
from lessor.gateway.retries import Outages, Retries, answer_reason, failure_reason, retry_after, unsent
from lessor.model.fields import mapping_at

log = logging.getLogger(__name__)

FIELD_MANAGER = "lessor"
# API request latency buckets, seconds: a get from etcd takes a millisecond, a busy server seconds.
_LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
_CONTENT_TYPES = {
    "json": "application/json",
    "merge": "application/merge-patch+json",
    "json-patch": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}
# Connections to the API server: the watches (one per informer, a dozen or so) plus the requests in
# flight. Two cores saturate a single API server well below this; more connections only hold
# memory (asyncio keeps a 256 KiB read buffer per TLS connection).
POOL_SIZE = 72
# Concurrent reads and writes of lessor's own objects at most: thousands of actors starting at once
# queue here, behind no timeout, and the rest of the pool stays free for the watches and for what
# must not wait behind them (the leader's Lease, Events, the webhook's lookups, discovery).
READ_CONCURRENCY = 16
WRITE_CONCURRENCY = 24
# More of each for a namespace with nothing in flight or waiting, so a quiet tenant's request is sent at once
# while a storm holds every slot above (fair_slots.py); the pool has room for them beside the watches.
SPARE = 4
# Bytes aiohttp buffers before it pauses reading a response. Watch lines hold a whole object
# (etcd allows 1.5 MiB), so watches ask for more; a request's body is read whole regardless.
READ_BUFSIZE = 2**16
WATCH_READ_BUFSIZE = 2**21

Fence = Callable[[], None]
"""Raises (the leader election's `NotLeader`) to refuse a write. A fenced request asks it when it is sent,
not when it is queued: once its write slot is held, and again in aiohttp's writer at the moment the
request's bytes go to the connection (after any wait for a pooled connection), with no await between the
question and the socket write. A request it refuses is never sent."""


class FencePaused(Exception):
    """A fence's refusal that may yet lift: the leader could not renew its term in time, but may still prove
    that nobody else led meanwhile. A fenced request refused so is not sent and not failed: it waits for
    `resumed()` (True: ask the fence again; False: the refusal is final, and this error is raised)."""

    async def resumed(self) -> bool:
        return False


async def admitted(fence: Fence) -> None:
    """Ask `fence` now, waiting out a pause (`FencePaused`) for as long as it may lift; raise its final refusal."""
    while True:
        try:
            fence()
            return
        except FencePaused as paused:
            if not await paused.resumed():
                raise


class ApiError(Exception):
    """A non-2xx answer, with the API server's Status fields kept for the caller to decide. `retried`: the
    reasons of the retries before this answer (retries.py), in order; empty when it is the first answer.
    `retry_after`: the seconds the answer asked the client to wait. `answer_lost`: an earlier send of the
    same request may have been carried out, its answer lost (the connection broke after the request went
    out, or a 504): a create's AlreadyExists may be its own object."""

    def __init__(self, status: int, body: dict[str, Any] | None, request: str, *,
                 retried: tuple[str, ...] = (), answer_lost: bool = False, retry_after: float | None = None) -> None:
        self.status = status
        self.body = body or {}
        self.reason: str = self.body.get("reason", "")
        self.message: str = self.body.get("message", "") or f"HTTP {status}"
        self.causes: list[dict[str, Any]] = (self.body.get("details") or {}).get("causes", [])
        self.retried = retried
        self.answer_lost = answer_lost
        self.retry_after = retry_after  # the wait the answer asked for (its Retry-After), if any
        tried = f" (after {len(retried)} retries: {', '.join(dict.fromkeys(retried))})" if retried else ""
        super().__init__(f"{request}: {status} {self.reason}: {self.message}{tried}")

    @property
    def conflict(self) -> bool:
        return self.status == 409 and self.reason == "Conflict"

    @property
    def not_found(self) -> bool:
        return self.status == 404

    @property
    def gone(self) -> bool:
        return self.status == 410

    @property
    def invalid(self) -> bool:
        """A test operation failed (precondition) or the body did not validate."""
        return self.status == 422

    @property
    def already_exists(self) -> bool:
        return self.status == 409 and self.reason == "AlreadyExists"


class Reachability:
    """When the API server last answered (anything but a 5xx, a watch event included), and why it
    did not since: what `/readyz` reports."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self.last_answer = clock()
        self.last_failure = ""

    def answered(self) -> None:
        self.last_answer = self._clock()

    def failed(self, why: str) -> None:
        self.last_failure = why

    def silent_for(self) -> float:
        return self._clock() - self.last_answer


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


async def load_configuration(kubeconfig: str | None, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> Configuration:
    """Explicit kubeconfig, else in-cluster (service account, token re-read as it rotates), else $KUBECONFIG."""
    cfg = Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(  # type: ignore[no-untyped-call]
            client_configuration=cfg, try_refresh_token=True,
            token_filename=str(service_account_dir / "token"), cert_filename=str(service_account_dir / "ca.crt"),
        )
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        if not Path(path).is_file():  # noqa: ASYNC240 (once, at start-up)
            raise FileNotFoundError(
                f"no kubeconfig at {path}: pass --kubeconfig, set KUBECONFIG, or run inside a cluster"
            )
        await kube_config.load_kube_config(config_file=path, client_configuration=cfg)
    cfg.connection_pool_maxsize = POOL_SIZE
    return cfg


def tls_context(cfg: Configuration) -> ssl.SSLContext:
    """The kubeconfig's CA, client certificate and verification settings."""
    context = ssl.create_default_context(cafile=cfg.ssl_ca_cert)
    if cfg.cert_file:
        context.load_cert_chain(cfg.cert_file, keyfile=cfg.key_file)
    if not cfg.verify_ssl:
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    if cfg.disable_strict_ssl_verification:
        context.verify_flags &= ~ssl.VERIFY_X509_STRICT
    return context


def open_session(cfg: Configuration) -> aiohttp.ClientSession:
    """The one long-lived HTTP session to the API server.

    `trust_env=False`: no proxy variables or ~/.netrc looked up for every request (aiohttp does
    that in a thread); a proxy comes only from the kubeconfig (`proxy-url`), passed per request.
    An IP host is never resolved (aiohttp skips DNS for addresses); a name is cached for 5 minutes.
    """
    connector = aiohttp.TCPConnector(limit=cfg.connection_pool_maxsize or POOL_SIZE, ssl=tls_context(cfg),
                                     ttl_dns_cache=300, keepalive_timeout=15)
    return aiohttp.ClientSession(connector=connector, trust_env=False, read_bufsize=READ_BUFSIZE)


_UNTRACED = contextlib.nullcontext(trace.INVALID_SPAN)
"""A request's span when nothing traces: records nothing, costs nothing (reusable: it keeps no state)."""

EXPECTED_REFUSALS = frozenset({404, 409})
"""Answers that are how lessor learns something (gone; lost a compare-and-set), not errors of the request."""


class _FencedBody(aiohttp.BytesPayload):
    """A request body that asks its fence as aiohttp writes it: the last moment before the request (its
    headers are held back and sent with the body) reaches the connection, after every wait (a write slot,
    a pooled connection, a new connection's handshake, the writer task's turn on the loop). Between the
    question and `transport.write` nothing awaits, so a process paused in between resumes *before* the
    question, never after it."""

    def __init__(self, value: bytes, fence: Fence, content_type: str) -> None:
        super().__init__(value, content_type=content_type)
        self._fence = fence
        self.refusal: BaseException | None = None

    def _ask(self) -> None:
        try:
            self._fence()
        except Exception as err:  # aiohttp wraps it in a ClientConnectionError; `Gateway._send` unwraps it
            self.refusal = err
            raise

    async def write(self, writer: AbstractStreamWriter) -> None:
        self._ask()
        await super().write(writer)

    async def write_with_length(self, writer: AbstractStreamWriter, content_length: int | None) -> None:
        self._ask()
        await super().write_with_length(writer, content_length)


class _Refused(Exception):
    """A fenced request refused at the connection: nothing of it was sent."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(str(error))
        self.error = error


class Gateway:
    """One connection pool to one API server; every request is counted by verb and kind."""

    def __init__(self, cfg: Configuration, *, registry: CollectorRegistry | None = None,
                 tracer_provider: trace.TracerProvider | None = None, retries: Retries | None = None) -> None:
        """`retries`: the bound of each request's retries of transient answers (retries.py)."""
        self._cfg = cfg
        self.retries = retries or Retries()
        self.configuration = cfg
        self._tracer = trace.get_tracer("lessor.gateway", tracer_provider=tracer_provider)
        self._tracer_provider = tracer_provider
        self._http = open_session(cfg)
        self._proxy: str | None = cfg.proxy or None
        self._server_hostname: str | None = cfg.tls_server_name or None
        self._reads = FairSlots(READ_CONCURRENCY, SPARE)  # shared out by turns between namespaces (fair_slots.py)
        self._writes = FairSlots(WRITE_CONCURRENCY, SPARE)
        self._queued: set[asyncio.Timeout] = set()  # fenced requests waiting for a slot (`drop_queued_writes`)
        self._backing_off: set[asyncio.Future[None]] = set()  # fenced requests waiting to retry (the same)
        self.host = (cfg.host or "").rstrip("/")
        split = urlsplit(self.host)
        # OpenTelemetry's HTTP client attributes: the host alone, and the port apart (default by scheme).
        self._server: dict[str, str | int] = {"server.address": split.hostname or "",
                                              "server.port": split.port or (443 if split.scheme == "https" else 80)}
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._metric = Counter(
            "lessor_api_requests", "Requests to the API server by verb, kind and HTTP code (connection: no "
            "answer, timeout: no answer in time); a watch counts once, when it opens",
            ["verb", "kind", "code"], registry=registry,
        ) if registry is not None else None
        self._latency = Histogram(
            "lessor_api_request_duration_seconds", "Time from sending a request to the API server to its "
            "answer, by verb and kind (watches excluded)", ["verb", "kind"], buckets=_LATENCY_BUCKETS,
            registry=registry,
        ) if registry is not None else None
        self._watch_failures = Counter(
            "lessor_watch_failures", "Watches (and their lists) that failed, by kind and HTTP code "
            "(connection: no answer, timeout: no answer in time)", ["kind", "code"], registry=registry,
        ) if registry is not None else None
        self._retried = Counter(
            "lessor_api_retries", "Requests to the API server retried in the gateway, and watches started "
            "again, by reason: connection, timeout (no answer), 429, 503, 504, 500 (etcd's \"please try again\")",
            ["reason"], registry=registry,
        ) if registry is not None else None
        self.retry_counts: collections.Counter[str] = collections.Counter()
        self.outages = Outages()
        self.reachability = Reachability()
        self.causes = WriteCauses()  # the operator continues a write's trace at the write's watch event
        self._discovered: dict[tuple[str, str], Resource] = {}
        self._counted: dict[tuple[str, str, str], Any] = {}  # the metrics' children by labels (`_observe`)
        self._timed: dict[tuple[str, str], Any] = {}

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, registry: CollectorRegistry | None = None,
                      tracer_provider: trace.TracerProvider | None = None, retries: Retries | None = None) -> Gateway:
        return cls(await load_configuration(kubeconfig), registry=registry, tracer_provider=tracer_provider,
                   retries=retries)

    async def close(self) -> None:
        await self._http.close()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the one place HTTP happens -------------------------------------------------

    def watch_failed(self, kind: str, code: str) -> None:
        if self._watch_failures is not None:
            self._watch_failures.labels(kind, code).inc()

    def count(self, verb: str, kind: str) -> None:
        self.requests[(verb, kind)] += 1

    def retried(self, reason: str, why: str) -> None:
        """A request (or a watch) is tried again after a transient failure: counted, and logged once per outage."""
        self.retry_counts[reason] += 1
        if self._retried is not None:
            self._retried.labels(reason).inc()
        self.outages.retried(reason, why)

    def _observe(self, verb: str, kind: str, code: str, began: float | None) -> None:
        """The answer's code and, for requests that are not watches, the latency since `began`."""
        if self._metric is not None:
            counted = self._counted.get((verb, kind, code))
            if counted is None:  # `labels` takes a lock and builds its key on every call: once per label set
                counted = self._counted[(verb, kind, code)] = self._metric.labels(verb, kind, code)
            counted.inc()
        if self._latency is not None and began is not None:
            timed = self._timed.get((verb, kind))
            if timed is None:
                timed = self._timed[(verb, kind)] = self._latency.labels(verb, kind)
            timed.observe(time.monotonic() - began)

    def _traced(self) -> bool:
        """Whether a tracer provider is installed (given, or the global one by now); without one, a request
        begins no span: a no-op span and its attributes (the URL built twice) cost more than counting it."""
        provider = self._tracer_provider or trace.get_tracer_provider()
        return not isinstance(provider, (trace.ProxyTracerProvider, trace.NoOpTracerProvider))

    async def headers(self, content_type: str = "json", accept: str = "application/json") -> dict[str, str]:
        headers = {"Accept": accept, "Content-Type": _CONTENT_TYPES[content_type]}
        auth = await self._cfg.auth_settings()  # runs the token refresh hook when in-cluster
        if token := auth.get("BearerToken", {}).get("value"):
            headers["Authorization"] = token
        return headers

    def url(self, path: str, params: dict[str, Any] | None = None) -> str:
        query = {k: _query_value(v) for k, v in (params or {}).items() if v is not None}
        return self.host + path + (f"?{urlencode(query)}" if query else "")

    async def request(
        self,
        verb: str,
        kind: str,
        method: str,
        path: str,
        *,
        params: dict[str, Any] | None = None,
        body: Any = None,
        content_type: str = "json",
        accept: str = "application/json",
        timeout: float = 30.0,
        gated: bool = False,
        writes: Key | None = None,
        fence: Fence | None = None,
        retries: Retries | None = None,
    ) -> dict[str, Any]:
        """`accept` may ask for another view, e.g. the Table that `kubectl get` prints. `gated`: one
        of lessor's own objects, so the request waits for a read or write slot (see READ_CONCURRENCY).
        `writes`: the object a write changes, whose watch event continues this request's trace.
        `fence`: asked when the request is sent, each time it is sent (see `Fence`); what it raises, the
        request raises, unsent. `retries`: the bound of its retries, if not the gateway's.

        A transient failure (no connection, 429, 503, 504, etcd's "try again": retries.py) is sent again,
        after the wait the answer asked for or a jittered backoff, while the bound allows; then the last
        answer is raised as `ApiError` (or the last connection error as it is). A retried request keeps its
        slot: under an outage or throttling, no more requests wait on the API server than there are slots.
        A write sent again may have been carried out by the send whose answer was lost: a write with a
        resourceVersion precondition (or a JSON patch `test`) then loses to itself, as a Conflict, a delete
        finds its object gone; `create` says what it does (`ApiError.answer_lost`)."""
        if gated:
            slots, key = self._reads if method == "GET" else self._writes, _namespace_in(path)
            await self._hold(slots, fence, key)
            try:
                return await self.request(verb, kind, method, path, params=params, body=body,
                                          content_type=content_type, accept=accept, timeout=timeout,
                                          writes=writes, fence=fence, retries=retries)
            finally:
                slots.release(key)
        bound = retries or self.retries
        data = orjson.dumps(body) if body is not None else None
        began = time.monotonic()
        reasons: list[str] = []
        answer_lost = False  # a send may have been carried out although its answer never came
        while True:
            try:
                status, answer, asked_wait = await self._attempt(verb, kind, method, path, params, data,
                                                                 content_type, accept, timeout, writes, fence)
            except _Refused as refused:  # the fence's word, whatever its type: never a transient failure
                if isinstance(refused.error, FencePaused):
                    paused_at = time.monotonic()
                    if await refused.error.resumed():
                        began += time.monotonic() - paused_at  # a pause spends none of the retry bound
                        continue
                raise refused.error from None
            except (aiohttp.ClientError, OSError, TimeoutError) as err:
                reason = failure_reason(err)
                if reason is None or not await self._wait_to_retry(bound, began, reasons, reason, _describe(err),
                                                                   None, fence):
                    raise
                answer_lost = answer_lost or not unsent(err)
                continue
            reason = answer_reason(status, answer) if status >= 300 else None
            if reason is None:
                self.outages.answered()
                break
            why = f"{status} {(answer or {}).get('reason', '')}: {(answer or {}).get('message', '')}"
            if not await self._wait_to_retry(bound, began, reasons, reason, why, asked_wait, fence):
                break
            answer_lost = answer_lost or status == 504  # a 504: the API server gave up waiting for etcd
        if status >= 300:
            raise ApiError(status, answer, f"{method} {path}", retried=tuple(reasons), answer_lost=answer_lost,
                           retry_after=asked_wait)
        return answer or {}

    async def _wait_to_retry(self, bound: Retries, began: float, reasons: builtins.list[str], reason: str,
                             why: str, asked_wait: float | None, fence: Fence | None) -> bool:
        """Wait before sending a request again, if its bound allows another send (else False at once)."""
        retry = len(reasons) + 1
        if retry >= bound.attempts:
            return False
        delay = bound.delay(retry, asked_wait)
        if time.monotonic() + delay - began > bound.total:
            return False
        reasons.append(reason)
        self.retried(reason, why)
        if fence is None:
            await asyncio.sleep(delay)
            return True
        woken: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._backing_off.add(woken)  # `drop_queued_writes` ends the wait: the fence is asked at once
        try:
            async with asyncio.timeout(delay):
                await woken
        except TimeoutError:
            pass
        finally:
            self._backing_off.discard(woken)
        return True

    async def _attempt(
        self, verb: str, kind: str, method: str, path: str, params: dict[str, Any] | None, data: bytes | None,
        content_type: str, accept: str, timeout: float, writes: Key | None, fence: Fence | None,
    ) -> tuple[int, dict[str, Any] | None, float | None]:
        """One send: the answer's code, body and Retry-After. A fence's refusal is raised as `_Refused`."""
        if fence is not None:
            try:
                fence()  # a slot is held (or none is needed): refused now, it takes no connection either
            except Exception as err:
                raise _Refused(err) from None
        self.count(verb, kind)
        with self._tracer.start_as_current_span(
            f"{verb} {kind}", kind=trace.SpanKind.CLIENT,
            attributes={"http.request.method": method, "url.full": self.url(path, params), **self._server,
                        "lessor.api.verb": verb, "lessor.api.kind": kind},
        ) if self._traced() else _UNTRACED as span:
            began = time.monotonic()
            written = writes if span.is_recording() else None  # only sampled writes are remembered
            if written is not None:
                self.causes.writing(written, span.get_span_context())
            try:
                result = await self._send(method, path, params, data, content_type, accept, timeout, fence)
            except _Refused:
                self.requests[(verb, kind)] -= 1  # never sent
                if written is not None:
                    self.causes.wrote(written, None, span.get_span_context())
                span.set_attribute("lessor.api.refused", True)
                raise
            except (aiohttp.ClientError, OSError, TimeoutError) as err:
                if written is not None:
                    self.causes.wrote(written, None, span.get_span_context())
                self._observe(verb, kind, failure_code(err), began)
                self.reachability.failed(f"{method} {path}: {_describe(err)}")
                span.set_attribute("error.type", type(err).__name__)
                span.set_status(trace.Status(trace.StatusCode.ERROR, _describe(err)))
                raise
            if written is not None:
                self.causes.wrote(written, result[1] if result[0] < 300 else None, span.get_span_context())
            self._observe(verb, kind, str(result[0]), began)
            self._answered(result[0], f"{method} {path}")
            span.set_attribute("http.response.status_code", result[0])
            if result[0] >= 400 and result[0] not in EXPECTED_REFUSALS:
                span.set_attribute("error.type", str(result[0]))
                span.set_status(trace.Status(trace.StatusCode.ERROR, f"HTTP {result[0]}"))
        return result

    async def _send(
        self, method: str, path: str, params: dict[str, Any] | None, data: bytes | None,
        content_type: str, accept: str, timeout: float, fence: Fence | None = None,
    ) -> tuple[int, dict[str, Any] | None, float | None]:
        """The answer's code, body and Retry-After (`retries.retry_after`). `timeout` bounds connecting and
        each wait for the answer, not the wait for a pooled connection: a request queued behind a busy pool is
        not a failed request. A fenced request's body asks the fence as it is written (`_FencedBody`); every
        write has a body."""
        headers = await self.headers(content_type, accept)
        payload: bytes | _FencedBody | None = data
        if fence is not None:
            if data is None:
                try:
                    fence()  # no body to carry the question: asked here, with no await before aiohttp
                except Exception as err:
                    raise _Refused(err) from None
            else:
                payload = _FencedBody(data, fence, _CONTENT_TYPES[content_type])
        try:
            async with self._http.request(
                method, self.url(path, params), data=payload, headers=headers,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=min(timeout, 10.0), sock_read=timeout),
                proxy=self._proxy, server_hostname=self._server_hostname,
            ) as resp:
                body = _parse(await resp.read())
                return resp.status, body, retry_after(resp.headers, body) if resp.status >= 400 else None
        except aiohttp.ClientError as err:
            if isinstance(payload, _FencedBody) and payload.refusal is not None:
                raise _Refused(payload.refusal) from err
            raise

    async def _hold(self, slots: FairSlots, fence: Fence | None, key: str) -> None:
        """Take a slot, in `key`'s turn. A fenced request waits where `drop_queued_writes` can wake it to ask
        its fence: refused, it raises without ever holding a slot; still allowed, it waits on."""
        if fence is None or not slots.locked(key):
            await slots.acquire(key)
            return
        while True:
            try:
                async with asyncio.timeout(None) as waiting:
                    self._queued.add(waiting)
                    try:
                        await slots.acquire(key)
                    finally:
                        self._queued.discard(waiting)
                return
            except TimeoutError:
                fence()

    @property
    def queued_writes(self) -> int:
        """Fenced requests waiting for a slot now."""
        return len(self._queued)

    def drop_queued_writes(self) -> None:
        """The fence closed (the leader's term ended): every fenced request still waiting for a slot, or
        waiting to be sent again after a transient failure, asks its fence now and is refused there, unsent,
        instead of when a slot frees or its wait ends. Requests in flight are not touched: they were sent
        while the fence allowed them."""
        now = asyncio.get_running_loop().time()
        queued, self._queued = self._queued, set()
        for waiting in queued:
            if not waiting.expired():
                waiting.reschedule(now)
        for woken in self._backing_off:
            if not woken.done():
                woken.set_result(None)

    async def stream(self, kind: str, path: str, params: dict[str, Any]) -> aiohttp.ClientResponse:
        """Open a watch; the caller reads lines and closes the response."""
        self.count("watch", kind)
        try:
            resp = await self._http.get(
                self.url(path, params), headers=await self.headers(),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
                read_bufsize=WATCH_READ_BUFSIZE, proxy=self._proxy, server_hostname=self._server_hostname,
            )
        except (aiohttp.ClientError, OSError) as err:
            self._observe("watch", kind, failure_code(err), None)
            self.reachability.failed(f"WATCH {path}: {_describe(err)}")
            raise
        self._observe("watch", kind, str(resp.status), None)
        self._answered(resp.status, f"WATCH {path}")
        if resp.status >= 300:
            body = _parse(await resp.read())
            resp.release()
            raise ApiError(resp.status, body, f"WATCH {path}", retry_after=retry_after(resp.headers, body))
        return resp

    def _answered(self, status: int, request: str) -> None:
        if status < 500:
            self.reachability.answered()
        else:
            self.reachability.failed(f"{request}: HTTP {status}")

    # --- verbs ------------------------------------------------------------------------

    async def get(self, res: Resource, namespace: str | None, name: str, subresource: str | None = None) -> dict[str, Any]:
        return await self.request("get", res.kind, "GET", res.path(namespace, name, subresource), gated=res.group == GROUP)

    async def list(
        self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None, page_size: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """All pages of a list; returns the items and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        version = ""
        async for page, rv in self.list_pages(res, namespace, label_selector=label_selector, page_size=page_size):
            items.extend(page)
            version = rv or version
        return items, version

    async def list_pages(
        self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None, page_size: int = 500
    ) -> AsyncIterator[tuple[builtins.list[dict[str, Any]], str | None]]:
        """A list page by page, so a caller can keep less of each page than it was sent before the next
        arrives; the list's resourceVersion comes with the last page (None with the others)."""
        cont: str | None = None
        while True:
            page = await self.request(
                "list", res.kind, "GET", res.path(namespace),
                params={"limit": page_size, "continue": cont, "labelSelector": label_selector},
                timeout=120,
            )
            items = page.pop("items", None) or []
            for item in items:
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", res.kind)
            list_meta = mapping_at(page, "metadata")  # a list's ListMeta: `continue`, `resourceVersion`
            cont = list_meta.get("continue")
            if not cont:
                yield items, str(list_meta.get("resourceVersion") or "")
                return
            yield items, None

    async def create(self, res: Resource, namespace: str | None, body: dict[str, Any], *,
                     fence: Fence | None = None) -> dict[str, Any]:
        """Recorded under lessor's field manager (operation `Update`), so its applies can take the fields over.

        A create sent again after its answer was lost (`ApiError.answer_lost`) may find its own object: an
        AlreadyExists then is read back, and an object that holds every field of `body` (`holds`) is
        answered as created, which is what the lost answer said; any other stays the AlreadyExists that
        callers handle today (the name is taken: draw another, or read and adopt what is there)."""
        try:
            return await self.request("create", res.kind, "POST", res.path(namespace), body=body,
                                      params={"fieldManager": FIELD_MANAGER}, fence=fence,
                                      gated=res.group == GROUP, writes=key_of(res.kind, namespace, body))
        except ApiError as err:
            name = mapping_at(body, "metadata").get("name")
            if not (err.already_exists and err.answer_lost and name):
                raise
            try:
                found = await self.get(res, namespace, str(name))
            except ApiError:
                raise err from None
            if not holds(found, body):
                raise
            log.info("create %s %s/%s: its answer was lost and the object is there as sent; taken as created",
                     res.kind, namespace or "", name)
            return found

    async def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any],
                      subresource: str | None = None, *, fence: Fence | None = None) -> dict[str, Any]:
        return await self.request("update", res.kind, "PUT", res.path(namespace, name, subresource), body=body,
                                  gated=res.group == GROUP, writes=key_of(res.kind, namespace, None, name),
                                  fence=fence)

    async def delete(
        self, res: Resource, namespace: str | None, name: str, *,
        resource_version: str | None = None, uid: str | None = None, propagation: str = "Background",
        fence: Fence | None = None,
    ) -> dict[str, Any]:
        preconditions = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request("delete", res.kind, "DELETE", res.path(namespace, name), body=body,
                                  gated=res.group == GROUP, writes=key_of(res.kind, namespace, None, name),
                                  fence=fence)

    async def merge_patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any],
                          subresource: str | None = None, *, fence: Fence | None = None) -> dict[str, Any]:
        return await self.request("patch", res.kind, "PATCH", res.path(namespace, name, subresource),
                                  body=patch, content_type="merge", gated=res.group == GROUP,
                                  writes=key_of(res.kind, namespace, None, name), fence=fence)

    async def json_patch(self, res: Resource, namespace: str | None, name: str, ops: builtins.list[dict[str, Any]],
                         subresource: str | None = None, *, fence: Fence | None = None) -> dict[str, Any]:
        """RFC 6902; a leading `test` op makes it a compare-and-set (the commit points)."""
        return await self.request("patch", res.kind, "PATCH", res.path(namespace, name, subresource),
                                  body=ops, content_type="json-patch", gated=res.group == GROUP,
                                  writes=key_of(res.kind, namespace, None, name), fence=fence)

    async def patch_status(self, res: Resource, namespace: str | None, name: str,
                           status: dict[str, Any]) -> dict[str, Any]:
        return await self.merge_patch(res, namespace, name, {"status": status}, subresource="status")

    async def apply(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any], *,
                    force: bool = True, subresource: str | None = None, fence: Fence | None = None) -> dict[str, Any]:
        """Server-side apply (JSON is valid YAML, so the body is sent as JSON)."""
        return await self.request(
            "patch", res.kind, "PATCH", res.path(namespace, name, subresource),
            params={"fieldManager": FIELD_MANAGER, "force": "true" if force else None},
            body=body, content_type="apply", gated=res.group == GROUP,
            writes=key_of(res.kind, namespace, None, name), fence=fence,
        )

    async def resolve(self, api_version: str, kind: str) -> Resource:
        """Map apiVersion+kind to its REST resource, by discovery for kinds we do not know."""
        if res := known(api_version, kind) or self._discovered.get((api_version, kind)):
            return res
        group, _, version = api_version.rpartition("/")
        path = f"/apis/{api_version}" if group else f"/api/{version}"
        listing = await self.request("get", "APIResourceList", "GET", path)
        for r in listing.get("resources", []):
            if "/" in r["name"]:
                continue
            res = Resource(group, version, r["kind"], r["name"], r.get("namespaced", True))
            self._discovered[(api_version, r["kind"])] = res
        if (api_version, kind) not in self._discovered:
            raise LookupError(f"the API server serves no kind {kind} in {api_version}")
        return self._discovered[(api_version, kind)]


def holds(found: Any, sent: Any) -> bool:
    """Whether `found` (an object as the API server has it) has every field of `sent` (a create's body) with
    the same value: maps field by field (the server adds defaults, status, metadata), lists item by item."""
    if isinstance(sent, dict):
        return isinstance(found, dict) and all(
            (v is None and found.get(k) is None) or (k in found and holds(found[k], v)) for k, v in sent.items())
    if isinstance(sent, list):
        return isinstance(found, list) and len(found) == len(sent) and all(map(holds, found, sent))
    return bool(found == sent) and isinstance(found, bool) == isinstance(sent, bool)


def failure_code(err: BaseException) -> str:
    """The `code` label of a request the API server did not answer (as lessor_watch_failures_total's)."""
    return "timeout" if isinstance(err, TimeoutError) else "connection"


def _describe(err: BaseException) -> str:
    return str(err) or type(err).__name__


def _parse(raw: bytes) -> dict[str, Any] | None:
    if not raw:
        return None
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {"message": raw.decode(errors="replace")[:500]}
    return value if isinstance(value, dict) else {"items": value}


def _query_value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return str(v)


_NAMESPACED = re.compile(r"/namespaces/([^/?]+)/")


def _namespace_in(path: str) -> str:
    """The namespace a request's path names ("" for a cluster-scoped one): whose turn it waits in."""
    found = _NAMESPACED.search(path)
    return found.group(1) if found else ""
