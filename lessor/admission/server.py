"""Serving the webhook over HTTPS: development certificates, or rotated files in production.

The API server only calls webhooks over TLS. In development `lessor run`
makes a throwaway CA and serving certificate for the loopback address and
registers itself with that CA bundle. In production the certificate comes
from files (a mounted Secret, kept fresh by cert-manager or similar) that
are replaced while the operator runs, so they are re-read without a restart.
"""

from __future__ import annotations

import contextlib
import logging
import os
import ssl
import tempfile
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from lessor.admission.app import VALIDATE_PATH, make_app
from lessor.admission.checker import Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.metrics import WebhookMetrics
from lessor.admission.registration import NAME, development_configuration, registered
from lessor.admission.registry import Registry
from lessor.tls.certs import CERT_FILE, DEVELOPMENT_HOSTS, KEY_FILE, CertificateAuthority
from lessor.templates.budget import FairQueue
from lessor.gateway import Gateway

log = logging.getLogger(__name__)



@dataclass(frozen=True)
class WebhookSettings:
    port: int = 9443
    cert_dir: Path | None = None
    """Serve ``tls.crt``/``tls.key`` from here (production); None makes a development CA and registers."""
    timeout: int = 10
    """The configuration's ``timeoutSeconds``; in production it must match deploy/webhook.yaml."""
    margin: float = 2.0
    registration: str = NAME
    """The development ValidatingWebhookConfiguration's name."""
    namespace_selector: Mapping[str, Any] | None = None
    """Limits the development registration to some namespaces (tests and benchmarks share API servers)."""

    def __post_init__(self) -> None:
        Deadline(webhook_timeout=self.timeout, margin=self.margin)  # a bad pair fails at start-up, not per request

    @property
    def deadline(self) -> Deadline:
        return Deadline(webhook_timeout=self.timeout, margin=self.margin)


def _server_context(cert: Path, key: Path) -> ssl.SSLContext:
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.load_cert_chain(cert, key)
    return context


def development_certificate(hosts: tuple[str, ...] = DEVELOPMENT_HOSTS) -> tuple[bytes, ssl.SSLContext]:
    """A fresh CA's PEM (the caBundle to register) and a server context with a certificate it signed."""
    ca = CertificateAuthority("lessor-webhook-ca")
    pair = ca.issue("lessor-webhook", hosts=hosts, server=True)
    # ssl loads key pairs from files only; they live no longer than this call.
    with tempfile.TemporaryDirectory(prefix="lessor-webhook-") as folder:
        cert, key = pair.write(Path(folder), "tls")
        return ca.cert_pem, _server_context(cert, key)


class CertificateFiles:
    """A server context that serves the current ``tls.crt``/``tls.key`` of a folder.

    The files are looked at (two ``stat`` calls) at every TLS handshake, and a
    changed pair is loaded into a new context that this handshake and the
    following ones use: rotation takes effect at the next connection, with no
    timer to run. Kubernetes replaces a mounted Secret by swapping a symlink,
    which changes the inode, so a same-size rewrite in the same clock tick is
    still noticed. A pair that does not load (say, the certificate is new and
    the key not yet) is logged and the previous one kept until the files
    change again.
    """

    def __init__(self, folder: Path) -> None:
        self.cert = folder / CERT_FILE
        self.key = folder / KEY_FILE
        self._signature = self._stat()
        self.context = _server_context(self.cert, self.key)  # unreadable at start-up: fail loudly
        self.context.sni_callback = self._on_handshake
        self._current = self.context

    def _stat(self) -> tuple[tuple[int, int, int, int], ...] | None:
        try:
            stats = (os.stat(self.cert), os.stat(self.key))
        except OSError:
            return None
        return tuple((s.st_dev, s.st_ino, s.st_mtime_ns, s.st_size) for s in stats)

    def _on_handshake(self, connection: ssl.SSLObject, _server_name: str | None, _context: ssl.SSLContext) -> None:
        # OpenSSL calls this for every ClientHello, with or without SNI.
        signature = self._stat()
        if signature is not None and signature != self._signature:
            self._signature = signature
            try:
                self._current = _server_context(self.cert, self.key)
                log.info("webhook serving certificate reloaded from %s", self.cert.parent)
            except (OSError, ssl.SSLError) as err:
                log.warning("webhook certificate in %s not reloaded, still serving the previous one: %s",
                            self.cert.parent, err)
        connection.context = self._current


@contextlib.asynccontextmanager
async def serving(app: web.Application, context: ssl.SSLContext, host: str, port: int) -> AsyncIterator[int]:
    """Serve ``app`` over HTTPS until exit; yields the bound port (useful with port 0)."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=5.0)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port, ssl_context=context).start()
        yield int(runner.addresses[0][1])
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def webhook(
    gateway: Gateway, registry: Registry, lookup: Lookup, settings: WebhookSettings, host: str,
    metrics: WebhookMetrics | None = None, queue: FairQueue | None = None,
) -> AsyncIterator[int]:
    """The webhook of ``lessor run``: served, and in development also registered, until exit; its template
    work runs in ``queue`` (the operator's render threads)."""
    app = make_app(registry, lookup, deadline=settings.deadline, metrics=metrics, queue=queue)
    if settings.cert_dir is not None:
        async with serving(app, CertificateFiles(settings.cert_dir).context, host, settings.port) as port:
            log.info("webhook on :%d with the certificate in %s", port, settings.cert_dir)
            yield port
        return
    ca_bundle, context = development_certificate()
    async with serving(app, context, host, settings.port) as port:
        url = f"https://127.0.0.1:{port}{VALIDATE_PATH}"
        configuration = development_configuration(url, ca_bundle, settings.timeout, name=settings.registration,
                                                  namespace_selector=settings.namespace_selector)
        async with registered(gateway, configuration):
            log.info("webhook on :%d, registered as %s calling %s with a development CA",
                     port, settings.registration, url)
            yield port
