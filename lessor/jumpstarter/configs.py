"""`lessor credentials client|exporter NAME`: the YAML configs Jumpstarter's `jmp` tools read.

A ClientConfig or ExporterConfig (apiVersion jumpstarter.dev/v1alpha1), with the endpoint, the TLS trust
and the token of the object's credential Secret (`status.credential.name`, key `token`), which lessor keeps
while it serves gRPC (actors/leasing/credentials.py). An ExporterConfig's `export` is left empty: the
drivers of a board are the lab's to write.
"""

from __future__ import annotations

import base64
from datetime import UTC, datetime
from typing import Any

import yaml

from lessor.actors.api import Api
from lessor.actors.leasing.credentials import SECRET, TOKEN_KEY
from lessor.model.kinds import CLIENT, EXPORTER
from lessor.model.times import format_time
from lessor.jumpstarter.tokens import token_expiry
from lessor.model.views.leasing import ClientView, ExporterView

CONFIG_API_VERSION = "jumpstarter.dev/v1alpha1"


class NoCredential(Exception):
    """The object is missing, or lessor has not given it a credential (yet)."""


async def config_for(api: Api, word: str, namespace: str, name: str, *, endpoint: str | None = None,
                     ca_pem: bytes | None = None, insecure: bool = False) -> dict[str, Any]:
    """The config of Client or Exporter `namespace/name` (`word`: "client" or "exporter")."""
    kind = CLIENT if word == "client" else EXPORTER
    obj = await api.get(kind, namespace, name)
    if obj is None:
        raise NoCredential(f"{kind.kind} {namespace}/{name} does not exist")
    seen = (ClientView if word == "client" else ExporterView).of(obj)
    secret_name = seen.credential
    if not secret_name:
        raise NoCredential(f"{kind.kind} {namespace}/{name} has no status.credential yet: lessor mints credentials "
                           "while it serves gRPC (lessor run --grpc-port)")
    secret = await api.get(SECRET, namespace, secret_name)
    if secret is None:
        raise NoCredential(f"Secret {namespace}/{secret_name} (status.credential of {kind.kind} {name}) does not "
                           "exist: lessor makes it again while it serves gRPC (lessor run --grpc-port)")
    token_b64 = (secret.get("data") or {}).get(TOKEN_KEY)
    if not token_b64:
        raise NoCredential(f"Secret {namespace}/{secret_name} (status.credential of {kind.kind} {name}) has no "
                           f"key {TOKEN_KEY!r}")
    token = base64.b64decode(token_b64).decode()
    expiry = token_expiry(token)
    if expiry is not None and expiry <= datetime.now(UTC):
        raise NoCredential(f"the token in Secret {namespace}/{secret_name} expired at {format_time(expiry)}: "
                           f"lessor mints a new one while it serves gRPC (lessor run --grpc-port); or delete the "
                           f"Secret and run this again once {kind.kind} {name} has a new one")
    endpoint = endpoint or seen.endpoint
    if not endpoint:
        raise NoCredential(f"{kind.kind} {namespace}/{name} has no status.endpoint: give --endpoint HOST:PORT")
    config: dict[str, Any] = {
        "apiVersion": CONFIG_API_VERSION,
        "kind": "ClientConfig" if word == "client" else "ExporterConfig",
        "metadata": {"namespace": namespace, "name": name},
        "endpoint": endpoint,
        "tls": {"ca": base64.b64encode(ca_pem).decode() if ca_pem else "", "insecure": insecure},
        "token": token,
        "grpcOptions": {},
    }
    if word == "exporter":
        config["export"] = {}
    return config


def dump(config: dict[str, Any]) -> str:
    return yaml.safe_dump(config, sort_keys=False)
