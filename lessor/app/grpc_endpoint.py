"""`lessor run --grpc-port`: Jumpstarter's services served on this operator's actors and informer caches.

Imported only when the port is enabled (grpc and the `jumpstarter-protocol` stubs are the `[jumpstarter]`
extra). The services know the operator only as `lessor.jumpstarter.backend.Backend`; this is where it is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

import grpc

from lessor.actors.api import Api
from lessor.jumpstarter.guard import Refusal
from lessor.jumpstarter.server import not_leading, serving
from lessor.jumpstarter.settings import GrpcSettings
from lessor.jumpstarter.oidc import AuthConfig, Issuers
from lessor.jumpstarter.tokens import Minter, SigningKey

if TYPE_CHECKING:
    from .operator import Operator


class OperatorBackend:
    """`Backend` on a running operator: the leader's actor system, its API and its informer caches."""

    def __init__(self, operator: Operator, signing_key: SigningKey, issuers: Issuers | None = None) -> None:
        self.operator = operator
        self.api: Api = operator.context.api
        self.signing_key = signing_key
        self.issuers = issuers
        self.heartbeat_timeout: timedelta = operator.context.heartbeat_timeout

    async def ask(self, address: str, message: Any) -> Any:
        system = self.operator.system
        if system is None or not self.operator.leadership.leading():
            raise Refusal(grpc.StatusCode.UNAVAILABLE, not_leading(self.operator.leadership))
        return await system.ask(address, message)

    def cached(self, kind: str, namespace: str) -> list[Mapping[str, Any]]:
        return [obj for informer in self.operator.informers if informer.resource.kind == kind
                for (ns, _), obj in list(informer.store.items()) if ns == namespace]

    def cached_one(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        for informer in self.operator.informers:
            if informer.resource.kind == kind:
                return informer.store.get((namespace, name))
        return None

    def now(self) -> datetime:
        return self.operator.context.now()


@contextlib.asynccontextmanager
async def grpc_endpoint(operator: Operator, settings: GrpcSettings, bind_address: str) -> AsyncIterator[object]:
    """The endpoint while the context is open, signing with the minter's key (or the namespace's)."""
    minter = operator.context.credentials
    key = minter.key if isinstance(minter, Minter) else SigningKey(operator.context.api,
                                                                   operator.config.operator_namespace)
    election = operator.config.leader_election
    issuers = None if settings.auth_config is None else Issuers(AuthConfig.load(settings.auth_config))
    async with serving(OperatorBackend(operator, key, issuers), operator.leadership, operator.registry, settings,
                       bind_address, lease_duration=election.lease_duration if election is not None else None) as server:
        yield server
