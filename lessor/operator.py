"""`lessor run`: the wiring. Informers feed the topology actor, which routes each change to
the exporter, lease, pool, handle and claim actors it concerns; health, metrics and the webhook
beside them. The kinds that providers create are watched as they are first seen (`created_kinds`).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass

from datetime import timedelta

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Gauge

from lessor.admission.checks import preflight_registry
from lessor.admission.lookup import GatewayLookup
from lessor.admission.server import WebhookSettings, webhook
from lessor.actors.claim import ClaimActor
from lessor.actors.claim_protocol import KINDS
from lessor.actors.context import Context
from lessor.actors.exporter import ExporterActor
from lessor.actors.handle import HandleActor
from lessor.actors.lease import LeaseActor
from lessor.actors.pool import PoolActor
from lessor.api_adapter import GatewayApi
from lessor.created_kinds import CreatedKinds, KindsActor
from lessor.gateway import LESSOR_RESOURCES, Gateway, Informer, WatchEvent
from lessor.mailbox import ActorSystem, MailboxFull, Supervision
from lessor.topology import Topology
from lessor.topology.actor import Event, Graph, Synced, TopologyActor
from lessor.probes import health_app, metrics_app, serve
from lessor.telemetry import configure_telemetry

log = logging.getLogger(__name__)
_tracer = trace.get_tracer("lessor.operator")


@dataclass
class OperatorConfig:
    kubeconfig: str | None = None
    operator_namespace: str = "lessor-system"
    bind_address: str = "0.0.0.0"
    health_port: int = 8081
    metrics_port: int = 8080
    watch_inactivity_timeout: float = 120.0
    exporter_heartbeat_timeout: float = 60.0
    decision_window: float = 0.25
    webhook: WebhookSettings | None = None
    """The preflight admission webhook; None runs without one (`--no-webhook`)."""


class Operator:
    def __init__(self, config: OperatorConfig, gateway: Gateway, registry: CollectorRegistry) -> None:
        self.config = config
        self.gateway = gateway
        self.registry = registry
        self.informers = [
            Informer(gateway, res, self.on_event, inactivity_timeout=config.watch_inactivity_timeout)
            for res in LESSOR_RESOURCES
        ]
        self.created_kinds = CreatedKinds(gateway, self.on_event, inactivity_timeout=config.watch_inactivity_timeout)
        self._events = Gauge("lessor_watch_objects", "Objects in the informer caches", ["kind"], registry=registry)
        self.graph = Graph(Topology(config.operator_namespace))
        self.context = Context(
            api=GatewayApi(gateway), operator_namespace=config.operator_namespace,
            heartbeat_timeout=timedelta(seconds=config.exporter_heartbeat_timeout),
            decision_window=config.decision_window,
        )
        self.system: ActorSystem | None = None

    def ready(self) -> tuple[bool, str]:
        waiting = [i.resource.kind for i in self.informers if not i.synced.is_set()]
        return (not waiting, "caches synced" if not waiting else f"waiting for caches: {', '.join(waiting)}")

    async def on_event(self, event: WatchEvent) -> None:
        kind = event.object.get("kind", "")
        informers = [*self.informers, *self.created_kinds.informers.values()]
        self._events.labels(kind).set(sum(len(i.store) for i in informers if i.resource.kind == kind))
        if kind == "ResourceProvider" and event.type != "DELETED":
            self.created_kinds.watch_provider(event.object)
        # The root of a trace: from this watch event through every actor message it causes.
        with _tracer.start_as_current_span(
            f"receive {event.object.get('kind', '')} {event.type}", kind=trace.SpanKind.CONSUMER,
            attributes={"messaging.system": "kubernetes-watch", "messaging.operation.type": "receive",
                        "k8s.object.name": event.object.get("metadata", {}).get("name", "")},
        ):
            await self._to_topology(Event(event.type, event.object))

    async def _to_topology(self, message: object) -> None:
        """The informers wait while the topology's mailbox is full: backpressure, nothing dropped."""
        assert self.system is not None
        while True:
            try:
                self.system.tell("topology", message)
                return
            except MailboxFull:
                await asyncio.sleep(0.01)

    def _register_actors(self, system: ActorSystem) -> None:
        # Kill-tolerant supervision: chaos may kill one actor many times; each restart rebuilds
        # its state from the API, so restarting is always safe.
        tolerant = Supervision(max_restarts=1000, within=60.0, backoff=0.01, max_backoff=1.0)
        system.register("topology", lambda _: TopologyActor(self.graph), capacity=1_000_000, supervision=tolerant)
        system.register("exporter", lambda a: ExporterActor(a, self.context), capacity=100_000,
                        supervision=tolerant)
        system.register("lease", lambda a: LeaseActor(a, self.context), capacity=100_000, supervision=tolerant)
        system.register("pool", lambda a: PoolActor(a, self.context), capacity=100_000, supervision=tolerant)
        system.register("handle", lambda a: HandleActor(a, self.context), capacity=100_000, supervision=tolerant)
        system.register("claim", lambda a: ClaimActor(a, self.context), capacity=100_000, supervision=tolerant)
        system.register(KINDS, lambda _: KindsActor(self.created_kinds), supervision=tolerant)

    async def run(self) -> None:
        runners = [
            await serve(health_app(self.ready), self.config.bind_address, self.config.health_port),
            await serve(metrics_app(self.registry), self.config.bind_address, self.config.metrics_port),
        ]
        log.info("health on :%d, metrics on :%d", self.config.health_port, self.config.metrics_port)
        try:
            async with ActorSystem(registry=self.registry, on_escalation=_escalated) as system, \
                    self._webhook(), asyncio.TaskGroup() as tasks:
                self.system = system
                self._register_actors(system)
                self.created_kinds.attach(tasks)
                for informer in self.informers:
                    tasks.create_task(informer.run(), name=f"informer {informer.resource.kind}")
                tasks.create_task(self._announce_ready())
        finally:
            for runner in runners:
                await runner.cleanup()

    def _webhook(self) -> contextlib.AbstractAsyncContextManager[object]:
        settings = self.config.webhook
        if settings is None:
            return contextlib.nullcontext()
        registry = preflight_registry(self.config.operator_namespace)
        return webhook(self.gateway, registry, GatewayLookup(self.gateway), settings, self.config.bind_address)

    async def _announce_ready(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        await self.created_kinds.synced(timeout=30.0)  # what providers created exists before handles are judged
        await self._to_topology(Synced())
        log.info("caches synced: %s", ", ".join(f"{i.resource.kind}={len(i.store)}" for i in self.informers))


def _escalated(address: str, error: BaseException) -> None:
    log.error("%s kept failing and was stopped: %s", address, error)


async def run_operator(config: OperatorConfig) -> None:
    provider = configure_telemetry()  # before the actor system: it decides then whether to trace
    registry = CollectorRegistry()
    try:
        async with await Gateway.connect(config.kubeconfig, registry=registry) as gateway:
            await Operator(config, gateway, registry).run()
    finally:
        if provider is not None:
            provider.shutdown()
