"""`lessor run --grpc-port`: Jumpstarter's services served on this operator's actors and informer caches.

Imported only when the port is enabled (grpc and the `jumpstarter-protocol` stubs are the `[jumpstarter]`
extra). The services know the operator only as `lessor.jumpstarter.backend.Backend`; this is where it is built.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from datetime import datetime, timedelta
from typing import Any

import grpc
from prometheus_client import CollectorRegistry

from lessor.actors.api import Api
from lessor.actors.context import Context
from lessor.gateway import Informer
from lessor.leadership.election import Leadership
from lessor.jumpstarter.guard import Refusal
from lessor.jumpstarter.server import not_leading, serving
from lessor.jumpstarter.settings import GrpcSettings
from lessor.jumpstarter.oidc import AuthConfig, Issuers
from lessor.jumpstarter.tokens import Minter, SigningKey
from lessor.mailbox import ActorSystem


class OperatorBackend:
    """`Backend` on a running operator: the leader's actor system (`system()`: None between terms), its API and
    its informer caches."""

    def __init__(self, context: Context, system: Callable[[], ActorSystem | None], leadership: Leadership,
                 informers: Sequence[Informer], signing_key: SigningKey, issuers: Issuers | None = None) -> None:
        self.context, self.system, self.leadership, self.informers = context, system, leadership, informers
        self.api: Api = context.api
        self.signing_key = signing_key
        self.issuers = issuers
        self.heartbeat_timeout: timedelta = context.heartbeat_timeout

    async def ask(self, address: str, message: Any) -> Any:
        system = self.system()
        if system is None or not self.leadership.leading():
            raise Refusal(grpc.StatusCode.UNAVAILABLE, not_leading(self.leadership))
        return await system.ask(address, message)

    def cached(self, kind: str, namespace: str) -> list[Mapping[str, Any]]:
        return [obj for informer in self.informers if informer.resource.kind == kind
                for (ns, _), obj in list(informer.store.items()) if ns == namespace]

    def cached_one(self, kind: str, namespace: str, name: str) -> Mapping[str, Any] | None:
        for informer in self.informers:
            if informer.resource.kind == kind:
                return informer.store.get((namespace, name))
        return None

    def now(self) -> datetime:
        return self.context.now()


@contextlib.asynccontextmanager
async def grpc_endpoint(backend: OperatorBackend, registry: CollectorRegistry, settings: GrpcSettings,
                        bind_address: str, *, lease_duration: float | None) -> AsyncIterator[object]:
    """The endpoint while the context is open (`lease_duration`: the leader Lease's, None without election)."""
    async with serving(backend, backend.leadership, registry, settings, bind_address,
                       lease_duration=lease_duration) as server:
        yield server


def signing_key(context: Context, namespace: str) -> SigningKey:
    """The minter's key, or the namespace's (read, never made, when this replica mints nothing)."""
    minter = context.credentials
    return minter.key if isinstance(minter, Minter) else SigningKey(context.api, namespace)


def issuers_of(settings: GrpcSettings) -> Issuers | None:
    """The OIDC issuers of `--grpc-auth-config`, if given."""
    return None if settings.auth_config is None else Issuers(AuthConfig.load(settings.auth_config))
