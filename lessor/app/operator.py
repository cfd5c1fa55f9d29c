"""`lessor run`: the wiring. Informers feed the topology actor, which routes each change to
the exporter, lease, pool, handle and claim actors it concerns; health, metrics and the webhook
beside them. The kinds that providers create are watched as they are first seen (`created_kinds`).

Every replica watches, keeps the topology and serves the webhook; only the elected leader
(`lessor.leadership.election`) announces `Synced`, which starts the object actors, and only it may write.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Mapping
from dataclasses import dataclass

from datetime import timedelta
from pathlib import Path
from typing import Any

from aiohttp import web
from opentelemetry import trace
from opentelemetry.context import Context as TraceContext
from prometheus_client import CollectorRegistry, Gauge, disable_created_metrics

from lessor.admission.checks import preflight_registry
from lessor.admission.lookup import CacheLookup, GatewayLookup
from lessor.admission.metrics import WebhookMetrics
from lessor.admission.server import CertificateFiles, WebhookSettings, development_certificate, webhook
from lessor.actors.provisioning.claim import ClaimActor
from lessor.actors.provisioning.protocol import KINDS
from lessor.actors.context import Context
from lessor.actors.leasing.client import ClientActor
from lessor.actors.leasing.exporter import ONLINE, ExporterActor
from lessor.actors.provisioning.handle import HandleActor
from lessor.actors.leasing.lease import LeaseActor
from lessor.actors.provisioning.pool import PoolActor
from lessor.actors.provisioning.throttle import THROTTLE
from lessor.actors.leasing.validity import CLIENT_RULE, POLICY_RULE
from lessor.actors.provisioning.validity import PROVIDER_RULE
from lessor.actors.validity import ValidActor
from lessor.app.api_adapter import GatewayApi
from lessor.app.created_kinds import CreatedKinds, KindsActor
from lessor.events.recorder import EventRecorder, GatewaySink
from lessor.gateway import LESSOR_RESOURCES, Gateway, Informer, WatchEvent
from lessor.jumpstarter.settings import GrpcSettings
from lessor.jumpstarter.tokens import Minter, SigningKey
from lessor.leadership.election import ElectionSettings, leadership
from lessor.model.labels import HOLDER_GRPC
from lessor.health.memory import StartupFreezer, settle_after_start
from lessor.metrics.auth import MetricsAuthorizer, authorize_or_error
from lessor.mailbox import ActorSystem, MailboxFull, Supervision
from lessor.mailbox.lanes import READING, tenant_context
from lessor.model.fields import mapping_at
from lessor.model.views.conditions import find_condition
from lessor.model.keys import split_address
from lessor.topology import Topology
from lessor.topology.actor import ASK_TIMEOUT as TOPOLOGY_ASK_TIMEOUT
from lessor.topology.actor import Event, Synced, TopologyActor, TopologyState, tenant_of

from .topology_questions import topology_state
from lessor.health.probes import ProbeServer, metrics_app, serve
from lessor.metrics.state import StateMetrics, runtime_collectors
from lessor.telemetry.tracing import configure_telemetry, unrecorded
from lessor.metrics.render import RenderQueueMetrics
from lessor.templates.budget import FairQueue, switch_fast
from lessor.health.watchdogs import ApiReachability, LoopLag

log = logging.getLogger(__name__)


def _namespace(address: str) -> str | None:
    """The tenant an object's actor works for (`register(..., tenant=)`): its namespace (None, the cluster's
    own turns, for an address of another form: `tenant` must not raise)."""
    try:
        return split_address(address)[0]
    except ValueError:
        return None


@dataclass
class OperatorConfig:
    kubeconfig: str | None = None
    operator_namespace: str = "lessor-system"
    bind_address: str = "0.0.0.0"
    health_port: int = 8081
    metrics_port: int = 8080
    metrics_secure: bool = False
    """HTTPS, and only for bearer tokens the API server says may `get` /metrics (TokenReview, SubjectAccessReview)."""
    metrics_cert_dir: Path | None = None
    """With metrics_secure: serve DIR/tls.crt and DIR/tls.key (reloaded); None: a self-signed certificate."""
    watch_inactivity_timeout: float = 120.0
    exporter_heartbeat_timeout: float = 60.0
    decision_window: float = 0.25
    webhook: WebhookSettings | None = None
    """The preflight admission webhook; None runs without one (`--no-webhook`)."""
    leader_election: ElectionSettings | None = None
    """None: the only replica, leader from the start (`--no-leader-elect`; `lessor run` elects by default)."""
    api_unreachable_timeout: float = 30.0
    """/readyz fails once the API server has not answered for this long."""
    max_loop_lag: float = 5.0
    """/healthz fails while the event loop lags more than this."""
    grpc: GrpcSettings | None = None
    """Jumpstarter's gRPC protocol (docs/jumpstarter-grpc.md); None: not served, and no credentials minted."""
    events_namespace_burst: int = 20
    events_namespace_qps: float = 0.5
    """The storm budget of Normal Events per namespace (lessor/events/recorder.py): past it, one summary Event per reason."""


REFRESH_TIMEOUT = 60.0
"""Seconds a new leader waits for its fresh listing of ResourceHandles before it decides from its cache."""


class Operator:
    def __init__(self, config: OperatorConfig, gateway: Gateway, registry: CollectorRegistry,
                 tracer_provider: trace.TracerProvider | None = None) -> None:
        """`tracer_provider`: where the spans go (default: the global one `lessor.telemetry.tracing` installs)."""
        self.config = config
        self.gateway = gateway
        self.registry = registry
        self.tracer_provider = tracer_provider
        self._tracer = trace.get_tracer("lessor.app.operator", tracer_provider=tracer_provider)
        # Whether spans are recorded at all (as `lessor.mailbox` decides): without, a watch event starts no span.
        self._traced = not isinstance(tracer_provider or trace.get_tracer_provider(),
                                      (trace.ProxyTracerProvider, trace.NoOpTracerProvider))
        self.informers = [
            Informer(gateway, res, self.on_event, inactivity_timeout=config.watch_inactivity_timeout)
            for res in LESSOR_RESOURCES
        ]
        self.created_kinds = CreatedKinds(gateway, self.on_event, inactivity_timeout=config.watch_inactivity_timeout)
        self._events = Gauge("lessor_watch_objects", "Objects in the informer caches", ["kind"], registry=registry)
        runtime_collectors(registry)
        self.state_metrics = StateMetrics(self._cached, registry)
        self.topology_state = topology_state(Topology(config.operator_namespace))
        self.leadership = leadership(gateway, config.operator_namespace, config.leader_election, registry,
                                     advertise={HOLDER_GRPC: config.grpc.own_address} if config.grpc else None)
        self.loop_lag = LoopLag(config.max_loop_lag, registry)
        # The operator's render threads, its actors' and its webhook's (templates/budget.py): closed at stop.
        self.rendering = FairQueue()
        self.render_queue = RenderQueueMetrics(registry, self.rendering)
        self.reachability = ApiReachability(gateway, config.api_unreachable_timeout)
        # Events are writes like any other: fenced by the leadership, reported as the leader's identity.
        self.events = EventRecorder(GatewaySink(gateway, fence=self.leadership.fence),
                                    instance=self.leadership.identity, registry=registry,
                                    namespace_burst=config.events_namespace_burst,
                                    namespace_rate=config.events_namespace_qps)
        api = GatewayApi(gateway, fence=self.leadership.fence, refused=self.leadership.refused)
        self.context = Context(
            api=api,
            operator_namespace=config.operator_namespace,
            heartbeat_timeout=timedelta(seconds=config.exporter_heartbeat_timeout),
            decision_window=config.decision_window, events=self.events, rendering=self.rendering,
            credentials=Minter(SigningKey(api, config.operator_namespace), config.grpc.endpoint,
                               config.grpc.token_lifetime)
            if config.grpc else None,
        )
        self.system: ActorSystem | None = None
        self._first_lists: TraceContext | None = None  # the start-up listings' trace (`run`)
        self._accepting = asyncio.Event()  # set while `system` takes the informers' events
        self._settled = False  # start-up memory frozen and trimmed (lessor/health/memory.py)
        self._freezer: StartupFreezer | None = StartupFreezer()  # until start-up is quiet, freeze as caches fill

    def ready(self) -> tuple[bool, str]:
        waiting = [i.resource.kind for i in self.informers if not i.synced.is_set()]
        if waiting:
            return False, f"waiting for caches: {', '.join(waiting)}"
        reachable, detail = self.reachability.ready()
        if not reachable:
            return False, detail
        return True, f"caches synced ({'leader' if self.leadership.leading() else 'follower'})"

    def _cached(self, kind: str) -> list[dict[str, Any]]:
        return [obj for i in self.informers if i.resource.kind == kind for obj in list(i.store.values())]

    async def on_event(self, event: WatchEvent) -> None:
        kind = event.object.get("kind", "")
        if self._freezer is not None:
            self._freezer.note()
        self.state_metrics.observe(event)
        informers = [*self.informers, *self.created_kinds.informers.values()]
        self._events.labels(kind).set(sum(len(i.store) for i in informers if i.resource.kind == kind))
        if kind == "ResourceProvider" and event.type != "DELETED":
            self.created_kinds.watch_provider(event.object)
        if not self._traced:
            # No span at all: a non-recording one cost about half of the informer's work per event (py-spy, lease
            # storm), and the informers take no turns: every event's cost delays every namespace's next event.
            await self._to_topology(Event(event.type, event.object))
            return
        # The root of a trace, from this watch event through every actor message it causes; or, when the
        # event reports one of lessor's own writes, the next step of that write's trace (gateway/causes.py).
        # A heartbeat that changes nothing is not worth a trace: its whole story goes unrecorded.
        namespace, name = event.key
        cause = self.gateway.causes.cause_of(kind, event.object)
        if cause is not None:
            parent: trace.Span | None = trace.NonRecordingSpan(cause)
        else:
            parent = unrecorded() if idle_heartbeat(event) else None
        with self._tracer.start_as_current_span(
            f"receive {kind}", kind=trace.SpanKind.CONSUMER,
            context=trace.set_span_in_context(parent) if parent is not None else None,
            attributes={"messaging.system": "kubernetes-watch", "messaging.operation.name": "receive",
                        "messaging.operation.type": "receive", "messaging.destination.name": kind,
                        "k8s.event.type": event.type, "k8s.namespace.name": namespace,
                        "k8s.object.name": name},
        ):
            await self._to_topology(Event(event.type, event.object))

    async def _to_topology(self, message: object) -> None:
        """The informers wait while the topology's mailbox is full, or between two actor systems:
        backpressure, nothing dropped."""
        while True:
            await self._accepting.wait()
            assert self.system is not None
            try:
                self.system.tell("topology", message)
                return
            except MailboxFull:
                await asyncio.sleep(0.01)

    def _register_actors(self, system: ActorSystem) -> None:
        # Kill-tolerant supervision: chaos may kill one actor many times; each restart rebuilds
        # its state from the API, so restarting is always safe.
        tolerant = Supervision(max_restarts=1000, within=60.0, backoff=0.01, max_backoff=1.0)
        # Every object actor's steps take turns by namespace (`tenant=`, mailbox/turns.py), so one namespace's
        # storm of busy actors costs another's lease a round of namespaces per hop, not a step of each of the
        # storm's actors (issue 23). The topology serves every namespace: it takes no turns (it would make
        # a lone namespace look contended), and its mailbox takes the namespaces in turn (`fair_key`).
        system.register("topology", lambda _: TopologyActor(self.topology_state), capacity=1_000_000,
                        supervision=tolerant, ask_timeout=TOPOLOGY_ASK_TIMEOUT, fair_key=tenant_of)
        # At a first start every exporter writes its Online condition (clients, policies and providers their
        # Valid one): thousands of starts suspended on the gateway's 24 writes in flight held ~5 KB each, and
        # the allocator kept that memory after. None of these starts waits on an actor of its own kind (they
        # ask only the topology, and an exporter its leases), so bounding them cannot stall.
        system.register("exporter", lambda a: ExporterActor(a, self.context), capacity=100_000,
                        supervision=tolerant, max_starting=WRITING_STARTS, tenant=_namespace)
        system.register("lease", lambda a: LeaseActor(a, self.context), capacity=100_000, supervision=tolerant,
                        tenant=_namespace)
        system.register("pool", lambda a: PoolActor(a, self.context), capacity=100_000, supervision=tolerant,
                        tenant=_namespace)
        system.register("handle", lambda a: HandleActor(a, self.context), capacity=100_000, supervision=tolerant,
                        tenant=_namespace)
        system.register("claim", lambda a: ClaimActor(a, self.context), capacity=100_000, supervision=tolerant,
                        tenant=_namespace)
        system.register(KINDS, lambda _: KindsActor(self.created_kinds), supervision=tolerant)
        # The Valid condition of clients, policies and providers; idle ones passivate (a change wakes them).
        # A Client's actor also keeps its Jumpstarter credential when gRPC is served (leasing/credentials.py).
        for prefix, actor, rule in (("client", ClientActor, CLIENT_RULE), ("policy", ValidActor, POLICY_RULE),
                                    ("provider", ValidActor, PROVIDER_RULE)):
            system.register(prefix, functools.partial(actor, ctx=self.context, rule=rule),
                            capacity=1000, supervision=tolerant, passivate_after=60.0, max_starting=WRITING_STARTS,
                            tenant=_namespace)

    async def run(self) -> None:
        probes = ProbeServer(self.ready, self.loop_lag.healthy, self.config.bind_address, self.config.health_port)
        probes.start()  # a thread of its own: a loop slowed by CPU pressure still answers its probes in time
        if self._freezer is not None:
            self._freezer.start()
        switch_fast()  # the render threads yield the interpreter to the event loop soon (templates/budget.py)
        runners = [await self._serve_metrics()]
        log.info("health on :%d, metrics on :%d%s", self.config.health_port, self.config.metrics_port,
                 " (HTTPS, authorized by the API server)" if self.config.metrics_secure else "")
        try:
            async with self._webhook(), self._grpc(), asyncio.TaskGroup() as tasks:
                self.created_kinds.attach(tasks)
                tasks.create_task(self.events.run(), name="events")
                # One trace of the start-up's listings, not a root per kind.
                listing = self._tracer.start_span("list informers", kind=trace.SpanKind.INTERNAL)
                first_lists = self._first_lists = trace.set_span_in_context(listing)
                for informer in self.informers:
                    tasks.create_task(informer.run(first_list_in=first_lists), name=f"informer {informer.resource.kind}",
                                      context=tenant_context(READING))  # read as it comes (`lanes.Reading`)
                tasks.create_task(self._end_when_synced(listing), name="end the listings' span")
                tasks.create_task(self.loop_lag.run(), name="loop lag watchdog")
                tasks.create_task(self.reachability.run(), name="API reachability")
                tasks.create_task(self.leadership.run(), name="leader election")
                tasks.create_task(self._terms(), name="terms of leadership")
            # Every actor has stopped (the task group ended): hand the leadership over at once.
        finally:
            self._stop_freezing()
            await asyncio.to_thread(probes.close)
            self.render_queue.close()
            self.rendering.close()
            await self.leadership.release()
            for runner in runners:
                await runner.cleanup()

    async def _refresh_commit_points(self) -> None:
        """Before a term's first decision, list the commit points afresh: the Exporters (an exporter's
        `leaseRef` is where a lease is granted) and the ResourceHandles (a handle's `spec.resourceClaim` is
        where a claim is bound). The previous leader's last writes were admitted before this term began (the
        API server's fence refuses the rest), so a consistent listing holds them all, even when this
        replica's watch delivers them late. A precondition does not cover this: a commit on exporter B is
        conditional on B's version, not on A's, so a new leader whose cache had not yet seen A name lease Y
        would offer Y another exporter (`LeaseActor._queue_at` asks A first only if it sees A name Y); and a
        create (a claim's own handle) has no precondition at all."""
        kinds = ("Exporter", "ResourceHandle")
        informers = [i for i in self.informers if i.resource.kind in kinds]
        # The first term's listing is part of the start-up's story; a later term's is a story of its own.
        in_trace, self._first_lists = self._first_lists, None
        try:
            async with asyncio.timeout(REFRESH_TIMEOUT):
                await asyncio.gather(*(i.refresh(in_trace=in_trace) for i in informers))
        except TimeoutError:
            log.warning("listing %s afresh took over %.0fs; deciding from the watch's cache",
                        " and ".join(kinds), REFRESH_TIMEOUT)

    async def _end_when_synced(self, span: trace.Span) -> None:
        try:
            await asyncio.gather(*(i.synced.wait() for i in self.informers))
        finally:
            span.end()

    async def _serve_metrics(self) -> web.AppRunner:
        if not self.config.metrics_secure:
            return await serve(metrics_app(self.registry), self.config.bind_address, self.config.metrics_port)
        cert_dir = self.config.metrics_cert_dir
        context = CertificateFiles(cert_dir).context if cert_dir else development_certificate()[1]
        app = metrics_app(self.registry, functools.partial(authorize_or_error, MetricsAuthorizer(self.gateway)))
        return await serve(app, self.config.bind_address, self.config.metrics_port, context)

    async def _terms(self) -> None:
        """One actor system per term of leadership, and one while following.

        A follower's system holds only the topology, fed by the informers but not routing (not
        `Synced`), so no object actor runs. Winning the election announces `Synced`. Losing it
        stops the whole system: by then the fence refuses every write when it would be sent and
        the writes that were waiting for a slot were dropped, so the actors unwind without
        reaching the API server. The topology is rebuilt from the informers' caches (no relist),
        and the replica follows again.
        """
        while True:
            async with ActorSystem(registry=self.registry, on_escalation=_escalated,
                                   tracer_provider=self.tracer_provider) as system:
                self.system = system
                self._register_actors(system)
                self._accepting.set()
                try:
                    term = await self.leadership.wait_leading()
                    await self._announce_ready()
                    trimming = asyncio.create_task(self._settle_when_quiet(system), name="settle when quiet")
                    try:
                        await self.leadership.wait_lost(term)
                    finally:
                        trimming.cancel()
                    log.warning("not the leader any more: stopping every actor")
                finally:
                    self._accepting.clear()
            self.topology_state = self._topology_from_caches()
            self.leadership.stood_down()

    def _topology_from_caches(self) -> TopologyState:
        """The topology of what the informers hold, not yet `Synced`: events the stopped system
        had not handled are in the caches already."""
        topology = Topology(self.config.operator_namespace)
        for informer in [*self.informers, *self.created_kinds.informers.values()]:
            for obj in list(informer.store.values()):
                topology.apply("ADDED", obj)
        return topology_state(topology)

    def _webhook(self) -> contextlib.AbstractAsyncContextManager[object]:
        settings = self.config.webhook
        if settings is None:
            return contextlib.nullcontext()
        registry = preflight_registry(self.config.operator_namespace, self.context.slots[THROTTLE])
        # The checks read what the operator's informers hold: no request per object looked up.
        lookup = CacheLookup(self.informers, GatewayLookup(self.gateway))
        return webhook(self.gateway, registry, lookup, settings, self.config.bind_address,
                       metrics=WebhookMetrics(self.registry), queue=self.rendering)

    def _grpc(self) -> contextlib.AbstractAsyncContextManager[object]:
        if self.config.grpc is None:
            return contextlib.nullcontext()
        # grpc and the stubs only when the endpoint is enabled
        from .grpc_endpoint import OperatorBackend, grpc_endpoint, issuers_of, signing_key

        settings, election = self.config.grpc, self.config.leader_election
        backend = OperatorBackend(self.context, lambda: self.system, self.leadership, self.informers,
                                  signing_key(self.context, self.config.operator_namespace), issuers_of(settings))
        return grpc_endpoint(backend, self.registry, settings, self.config.bind_address,
                             lease_duration=election.lease_duration if election is not None else None)

    async def _announce_ready(self) -> None:
        await asyncio.gather(*(i.synced.wait() for i in self.informers))
        await self._refresh_commit_points()
        await self.created_kinds.synced(timeout=30.0)  # what providers created exists before handles are judged
        await self._to_topology(Synced())
        log.info("caches synced: %s", ", ".join(f"{i.resource.kind}={len(i.store)}" for i in self.informers))
        if not self._settled:  # once per process: later terms reuse the same caches
            settle_after_start()
            self._settled = True

    async def _settle_when_quiet(self, system: ActorSystem) -> None:
        """Once a term's start-up work is done, freeze and trim again: what the actors built while starting
        joins the frozen objects, and the heap their start-up used goes back to the system."""
        await _quiet(system)
        settle_after_start()
        self._stop_freezing()  # the first start-up's work is done: what is new from now on is collected as usual

    def _stop_freezing(self) -> None:
        if self._freezer is not None:
            self._freezer.stop()
            self._freezer = None


def idle_heartbeat(event: WatchEvent) -> bool:
    """An exporter's agent wrote `status.lastSeen` (a heartbeat, every few seconds) and nothing else, while
    the exporter is already Online: every actor re-reads it and nothing changes. A heartbeat that brings an
    Offline exporter back, or comes with any other change, is not idle."""
    old, new = event.previous, event.object
    if event.type != "MODIFIED" or old is None or new.get("kind") != "Exporter":
        return False
    # No views: this runs for every heartbeat of every exporter.
    old_status, new_status = mapping_at(old, "status"), mapping_at(new, "status")
    if old_status.get("lastSeen") == new_status.get("lastSeen") or not (
            (online := find_condition(old_status, ONLINE)) is not None and online.true):
        return False
    return _without(old_status, "lastSeen") == _without(new_status, "lastSeen") and _without(
        old, "status", "metadata") == _without(new, "status", "metadata") and _without(
        mapping_at(old, "metadata"), "resourceVersion", "managedFields") == _without(
        mapping_at(new, "metadata"), "resourceVersion", "managedFields")


def _without(mapping: Mapping[str, Any], *keys: str) -> dict[str, Any]:
    return {k: v for k, v in mapping.items() if k not in keys}


WRITING_STARTS = 64  # actors of a kind whose start-up writes inside `started()` at once (`_register_actors`)


QUIET_SECONDS = 3.0  # no actor at work this long: start-up is over


async def _quiet(system: ActorSystem, seconds: float = QUIET_SECONDS, every: float = 0.5) -> None:
    """Return once no actor has had work under way for `seconds` (sampled every `every`)."""
    quiet = 0.0
    while quiet < seconds:
        await asyncio.sleep(every)
        quiet = quiet + every if system.busy() == 0 else 0.0


def _escalated(address: str, error: BaseException) -> None:
    log.error("%s kept failing and was stopped: %s", address, error)


async def run_operator(config: OperatorConfig) -> None:
    provider = configure_telemetry()  # before the actor system: it decides then whether to trace
    disable_created_metrics()  # type: ignore[no-untyped-call] # no `_created` series beside each counter and histogram, as Go clients
    registry = CollectorRegistry()
    try:
        async with await Gateway.connect(config.kubeconfig, registry=registry) as gateway:
            await Operator(config, gateway, registry).run()
    finally:
        if provider is not None:
            provider.shutdown()
