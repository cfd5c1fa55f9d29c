"""The certificates lessor makes at run time (the local control plane's, the webhook's, a self-signed /metrics)
must pass the strict chain checks that Python 3.13 turns on by default (`ssl.VERIFY_X509_STRICT`): on 3.13 the
local control plane never became ready, its CA and leaves lacking key identifiers."""

from __future__ import annotations

import asyncio
import ssl
from pathlib import Path

from lessor.tls.certs import CertificateAuthority


async def test_a_client_that_checks_strictly_accepts_a_served_certificate(tmp_path: Path) -> None:
    ca = CertificateAuthority("strict-ca")
    pair = ca.issue("localhost", hosts=("localhost", "127.0.0.1"), server=True)
    (tmp_path / "tls.crt").write_bytes(pair.cert_pem)
    (tmp_path / "tls.key").write_bytes(pair.key_pem)
    serving = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    serving.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"ok")
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=serving)
    port = server.sockets[0].getsockname()[1]
    strict = ssl.create_default_context(cadata=ca.cert_pem.decode())
    strict.verify_flags |= ssl.VERIFY_X509_STRICT | getattr(ssl, "VERIFY_X509_PARTIAL_CHAIN", 0)
    async with server:
        reader, writer = await asyncio.open_connection("127.0.0.1", port, ssl=strict, server_hostname="localhost")
        assert await reader.read() == b"ok"
        writer.close()
