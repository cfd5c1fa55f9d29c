"""Health (8081) and Prometheus metrics (8080) endpoints."""

from __future__ import annotations

import ssl
from collections.abc import Awaitable, Callable
from typing import Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


Check = Callable[[], tuple[bool, str]]


def _always_healthy() -> tuple[bool, str]:
    return True, "ok"


def health_app(ready: Check, healthy: Check = _always_healthy) -> web.Application:
    """503 with the reason in the body when a check fails."""
    async def healthz(_: web.Request) -> web.Response:
        ok, detail = healthy()
        return web.Response(status=200 if ok else 503, text=f"{detail}\n")

    async def readyz(_: web.Request) -> web.Response:
        ok, detail = ready()
        return web.Response(status=200 if ok else 503, text=f"{detail}\n")

    app = web.Application()
    app.router.add_get("/healthz", healthz)
    app.router.add_get("/readyz", readyz)
    return app


class Authorization(Protocol):
    @property
    def status(self) -> int: ...
    @property
    def reason(self) -> str: ...


def metrics_app(registry: CollectorRegistry,
                authorize: Callable[[str | None], Awaitable[Authorization]] | None = None) -> web.Application:
    """`authorize` (--metrics-secure) answers each request's Authorization header: 200 serves."""
    async def metrics(request: web.Request) -> web.Response:
        if authorize is not None:
            verdict = await authorize(request.headers.get("Authorization"))
            if verdict.status != 200:
                headers = {"WWW-Authenticate": 'Bearer realm="lessor metrics"'} if verdict.status == 401 else {}
                return web.Response(status=verdict.status, text=f"{verdict.reason}\n", headers=headers)
        return web.Response(body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST})

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    return app


async def serve(app: web.Application, host: str, port: int, ssl_context: ssl.SSLContext | None = None) -> web.AppRunner:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    await web.TCPSite(runner, host, port, ssl_context=ssl_context).start()
    return runner
