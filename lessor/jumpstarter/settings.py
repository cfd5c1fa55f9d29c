"""How `lessor run` serves Jumpstarter's gRPC protocol; a module without grpc, so the operator's config can name it."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path


LEADER_WAIT_MARGIN = 10.0
"""Seconds past the leader Lease's duration that a follower holds calls by default: the candidates' retry
period and the API server's answers, with room for a busy node."""


def development_ca_dir() -> Path:
    """`$XDG_CACHE_HOME/lessor/grpc-ca` (`~/.cache/lessor/grpc-ca`): the default home of the development CA."""
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache) / "lessor" / "grpc-ca"


@dataclass(frozen=True)
class GrpcSettings:
    port: int
    endpoint: str
    """HOST:PORT the tools dial, written into every credential's `status.endpoint` and config; the TLS
    certificate must name HOST (gRPC checks it even when the tools are told `tls.insecure`)."""
    cert_dir: Path | None = None
    """Serve DIR/tls.crt and DIR/tls.key; None: a development CA and a certificate for localhost and 127.0.0.1."""
    ca_out: Path | None = None
    """Without cert_dir: write the development CA's PEM here, for `lessor credentials --ca-file`."""
    ca_dir: Path = field(default_factory=lambda: development_ca_dir())
    """Without cert_dir: where the development CA is kept (`ca.crt`, `ca.key`) and reused at every start, so that
    the configs made with it stay valid."""
    token_lifetime: float | None = None
    """Seconds a minted token is valid (its `exp`); None: no expiry (a new signing key revokes it)."""
    advertise: str | None = None
    """HOST:PORT of this replica itself, written into the leader Lease while it leads, so that the other
    replicas name it to the tools they turn away; None: the endpoint."""
    forward_to_leader: bool = True
    """A follower relays every call to the leader's advertised address (forwarding.py); False: it refuses
    them UNAVAILABLE naming that address."""
    leader_wait: float | None = None
    """Seconds a follower holds a call while no leader answers (the leader crashed, an election is under way)
    before refusing it; None: the leader Lease's duration plus LEADER_WAIT_MARGIN, the longest a takeover
    takes when the election's requests are answered."""

    auth_config: Path | None = None
    """A YAML file in the Jumpstarter controller's shape (`authentication.internal`, `authentication.jwt`:
    Kubernetes' JWT authenticators) whose issuers' OIDC tokens are accepted besides lessor's own; None: none."""
    login_port: int | None = None
    """Serve `GET /v1/auth/config` (what `jmp login client@HOST:PORT` reads) over HTTPS on this port, with
    the gRPC certificate; None: no login service."""
    login_namespace: str = "default"
    """The namespace the login service tells `jmp login` new configs default to."""

    @property
    def own_address(self) -> str:
        return self.advertise or self.endpoint


def require_extra() -> None:
    """Fail with the install command when grpc or the protocol stubs are missing (lessor without the extra)."""
    try:
        import grpc  # noqa: F401
        import jumpstarter_protocol  # noqa: F401
    except ImportError as err:
        raise RuntimeError(f"--grpc-port needs the [jumpstarter] extra (pip install 'lessor[jumpstarter]'): "
                           f"{err}") from None
