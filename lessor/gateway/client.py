"""Requests to the API server: configuration, JSON in and out, counting, conflict retry."""

from __future__ import annotations

import asyncio
import collections
import os
import random
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlencode

import aiohttp
import orjson
from kubernetes_asyncio import config as kube_config
from kubernetes_asyncio.client import Configuration
from kubernetes_asyncio.client.rest import RESTClientObject
from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter

from lessor.gateway.resources import Resource, known

T = TypeVar("T")
FIELD_MANAGER = "lessor"
_CONTENT_TYPES = {
    "json": "application/json",
    "merge": "application/merge-patch+json",
    "json-patch": "application/json-patch+json",
    "apply": "application/apply-patch+yaml",
}


class ApiError(Exception):
    """A non-2xx answer, with the API server's Status fields kept for the caller to decide."""

    def __init__(self, status: int, body: dict[str, Any] | None, request: str) -> None:
        self.status = status
        self.body = body or {}
        self.reason: str = self.body.get("reason", "")
        self.message: str = self.body.get("message", "") or f"HTTP {status}"
        self.causes: list[dict[str, Any]] = (self.body.get("details") or {}).get("causes", [])
        super().__init__(f"{request}: {status} {self.reason}: {self.message}")

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


SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")


async def load_configuration(kubeconfig: str | None, *, service_account_dir: Path = SERVICE_ACCOUNT_DIR) -> Configuration:
    """Explicit kubeconfig, else in-cluster (service account, token re-read as it rotates), else $KUBECONFIG."""
    cfg = Configuration()
    if kubeconfig is None and os.environ.get("KUBERNETES_SERVICE_HOST"):
        kube_config.load_incluster_config(
            client_configuration=cfg, try_refresh_token=True,
            token_filename=str(service_account_dir / "token"), cert_filename=str(service_account_dir / "ca.crt"),
        )
    else:
        path = kubeconfig or os.environ.get("KUBECONFIG") or str(Path.home() / ".kube" / "config")
        if not Path(path).is_file():
            raise FileNotFoundError(
                f"no kubeconfig at {path}: pass --kubeconfig, set KUBECONFIG, or run inside a cluster"
            )
        await kube_config.load_kube_config(config_file=path, client_configuration=cfg)
    cfg.connection_pool_maxsize = 256
    return cfg


class Gateway:
    """One connection pool to one API server; every request is counted by verb and kind."""

    def __init__(self, cfg: Configuration, *, registry: CollectorRegistry | None = None,
                 tracer_provider: trace.TracerProvider | None = None) -> None:
        self._cfg = cfg
        self._tracer = trace.get_tracer("lessor.gateway", tracer_provider=tracer_provider)
        self._rest = RESTClientObject(cfg)
        self._http: aiohttp.ClientSession = self._rest.pool_manager
        self.host = cfg.host.rstrip("/")
        self.requests: collections.Counter[tuple[str, str]] = collections.Counter()
        self._metric = Counter(
            "lessor_api_requests", "Requests to the API server by verb and kind",
            ["verb", "kind"], registry=registry,
        ) if registry is not None else None
        self._discovered: dict[tuple[str, str], Resource] = {}

    @classmethod
    async def connect(cls, kubeconfig: str | None = None, *, registry: CollectorRegistry | None = None) -> Gateway:
        return cls(await load_configuration(kubeconfig), registry=registry)

    async def close(self) -> None:
        await self._rest.close()

    async def __aenter__(self) -> Gateway:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # --- the one place HTTP happens -------------------------------------------------

    def count(self, verb: str, kind: str) -> None:
        self.requests[(verb, kind)] += 1
        if self._metric is not None:
            self._metric.labels(verb, kind).inc()

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
    ) -> dict[str, Any]:
        """`accept` may ask for another view, e.g. the Table that `kubectl get` prints."""
        self.count(verb, kind)
        data = orjson.dumps(body) if body is not None else None
        with self._tracer.start_as_current_span(
            f"{verb} {kind}", kind=trace.SpanKind.CLIENT,
            attributes={"http.request.method": method, "url.path": path, "server.address": self.host},
        ) as span:
            result = await self._send(method, path, params, data, content_type, accept, timeout)
            span.set_attribute("http.response.status_code", result[0])
        if result[0] >= 300:
            raise ApiError(result[0], result[1], f"{method} {path}")
        return result[1] or {}

    async def _send(
        self, method: str, path: str, params: dict[str, Any] | None, data: bytes | None,
        content_type: str, accept: str, timeout: float,
    ) -> tuple[int, dict[str, Any] | None]:
        async with self._http.request(
            method, self.url(path, params), data=data, headers=await self.headers(content_type, accept),
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as resp:
            return resp.status, _parse(await resp.read())

    async def stream(self, kind: str, path: str, params: dict[str, Any]) -> aiohttp.ClientResponse:
        """Open a watch; the caller reads lines and closes the response."""
        self.count("watch", kind)
        resp = await self._http.get(
            self.url(path, params), headers=await self.headers(),
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
        )
        if resp.status >= 300:
            body = _parse(await resp.read())
            resp.release()
            raise ApiError(resp.status, body, f"WATCH {path}")
        return resp

    # --- verbs ------------------------------------------------------------------------

    async def get(self, res: Resource, namespace: str | None, name: str, subresource: str | None = None) -> dict[str, Any]:
        return await self.request("get", res.kind, "GET", res.path(namespace, name, subresource))

    async def list(
        self, res: Resource, namespace: str | None = None, *, label_selector: str | None = None, page_size: int = 500
    ) -> tuple[list[dict[str, Any]], str]:
        """All pages of a list; returns the items and the list's resourceVersion."""
        items: list[dict[str, Any]] = []
        cont: str | None = None
        while True:
            page = await self.request(
                "list", res.kind, "GET", res.path(namespace),
                params={"limit": page_size, "continue": cont, "labelSelector": label_selector},
                timeout=120,
            )
            kind = res.kind
            for item in page.get("items", []):
                item.setdefault("apiVersion", res.api_version)
                item.setdefault("kind", kind)
                items.append(item)
            cont = page.get("metadata", {}).get("continue")
            if not cont:
                return items, page["metadata"]["resourceVersion"]

    async def create(self, res: Resource, namespace: str | None, body: dict[str, Any]) -> dict[str, Any]:
        return await self.request("create", res.kind, "POST", res.path(namespace), body=body)

    async def replace(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any],
                      subresource: str | None = None) -> dict[str, Any]:
        return await self.request("update", res.kind, "PUT", res.path(namespace, name, subresource), body=body)

    async def delete(
        self, res: Resource, namespace: str | None, name: str, *,
        resource_version: str | None = None, uid: str | None = None, propagation: str = "Background",
    ) -> dict[str, Any]:
        preconditions = {k: v for k, v in (("resourceVersion", resource_version), ("uid", uid)) if v}
        body: dict[str, Any] = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": propagation}
        if preconditions:
            body["preconditions"] = preconditions
        return await self.request("delete", res.kind, "DELETE", res.path(namespace, name), body=body)

    async def merge_patch(self, res: Resource, namespace: str | None, name: str, patch: dict[str, Any],
                          subresource: str | None = None) -> dict[str, Any]:
        return await self.request("patch", res.kind, "PATCH", res.path(namespace, name, subresource),
                                  body=patch, content_type="merge")

    async def json_patch(self, res: Resource, namespace: str | None, name: str, ops: list[dict[str, Any]],
                         subresource: str | None = None) -> dict[str, Any]:
        """RFC 6902; a leading `test` op makes it a compare-and-set (the commit points)."""
        return await self.request("patch", res.kind, "PATCH", res.path(namespace, name, subresource),
                                  body=ops, content_type="json-patch")

    async def patch_status(self, res: Resource, namespace: str | None, name: str,
                           status: dict[str, Any]) -> dict[str, Any]:
        return await self.merge_patch(res, namespace, name, {"status": status}, subresource="status")

    async def apply(self, res: Resource, namespace: str | None, name: str, body: dict[str, Any], *,
                    force: bool = True, subresource: str | None = None) -> dict[str, Any]:
        """Server-side apply (JSON is valid YAML, so the body is sent as JSON)."""
        return await self.request(
            "patch", res.kind, "PATCH", res.path(namespace, name, subresource),
            params={"fieldManager": FIELD_MANAGER, "force": "true" if force else None},
            body=body, content_type="apply",
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


async def retry_on_conflict(
    attempt: Callable[[], Awaitable[T]], *, attempts: int = 8, base_delay: float = 0.02, max_delay: float = 1.0
) -> T:
    """Re-run `attempt` (which must re-read what it writes) while the API server answers 409 Conflict."""
    for i in range(attempts):
        try:
            return await attempt()
        except ApiError as err:
            if not err.conflict or i == attempts - 1:
                raise
            await asyncio.sleep(random.uniform(0, min(max_delay, base_delay * 2**i)))
    raise AssertionError("unreachable")


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
