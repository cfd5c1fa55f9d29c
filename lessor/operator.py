"""`lessor run`: informers for every lessor kind, health and metrics.

Until the actor issues land, the operator only keeps its caches in sync; the
actors plug into `Operator.on_event`.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field

from prometheus_client import CollectorRegistry, Gauge

from lessor.gateway import LESSOR_RESOURCES, Gateway, Informer, WatchEvent
from lessor.probes import health_app, metrics_app, serve

log = logging.getLogger(__name__)


@dataclass
class OperatorConfig:
    kubeconfig: str | None = None
    operator_namespace: str = "lessor-system"
    bind_address: str = "0.0.0.0"
    health_port: int = 8081
    metrics_port: int = 8080
    watch_inactivity_timeout: float = 120.0
    extra: dict[str, object] = field(default_factory=dict)


class Operator:
    def __init__(self, config: OperatorConfig, gateway: Gateway, registry: CollectorRegistry) -> None:
        self.config = config
        self.gateway = gateway
        self.registry = registry
        self.informers = [
            Informer(gateway, res, self.on_event, inactivity_timeout=config.watch_inactivity_timeout)
            for res in LESSOR_RESOURCES
        ]
        self._events = Gauge("lessor_watch_objects", "Objects in the informer caches", ["kind"], registry=registry)

    def ready(self) -> tuple[bool, str]:
        waiting = [i.resource.kind for i in self.informers if not i.synced.is_set()]
        return (not waiting, "caches synced" if not waiting else f"waiting for caches: {', '.join(waiting)}")

    async def on_event(self, event: WatchEvent) -> None:
        self._events.labels(event.object.get("kind", "")).set(
            sum(len(i.store) for i in self.informers if i.resource.kind == event.object.get("kind"))
        )

    async def run(self) -> None:
        runners = [
            await serve(health_app(self.ready), self.config.bind_address, self.config.health_port),
            await serve(metrics_app(self.registry), self.config.bind_address, self.config.metrics_port),
        ]
        log.info("health on :%d, metrics on :%d", self.config.health_port, self.config.metrics_port)
        try:
            async with asyncio.TaskGroup() as tasks:
                for informer in self.informers:
                    tasks.create_task(informer.run(), name=f"informer {informer.resource.kind}")
                tasks.create_task(self._announce_ready())
        finally:
            for runner in runners:
                await runner.cleanup()

    async def _announce_ready(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        log.info("caches synced: %s", ", ".join(f"{i.resource.kind}={len(i.store)}" for i in self.informers))


async def run_operator(config: OperatorConfig) -> None:
    registry = CollectorRegistry()
    async with await Gateway.connect(config.kubeconfig, registry=registry) as gateway:
        await Operator(config, gateway, registry).run()
