"""Dex, a real OIDC provider, built from Go modules once and cached like the control plane, for the tests of
lessor's OIDC login and for people trying it.

Dex's go.mod replaces its `api/v2` module with a folder of its own repository, so `go install` refuses it;
a build module that requires Dex's commit and the published `api/v2` cut from that same commit builds
`cmd/dex`. Dex tags releases as v2.x without a /v2 module path, so the Go module proxy knows it only by
pseudo-version: v2.44.0 is the release whose commit is also `api/v2.4.0` (a later master needs an `api/v2`
that is not published).
"""

from __future__ import annotations

import asyncio
import hashlib
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from lessor.tools.controlplane.build import BuildError, _go_env, _locked, _run, _stderr, user_cache
from lessor.tools.controlplane.processes import Child, free_port

DEX_VERSION = "v0.0.0-20250829100637-2dce75009acf"
"""Dex v2.44.0 (commit 2dce750), as the module proxy names it."""
API_VERSION = "v2.4.0"
"""github.com/dexidp/dex/api/v2 at the same commit."""
_PACKAGE = "github.com/dexidp/dex/cmd/dex"
PASSWORD = "password"
_PASSWORD_HASH = "$2a$10$2b2cU8CPhOTaGrs1HRQuAueS7JTT5ZHsHSzYiFPm1leZck7Mc8T4W"
"""bcrypt of PASSWORD, as in Dex's own example configuration."""
USER = "admin@example.com"
CLIENT_ID = "jumpstarter-cli"


def secret(client: str) -> str:
    """The client's secret: none for CLIENT_ID, a public client as jmp uses it (it sends no secret)."""
    return "" if client == CLIENT_ID else f"{client}-secret"


def ensure_dex(progress: Callable[[str], None] | None = None) -> Path:
    """The cached `dex` binary, built first if this machine has none for DEX_VERSION (minutes, once)."""
    say = progress or _stderr
    key = hashlib.sha256(f"{DEX_VERSION} {API_VERSION} {_PACKAGE}".encode()).hexdigest()[:10]
    target = user_cache("dex") / key / "dex"
    if target.is_file():
        return target
    go = shutil.which("go")
    if go is None:
        raise BuildError("Dex is built from Go modules, but `go` is not on PATH: install Go >= 1.25")
    target.parent.mkdir(parents=True, exist_ok=True)
    with _locked(target.parent.parent / ".build.lock", say):
        if target.is_file():
            return target
        say(f"building Dex {DEX_VERSION} from Go modules into {target.parent} (once)")
        started = time.monotonic()
        env = _go_env(go)
        with tempfile.TemporaryDirectory(prefix="build-", dir=target.parent.parent) as tmp:
            work = Path(tmp)
            (work / "go.mod").write_text("module lessor.dev/dexbuild\n\ngo 1.25\n")
            _run([go, "get", f"{_PACKAGE}@{DEX_VERSION}", f"github.com/dexidp/dex/api/v2@{API_VERSION}"], work, env)
            _run([go, "build", "-ldflags", "-s -w", "-o", str(work / "dex"), _PACKAGE], work, env)
            (work / "dex").replace(target)
        say(f"Dex built in {time.monotonic() - started:.0f} s")
    return target


class Dex:
    """Dex on 127.0.0.1, with one user (USER, PASSWORD) and OAuth2 clients that may use the password grant
    and the device flow. `issuer` is what tokens carry in `iss`."""

    def __init__(self, folder: Path, clients: tuple[str, ...] = (CLIENT_ID,), binary: Path | None = None) -> None:
        self.folder = folder
        self.port = free_port()
        self.issuer = f"http://127.0.0.1:{self.port}/dex"
        self.clients = clients
        self.binary = binary or ensure_dex()
        self.child: Child | None = None

    def config(self) -> dict[str, object]:
        return {
            "issuer": self.issuer,
            "storage": {"type": "memory"},
            "web": {"http": f"127.0.0.1:{self.port}"},
            "oauth2": {"passwordConnector": "local", "skipApprovalScreen": True,
                       "grantTypes": ["authorization_code", "refresh_token", "password",
                                      "urn:ietf:params:oauth:grant-type:device_code"]},
            "enablePasswordDB": True,
            "staticPasswords": [{"email": USER, "hash": _PASSWORD_HASH, "username": "admin",
                                 "userID": "08a8684b-db88-4b73-90a9-3cd1661f5466"}],
            "staticClients": [{"id": c, "name": c, "secret": secret(c), "public": c == CLIENT_ID,
                               "redirectURIs": ["http://localhost:8085/callback", "/device/callback"]}
                              for c in self.clients],
        }

    async def __aenter__(self) -> Dex:
        self.folder.mkdir(parents=True, exist_ok=True)
        config = self.folder / "dex.yaml"
        config.write_text(yaml.safe_dump(self.config()))
        self.child = Child("dex", [str(self.binary), "serve", str(config)], self.folder / "dex.log")
        await self.child.start()
        await self._ready()
        return self

    async def _ready(self, limit: float = 60.0) -> None:
        import aiohttp

        deadline = time.monotonic() + limit
        async with aiohttp.ClientSession() as session:
            while True:
                assert self.child is not None
                if not self.child.running:
                    raise RuntimeError(f"dex exited:\n{self.child.log_tail()}")
                try:
                    async with session.get(f"{self.issuer}/.well-known/openid-configuration") as response:
                        if response.status == 200:
                            return
                except aiohttp.ClientError:
                    pass
                if time.monotonic() > deadline:
                    raise RuntimeError(f"dex did not answer in {limit:.0f} s:\n{self.child.log_tail()}")
                await asyncio.sleep(0.1)

    async def __aexit__(self, *exc: object) -> None:
        if self.child is not None:
            await self.child.stop()

    async def password_token(self, client: str = CLIENT_ID, user: str = USER, password: str = PASSWORD) -> str:
        """An access token (a JWT) from the password grant, as `jmp login --username --password` gets and keeps."""
        import aiohttp

        form = {"grant_type": "password", "username": user, "password": password,
                "scope": "openid email profile", "client_id": client, "client_secret": secret(client)}
        async with aiohttp.ClientSession() as session:
            async with session.post(f"{self.issuer}/token", data=form) as response:
                body = await response.json(content_type=None)
                if response.status != 200:
                    raise RuntimeError(f"dex refused the password grant: {response.status} {body}")
        return str(body["access_token"])
