"""The login service that `jmp login [client@]HOST:PORT` reads: `GET /v1/auth/config` over HTTPS.

Its answer is the Jumpstarter controller's: the gRPC endpoint, the namespace new configs default to, the CA
bundle the tools should trust, and one entry per configured JWT authenticator (its issuer, the client id
`jumpstarter-cli` as upstream, and its audiences). jmp then logs in at the issuer itself.
"""

from __future__ import annotations

import contextlib
import ssl
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from aiohttp import web

from .oidc import AuthConfig

CLI_CLIENT_ID = "jumpstarter-cli"
"""The OAuth2 client id upstream's login service names for every issuer (`jmp login`'s default too)."""


def auth_config_body(config: AuthConfig, grpc_endpoint: str, namespace: str, ca_pem: bytes | None) -> dict[str, Any]:
    body: dict[str, Any] = {"grpcEndpoint": grpc_endpoint, "namespace": namespace,
                            "oidc": [{"issuer": a.issuer, "clientId": CLI_CLIENT_ID, "audiences": list(a.audiences)}
                                     for a in config.jwt]}
    if ca_pem:
        body["caBundle"] = ca_pem.decode()
    return body


def server_ssl(cert: bytes, key: bytes) -> ssl.SSLContext:
    """An HTTPS server context from PEM bytes (ssl loads pairs from files only, so they pass through a
    private temporary folder that is gone on return)."""
    context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    with tempfile.TemporaryDirectory(prefix="lessor-login-") as tmp:
        (Path(tmp) / "tls.crt").write_bytes(cert)
        (Path(tmp) / "tls.key").write_bytes(key)
        context.load_cert_chain(Path(tmp) / "tls.crt", Path(tmp) / "tls.key")
    return context


@contextlib.asynccontextmanager
async def login_service(body: dict[str, Any], host: str, port: int, context: ssl.SSLContext) -> AsyncIterator[None]:
    """Serve `GET /v1/auth/config` with `body` on host:port while the context is open."""

    async def auth_config(_: web.Request) -> web.Response:
        return web.json_response(body)

    app = web.Application()
    app.router.add_get("/v1/auth/config", auth_config)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=context).start()
        yield
    finally:
        await runner.cleanup()
