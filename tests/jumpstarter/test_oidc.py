"""OIDC tokens from a real provider (Dex, built from Go modules) on `lessor run --grpc-port --grpc-auth-config`,
against the real API server (docs/jumpstarter-grpc.md, "OIDC login")."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path

import grpc
import pytest
import yaml
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from prometheus_client import CollectorRegistry

from lessor.app.install import install
from lessor.app.operator import Operator, OperatorConfig
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, NAMESPACE
from lessor.jumpstarter.oidc import AuthConfig, Issuers
from lessor.jumpstarter.settings import GrpcSettings
from lessor.jumpstarter.tokens import InvalidToken
from lessor.tls.certs import CertificateAuthority
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.dex import CLIENT_ID, PASSWORD, USER, Dex
from lessor.tools.controlplane.processes import free_port
from tests.jumpstarter.test_grpc import API, JMP, LESSOR, NS, OPS, Lab, channel, metadata, run
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver

OTHER_APP = "other-app"
NAME = "admin"
"""Dex's `name` claim of USER: the claim the username maps from, as jmp asks for `openid profile` only."""
PREFIX = "dex:"


@dataclass
class OidcLab(Lab):
    dex: Dex | None = None
    auth: Path | None = None
    login: str = ""


def auth_config(dex: Dex) -> dict[str, object]:
    """The Jumpstarter controller's config shape: `authentication.jwt` in Kubernetes' format."""
    return {"authentication": {"internal": {"prefix": "internal:"}, "jwt": [{
        "issuer": {"url": dex.issuer, "audiences": [CLIENT_ID]},
        "claimMappings": {"username": {"claim": "name", "prefix": PREFIX}}}]},
        "provisioning": {"enabled": True}}


@pytest.fixture(scope="module")
async def lab(tmp_path_factory: pytest.TempPathFactory) -> AsyncIterator[OidcLab]:
    folder = tmp_path_factory.mktemp("oidc")
    ca = CertificateAuthority("test-ca")
    (folder / "certs").mkdir()
    ca.issue("lessor-grpc", hosts=("localhost",), server=True).write(folder / "certs", "tls")
    (folder / "ca.pem").write_bytes(ca.cert_pem)
    (folder / "certs" / "ca.crt").write_bytes(ca.cert_pem)  # what the login service hands out as caBundle
    port, login = free_port(), free_port()
    async with Dex(folder / "dex", clients=(CLIENT_ID, OTHER_APP)) as dex, \
            ControlPlane(folder / "cp", ensure_binaries(), controller_manager=False) as cp:
        auth = folder / "auth.yaml"
        auth.write_text(yaml.safe_dump(auth_config(dex)))
        async with await Gateway.connect(str(cp.kubeconfig)) as kube:
            await install(kube, OPS, progress=lambda _: None)
            await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
            config = OperatorConfig(operator_namespace=OPS, bind_address="127.0.0.1", health_port=free_port(),
                                    metrics_port=free_port(), exporter_heartbeat_timeout=15.0, leader_election=None,
                                    grpc=GrpcSettings(port=port, endpoint=f"localhost:{port}",
                                                      cert_dir=folder / "certs", auth_config=auth,
                                                      login_port=login, login_namespace=NS))
            async with await Gateway.connect(str(cp.kubeconfig), registry=CollectorRegistry()) as gateway:
                op = Operator(config, gateway, CollectorRegistry())
                task = asyncio.create_task(op.run())
                try:
                    while not op.ready()[0]:
                        assert not task.done(), task.exception()
                        await asyncio.sleep(0.05)
                    yield OidcLab(kube, cp.kubeconfig, f"localhost:{port}", folder / "ca.pem", folder,
                                  dex=dex, auth=auth, login=f"localhost:{login}")
                finally:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task


async def _client(lab: OidcLab, name: str, username: str | None) -> None:
    spec = {} if username is None else {"username": username}
    await lab.kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {"name": name},
                                       "spec": spec})


async def _list(lab: OidcLab, name: str, token: str) -> tuple[grpc.StatusCode, str]:
    async with channel(lab) as ch:
        stub = client_pb2_grpc.ClientServiceStub(ch)
        try:
            await stub.ListLeases(client_pb2.ListLeasesRequest(parent=f"namespaces/{NS}"),
                                  metadata=metadata("Client", name, token))
        except grpc.aio.AioRpcError as err:
            return err.code(), err.details() or ""
        return grpc.StatusCode.OK, ""


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _with(token: str, part: int, change: dict[str, object]) -> str:
    """`token` with claims (part 1) or header fields (part 0) changed, its signature kept."""
    parts = token.split(".")
    doc = json.loads(base64.urlsafe_b64decode(parts[part] + "=" * (-len(parts[part]) % 4)))
    parts[part] = _b64(json.dumps({**doc, **change}).encode())
    return ".".join(parts)


async def test_a_dex_login_acts_as_the_client_whose_username_it_maps_to(lab: OidcLab) -> None:
    assert lab.dex is not None
    await _client(lab, "alice", PREFIX + NAME)
    await _client(lab, "bob", None)
    token = await lab.dex.password_token()
    assert await _list(lab, "alice", token) == (grpc.StatusCode.OK, "")
    code, details = await _list(lab, "bob", token)
    assert code == grpc.StatusCode.UNAUTHENTICATED
    assert f"{PREFIX}{NAME} is not Client {NS}/bob's spec.username" in details


async def test_bad_oidc_tokens_are_unauthenticated_naming_the_reason(lab: OidcLab) -> None:
    assert lab.dex is not None
    await _client(lab, "carol", PREFIX + NAME)
    token = await lab.dex.password_token()
    other = await lab.dex.password_token(client=OTHER_APP)
    cases = {
        "audience": (other, f"audience '{OTHER_APP}' is none of ['{CLIENT_ID}']"),
        "signature": (_with(token, 1, {"email": "mallory@example.com"}), "signature does not match"),
        "unknown key": (_with(token, 0, {"kid": "made-up"}), "key id 'made-up' is not among"),
        "issuer": (_with(token, 1, {"iss": "https://elsewhere.example"}), "issuer 'https://elsewhere.example' is not one lessor trusts"),
    }
    for what, (bad, reason) in cases.items():
        code, details = await _list(lab, "carol", bad)
        assert (code, reason in details) == (grpc.StatusCode.UNAUTHENTICATED, True), (what, details)


async def test_an_expired_token_and_a_rotation_are_told_apart(lab: OidcLab) -> None:
    """The same real token, checked as if three days later (Dex's tokens live 24 h): expired, naming how long ago; a key id the cache
    lacks refetches the issuer's keys once per period, however many calls bring one."""
    assert lab.dex is not None and lab.auth is not None
    token = await lab.dex.password_token()
    later = Issuers(AuthConfig.load(lab.auth), clock=lambda: time.time() + 3 * 86400)
    with pytest.raises(InvalidToken, match="the token expired .* s ago"):
        await later.username(token)
    now = Issuers(AuthConfig.load(lab.auth), refetch_every=3600)
    assert await now.username(token) == PREFIX + NAME
    assert now.fetches == 1
    for _ in range(5):
        with pytest.raises(InvalidToken, match="key id 'rotated' is not among"):
            await now.username(_with(token, 0, {"kid": "rotated"}))
    assert now.fetches == 1, "refetches are bounded to one per period"


def test_the_configuration_names_what_is_wrong(tmp_path: Path) -> None:
    bad = {"authentication": {"jwt": [{"issuer": {"url": "https://idp.example", "audiences": ["a"]},
                                        "claimMappings": {"username": {"claim": "email"}}}]}}
    (tmp_path / "auth.yaml").write_text(yaml.safe_dump(bad))
    with pytest.raises(ValueError, match=r"jwt\[0\]\.claimMappings\.username\.prefix is required"):
        AuthConfig.load(tmp_path / "auth.yaml")


async def test_a_first_login_provisions_the_client_it_names(lab: OidcLab) -> None:
    """`provisioning.enabled`, as upstream: the Client the call names is made with the user as spec.username."""
    assert lab.dex is not None
    token = await lab.dex.password_token()
    assert await _list(lab, "erin", token) == (grpc.StatusCode.OK, "")
    made = await lab.kube.get(CLIENT, NS, "erin")
    assert made is not None and made["spec"] == {"username": PREFIX + NAME}


async def test_the_login_service_answers_what_jmp_login_reads(lab: OidcLab) -> None:
    """jmp 0.9.0's own reader of `GET /v1/auth/config` (-k: the test CA is not the system's), in a process of its
    own: importing `jumpstarter_cli` swaps `ssl.SSLContext` for truststore's (`inject_into_ssl`), after which aiohttp
    no longer recognises a context made before as one and connects unverified, without its client certificate
    (every later request of the suite's API server gateway was anonymous)."""
    assert lab.dex is not None
    reader = ("import asyncio, json, sys; from jumpstarter_cli.login import fetch_auth_config; "
              "print(json.dumps(asyncio.run(fetch_auth_config(sys.argv[1], insecure_tls=True))))")
    done = await run(sys.executable, "-c", reader, lab.login)
    assert done.returncode == 0, done.stdout
    got = json.loads(done.stdout.splitlines()[-1])
    assert got["grpcEndpoint"] == lab.endpoint and got["namespace"] == NS
    assert got["oidc"] == [{"issuer": lab.dex.issuer, "clientId": CLIENT_ID, "audiences": [CLIENT_ID]}]
    assert got["caBundle"] == lab.ca.read_text()


async def test_the_real_jmp_login_gets_a_token_that_lists_leases(lab: OidcLab, tmp_path: Path) -> None:
    """`jmp login frank@HOST:PORT --username --password` (0.9.0): the login service, then Dex's password grant;
    the config it saves works with `jmp get leases`, and Client frank is provisioned on that first call."""
    env_home = tmp_path / "jmp"
    done = await run(str(JMP), "login", f"frank@{lab.login}", "-k", "--nointeractive", "--unsafe",
                     "--username", USER, "--password", PASSWORD, env={"JMP_CLIENT_CONFIG_HOME": str(env_home)})
    assert done.returncode == 0, done.stdout
    listed = await run(str(JMP), "get", "leases", "--client", "frank",
                       env={"JMP_CLIENT_CONFIG_HOME": str(env_home)})
    assert listed.returncode == 0, listed.stdout
    made = await lab.kube.get(CLIENT, NS, "frank")
    assert made["spec"] == {"username": PREFIX + NAME}


def test_lessor_run_names_a_mistake_in_the_auth_config_before_starting(tmp_path: Path) -> None:
    (tmp_path / "auth.yaml").write_text(yaml.safe_dump({"authentication": {"jwt": [{"issuer": {
        "url": "https://idp.example", "audiences": ["a"]}, "claimMappings": {"username": {"expression": "x"}}}]}}))
    done = subprocess.run([str(LESSOR), "run", "--grpc-port", str(free_port()), "--grpc-auth-config",
                           str(tmp_path / "auth.yaml"), "--kubeconfig", str(tmp_path / "none")],
                          capture_output=True, text=True, timeout=scaled(60))
    assert done.returncode == 1
    assert "claimMappings.username.expression: CEL expressions are not supported" in done.stderr
