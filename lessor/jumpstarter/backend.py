"""What the Jumpstarter services need of the operator (lessor/app/grpc_endpoint.py builds it on a running one)."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, Protocol

from lessor.actors.api import Api

from .oidc import Issuers
from .tokens import SigningKey

Object = Mapping[str, Any]


class Backend(Protocol):
    """What the operator gives the services (lessor/app/grpc_endpoint.py builds it)."""

    api: Api
    signing_key: SigningKey
    issuers: Issuers | None
    """The configured OIDC issuers (--grpc-auth-config); None: lessor's own tokens only."""
    heartbeat_timeout: timedelta

    async def ask(self, address: str, message: Any) -> Any:
        """Ask an actor of the leader's system; NotLeader on a follower."""
        ...

    def cached(self, kind: str, namespace: str) -> list[Object]:
        """The informers' objects of `kind` in `namespace`."""
        ...

    def cached_one(self, kind: str, namespace: str, name: str) -> Object | None:
        """The informers' object, or None."""
        ...

    def now(self) -> datetime: ...
