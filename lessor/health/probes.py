"""Health (8081) and Prometheus metrics (8080) endpoints.

The probes (`ProbeServer`) are answered by a thread of their own, not by the
event loop: under CPU pressure the loop may take seconds to get to a request,
and a kubelet whose probe times out would count a slow loop as a dead one
(liveness) or take a replica that is working out of its Service (readiness).
The thread only reads what the loop records: how late the loop's last timer
ran (`/healthz`: a loop blocked past `--max-loop-lag` fails it, while it is
blocked), whether the caches are synced and when the API server last
answered (`/readyz`).
"""

from __future__ import annotations

import socket
import ssl
import threading
from collections.abc import Awaitable, Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest


Check = Callable[[], tuple[bool, str]]


class ProbeServer:
    """`/healthz` (`healthy`) and `/readyz` (`ready`), 200 or 503 with the reason, served by a thread.

    The checks run in that thread: they must only read state (numbers, flags) that the loop writes.
    """

    def __init__(self, ready: Check, healthy: Check, host: str, port: int) -> None:
        checks = {"/healthz": healthy, "/readyz": ready}

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 (the http.server name)
                check = checks.get(self.path.split("?", 1)[0])
                status, detail = (404, "not found") if check is None else _answer(check)
                body = f"{detail}\n".encode()
                self.send_response(status)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - probes are not logged
                pass

        self._server = (_ThreadingHTTPServer6 if ":" in host else ThreadingHTTPServer)((host, port), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="lessor-probes", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _ThreadingHTTPServer6(ThreadingHTTPServer):
    address_family = socket.AF_INET6  # `--bind-address ::`


def _answer(check: Check) -> tuple[int, str]:
    try:
        ok, detail = check()
    except Exception as error:  # noqa: BLE001 - a probe says what went wrong rather than dropping the connection
        return 503, f"the check failed: {type(error).__name__}: {error}"
    return (200 if ok else 503), detail


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
