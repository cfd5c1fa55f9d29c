"""Leader election on a `coordination.k8s.io/v1` Lease, with client-go's semantics.

Every replica runs the informers, the topology and the webhook; only the
leader runs the object actors and writes. The rules (client-go's
`leaderelection`):

- A candidate takes the Lease when it is free (no holder: released) or when
  its record has not changed for `leaseDurationSeconds`, measured on the
  candidate's own clock from when it last saw the record change (so clocks
  need not agree, only tick at the same rate). Each write carries the
  resourceVersion it read: of two candidates, one wins.
- The leader renews every `retry_period`. It is the leader only until
  `renew_deadline` after the start of its last successful renewal: from then
  on `fence()` refuses every write, whether or not the renewing task got to
  run (fencing by time, `TermFence`). The gateway asks the fence when a write
  is sent, not when it queues, and the step-down drops the writes still
  queued. `renew_deadline < lease_duration`, so the old leader has stopped
  writing before anyone else may take over.
- Past the deadline the term is suspended, not ended (`_suspend`): writes
  wait unsent (`Suspended`) while the leader renews under the resourceVersion
  of its last Lease write. Success proves nobody wrote the Lease, so nobody
  led: the fence reopens from that renewal, as from any. A conflict or a
  Lease gone ends the term, and the waiting writes are refused.
- On SIGTERM renewals stop but the fence stays as time set it, so the actors
  being stopped may finish their writes; `release()` (after they stopped)
  closes the fence, then clears the holder and
  sets `leaseDurationSeconds: 1`, as client-go's ReleaseOnCancel does, so a
  follower takes over at once. Followers also watch the Lease, so they try
  the moment it is released rather than at their next retry.
- Each acquire and renewal also writes who the API server knows the holder
  as (`lessor.dev/holder-username`, and `lessor.dev/holder-pod` for a
  pod-bound token, learned once from a SelfSubjectReview) into the Lease's
  annotations: the API server's own fence (deploy/leader-fence.yaml, a
  ValidatingAdmissionPolicy whose param is this Lease) admits a write of
  lessor's ServiceAccounts only when they match the writer. A write it
  refuses comes back as `NotLeader` (`lessor.app.api_adapter`), and `refused()`
  checks the Lease: held by another replica, this one steps down at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import os
import random
import socket
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from opentelemetry import trace
from prometheus_client import CollectorRegistry, Counter, Gauge

from lessor.actors.api import ApiFailure
from lessor.gateway import ApiError, FencePaused, Gateway, Resource
from lessor.gateway.retries import NO_RETRIES, Retries
from lessor.mailbox import Expected
from lessor.model.fields import mapping_at
from lessor.model.labels import HOLDER_GRPC, HOLDER_POD, HOLDER_USERNAME
from lessor.model.views.meta import Meta, text
from lessor.telemetry.tracing import unrecorded

log = logging.getLogger(__name__)

COORDINATION_LEASE = Resource("coordination.k8s.io", "v1", "Lease", "leases")
LEASE_NAME = "lessor-leader"
COUNTED_AS = "Lease.coordination.k8s.io"
"""How the gateway counts these requests: apart from lessor's own Leases."""
FENCE_POLICY = "lessor-leader-fence"
"""The ValidatingAdmissionPolicy (and its binding) of deploy/leader-fence.yaml."""
POD_NAME_EXTRA = "authentication.kubernetes.io/pod-name"
SELF_SUBJECT_REVIEWS = "/apis/authentication.k8s.io/v1/selfsubjectreviews"
JITTER = 1.2
"""client-go's JitterFactor: candidates retry after retry_period × U(1, 1.2)."""
SUSPENDED_RETRY = 0.25
"""A suspended leader tries to renew 4 times a retry period: each try is a single send, and the sooner it renews
once the API server answers, the sooner its held writes go."""


class NotLeader(ApiFailure, Expected):
    """A write refused because this replica is not (or may no longer trust that it is) the leader: by its
    own fence (never sent), or by the API server's (`by_server`: the policy's message, naming the holder).
    An actor it stops is logged in one line (`Expected`): a step-down is routine, not a crash."""

    def __init__(self, what: str, *, by_server: str | None = None) -> None:
        if by_server is None:
            super().__init__(f"not the leader: {what} refused", reason="NotLeader", status=503)
        else:
            super().__init__(f"not the leader: {what} refused by the API server: {by_server}",
                             reason="NotLeader", status=403)
        self.by_server = by_server


class Suspended(NotLeader, FencePaused):
    """A write asked for while the term is suspended (its fence closed by time, the term not ended): not sent
    now, and asked again once the fence reopens (`resumed()` True), or refused for good if the term ended."""

    def __init__(self, what: str, outcome: asyncio.Future[bool]) -> None:
        super().__init__(what)
        self._outcome = outcome

    async def resumed(self) -> bool:
        return await asyncio.shield(self._outcome)  # one waiter cancelled does not decide for the others


def fence_denial(status: int, message: str) -> bool:
    """Whether an API server answer is the leader fence's denial (deploy/leader-fence.yaml)."""
    return status == 403 and f"ValidatingAdmissionPolicy '{FENCE_POLICY}'" in message


_BOOTTIME: int | None = getattr(time, "CLOCK_BOOTTIME", None)


def boot_clock() -> float:
    """Seconds on CLOCK_BOOTTIME where there is one (Linux), else `time.monotonic`.

    Both are monotonic and keep running while the process is stopped (SIGSTOP, a long GC pause, a
    starved CPU), so a paused leader resumes already past its deadline. CLOCK_BOOTTIME also counts a
    suspended host's sleep, which CLOCK_MONOTONIC does not. Neither sees a paused VM whose guest clock
    the hypervisor stopped as well: see docs/architecture.md, "Fencing by time".
    """
    return time.monotonic() if _BOOTTIME is None else time.clock_gettime(_BOOTTIME)


class TermFence:
    """Fencing by time: writes may be sent only before the current term's deadline, read from `clock` at
    the moment of asking, so nothing that happened meanwhile (a blocked loop, a paused process, a renewal
    task that never got to run) can leave it open past the deadline.

    Past the deadline of a term that has not ended (`hold_term`, until `close` or `stop_resuming`) a write
    is `Suspended` rather than refused: it waits, unsent, for the fence to reopen or the term to end. Which
    of the two it is, is decided by whether the fence is open when asked, never by the wait: a write that
    waited asks again, and is sent only if the deadline of the renewal that reopened it lies ahead."""

    def __init__(self, clock: Callable[[], float] = boot_clock) -> None:
        self._clock = clock
        self._until = float("-inf")
        self._resumable = False  # a term holds: closed by time, the fence may yet reopen
        self._reopened: asyncio.Future[bool] | None = None  # what suspended writes wait for

    def open_until(self, instant: float) -> None:
        """A renewal that started at `instant - renew_deadline` succeeded."""
        self._until = instant
        self._settle(True)

    def hold_term(self) -> None:
        """A term began: past a deadline, writes wait for the next renewal rather than fail."""
        self._resumable = True

    def stop_resuming(self) -> None:
        """Renewals stopped (SIGTERM): the fence stays open as time set it, and closes for good then."""
        self._resumable = False
        self._settle(False)

    def close(self) -> None:
        """The term ended: closed for good, and the writes that waited are refused."""
        self._until = float("-inf")
        self.stop_resuming()

    def _settle(self, reopened: bool) -> None:
        if self._reopened is not None and not self._reopened.done():
            self._reopened.set_result(reopened)
        self._reopened = None

    def is_open(self) -> bool:
        return self._clock() < self._until

    def check(self, what: str) -> None:
        """Raise `NotLeader` unless `what` may be sent now (`Suspended`, if the fence may reopen)."""
        if self.is_open():
            return
        if not self._resumable:
            raise NotLeader(what)
        if self._reopened is None:
            self._reopened = asyncio.get_running_loop().create_future()
        raise Suspended(what, self._reopened)


@dataclass(frozen=True)
class ElectionSettings:
    """controller-runtime's names and defaults."""

    lease_duration: float = 15.0
    renew_deadline: float = 10.0
    retry_period: float = 2.0
    name: str = LEASE_NAME
    traced: bool = False
    """Trace the election's requests (`--trace-leader-election`). Off, they are recorded by no sampler that
    follows its parent: a renewal every retry period made most of the traces in a viewer."""

    def __post_init__(self) -> None:
        if not self.lease_duration > self.renew_deadline:
            raise ValueError(f"--leader-elect-lease-duration ({self.lease_duration:g}s) must be longer than "
                             f"--leader-elect-renew-deadline ({self.renew_deadline:g}s)")
        if not self.renew_deadline > JITTER * self.retry_period:
            raise ValueError(f"--leader-elect-renew-deadline ({self.renew_deadline:g}s) must be longer than "
                             f"{JITTER:g} × --leader-elect-retry-period ({self.retry_period:g}s)")
        if self.lease_duration < 1:
            raise ValueError("--leader-elect-lease-duration must be at least 1s")


def holder_identity() -> str:
    """`podname_uuid`: the pod's name (POD_NAME, as deployment.yaml sets it, else the hostname, which is
    the pod's name unless the pod sets another), and unique per process (a restarted pod is a new
    candidate)."""
    return f"{os.environ.get('POD_NAME') or socket.gethostname()}_{uuid.uuid4()}"


class Leadership(Protocol):
    """What the operator needs of an election."""

    identity: str

    def leading(self) -> bool: ...

    def fence(self, what: str) -> None:
        """Raise `NotLeader` unless this replica may write now."""

    async def run(self) -> None: ...

    async def wait_leading(self) -> int: ...

    async def wait_lost(self, term: int) -> None: ...

    def stood_down(self) -> None: ...

    async def release(self) -> None: ...

    def leader_says(self, annotation: str) -> str | None:
        """What another replica that holds the leadership wrote into the leader Lease's `annotation`
        (None: this replica leads, nobody does, or the holder did not write it)."""
        ...

    def refused(self, message: str) -> None:
        """The API server's leader fence refused one of this replica's writes (`message`: its answer)."""


class _Metrics:
    def __init__(self, registry: CollectorRegistry | None) -> None:
        self.leader = Gauge("lessor_leader", "1 while this replica is the leader, else 0", registry=registry)
        self.transitions = Counter("lessor_leader_transitions", "Times this replica became or stopped being "
                                   "the leader", ["to"], registry=registry)


class Unelected:
    """`--no-leader-elect`: the only replica, always the leader."""

    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        self.identity = holder_identity()
        metrics = _Metrics(registry)
        metrics.leader.set(1)
        metrics.transitions.labels("leader").inc()

    def leading(self) -> bool:
        return True

    def fence(self, what: str) -> None:
        return None

    async def run(self) -> None:
        return None

    async def wait_leading(self) -> int:
        return 1

    async def wait_lost(self, term: int) -> None:
        await asyncio.Event().wait()

    def stood_down(self) -> None:
        return None

    async def release(self) -> None:
        return None

    def leader_says(self, annotation: str) -> str | None:
        return None

    def refused(self, message: str) -> None:
        log.error("the API server's leader fence refused a write of this replica, which runs with "
                  "--no-leader-elect: %s. A leader Lease is left from an elected deployment; remove the fence "
                  "with `lessor install --no-leader-elect` (or delete the ValidatingAdmissionPolicyBinding %s)",
                  message, FENCE_POLICY)


class LeaderElector:
    """One candidate; `run()` campaigns, leads and campaigns again until cancelled."""

    def __init__(self, gateway: Gateway, namespace: str, settings: ElectionSettings, *,
                 identity: str | None = None, registry: CollectorRegistry | None = None,
                 clock: Callable[[], float] = boot_clock, advertise: Mapping[str, str] | None = None) -> None:
        self.gateway = gateway
        # Annotations this replica writes into the Lease with each acquire and renewal, for the followers
        # (HOLDER_GRPC: where it serves Jumpstarter's protocol).
        self.advertise = dict(advertise or {})
        self.namespace = namespace
        self.settings = settings
        self.identity = identity or holder_identity()
        self._clock = clock
        self._metrics = _Metrics(registry)
        self._metrics.leader.set(0)
        self._fence = TermFence(clock)  # leading only before the deadline of the last renewal
        self._lease: dict[str, Any] | None = None  # the Lease as last read or written
        self._observed: Mapping[str, Any] | None = None  # its spec, and when it last changed on our clock
        self._observed_at = float("-inf")
        self._expires_at = float("inf")  # when the other holder's lease runs out, as we observed it
        self._deadline = float("-inf")  # the fence's deadline, for the renewal loop's timing
        self._held_until = float("-inf")  # when our own lease runs out unless renewed (a release is worth it until then)
        self._term = 0  # terms of leadership begun, and ended
        self._ended = 0
        self._step = asyncio.Event()  # set (and replaced) at each beginning or end of a term
        self._work_stopped = asyncio.Event()
        self._release_due = False
        self._changed = asyncio.Event()  # the watch saw the Lease change: try now
        # Who the API server knows this replica as (SelfSubjectReview), written into the Lease with each
        # acquire and renewal for its fence: username and pod name (None: not asked yet or could not).
        self.authenticated: tuple[str, str] | None = None
        self._whoami_failed = False
        self._refusal_check: asyncio.Task[None] | None = None
        self._refusal_checked_at = float("-inf")

    # --- what the operator asks ----------------------------------------------------------

    def leading(self) -> bool:
        return self._fence.is_open()

    def fence(self, what: str) -> None:
        self._fence.check(what)

    async def wait_leading(self) -> int:
        """Wait for a term of leadership; return its number."""
        while self._term == self._ended:
            await self._step.wait()
        return self._term

    async def wait_lost(self, term: int) -> None:
        """Wait until `term` ended (the fence is closed by then)."""
        while self._ended < term:
            await self._step.wait()

    def stood_down(self) -> None:
        """The operator stopped the ended term's actors: campaign again."""
        self._work_stopped.set()

    def _tracing(self) -> contextlib.AbstractContextManager[object]:
        """Around the election's work: unrecorded unless `settings.traced` (the watch task inherits it)."""
        return contextlib.nullcontext() if self.settings.traced else trace.use_span(unrecorded())

    async def run(self) -> None:
        with self._tracing():
            await self._run()

    async def _run(self) -> None:
        watch = asyncio.create_task(self._watch(), name="leader election watch")
        try:
            while True:
                self._work_stopped.clear()
                await self._campaign()
                await self._lead()
                await self._work_stopped.wait()
        finally:
            watch.cancel()
            if self._refusal_check is not None:
                self._refusal_check.cancel()
            # Renewals stop, but the fence stays as time set it: the actors being stopped may finish
            # their writes, which no other replica can contest before our lease runs out; past it, none
            # waits for a renewal that will not come. `release` closes it before handing over.
            self._fence.stop_resuming()
            self._release_due = self.leading()

    async def release(self) -> None:
        """Close the fence and hand the Lease over at once; call after `run` ended and every actor stopped.

        The write carries the resourceVersion of our last renewal. A renewal cancelled in flight may have
        been written without our knowing its version: on a conflict the Lease is read again, and released
        under its new version only if it still names this replica. If another replica took it meanwhile,
        nothing changes.
        """
        self._step_down()
        due, lease, self._release_due = self._release_due, self._lease, False
        if not due or lease is None:
            return
        # Worth waiting for as long as it saves time: until our lease would have run out by itself. One retry
        # period was too short for a starved process (or API server), and a release given up on made the
        # followers wait out the whole lease.
        patience = max(self.settings.retry_period, self._held_until - self._clock())
        try:
            async with asyncio.timeout(patience):
                with self._tracing():
                    for attempt in range(3):
                        try:
                            await self._write("update", "PUT", self._released(lease))
                            break
                        except ApiError as err:
                            if err.status != 409 or attempt == 2:
                                raise
                        lease = await self.gateway.request("get", COUNTED_AS, "GET", self._path(self.settings.name))
                        if _holder(lease) != self.identity:
                            log.info("leader Lease already held by %s: nothing to release", _holder(lease) or "nobody")
                            return
            log.info("released leadership (%s)", self.identity)
        except Exception as err:  # the Lease then expires as usual
            log.warning("could not release the leader Lease: %s", err)

    def _released(self, lease: Mapping[str, Any]) -> dict[str, Any]:
        """`lease` handed over: no holder, a lease of one second (client-go's ReleaseOnCancel)."""
        now = _micro_time()
        return {**lease, "metadata": _holder_annotations(mapping_at(lease, "metadata"), None),
                "spec": {**mapping_at(lease, "spec"), "holderIdentity": None, "leaseDurationSeconds": 1,
                         "acquireTime": now, "renewTime": now}}

    def leader_says(self, annotation: str) -> str | None:
        """From the Lease as this replica last read it: a follower reads it every retry period (its
        campaign), so a new leader's word reaches it within one period."""
        holder = _holder(self._lease)
        if not holder or holder == self.identity or self._clock() >= self._expires_at:
            return None
        return Meta.of(self._lease).annotations.get(annotation) or None

    # --- the loops -------------------------------------------------------------------------

    async def _campaign(self) -> None:
        log.info("candidate %s for Lease %s/%s", self.identity, self.namespace, self.settings.name)
        while not await self._attempt():
            self._changed.clear()
            # Try again at the retry period, or the moment the holder's lease runs out if that is sooner.
            delay = min(self.settings.retry_period * random.uniform(1.0, JITTER),
                        max(0.0, self._expires_at - self._clock()) + 0.01)
            try:
                async with asyncio.timeout(delay):
                    await self._changed.wait()
            except TimeoutError:
                pass
        log.info("became the leader (%s)", self.identity)
        self._term += 1
        self._fence.hold_term()
        self._metrics.leader.set(1)
        self._metrics.transitions.labels("leader").inc()
        self._notify()

    async def _lead(self) -> None:
        """Renew every retry_period; return once the term ended."""
        while True:
            while self.leading():
                await asyncio.sleep(min(self.settings.retry_period, max(0.0, self._deadline - self._clock())))
                while (remaining := self._deadline - self._clock()) > 0:
                    if await self._attempt(timeout=remaining):
                        break
                    await asyncio.sleep(min(self.settings.retry_period, max(0.0, self._deadline - self._clock())))
            if self._ended >= self._term:  # `refused` stepped down already, and said why
                break
            if not await self._suspend():
                log.warning("lost leadership (%s): could not renew within %gs, and the Lease was written by "
                            "another since", self.identity, self.settings.renew_deadline)
                break
        self._step_down()

    async def _suspend(self) -> bool:
        """The renew deadline passed: the fence is closed, yet the term need not end. Nobody else can have led
        unless someone wrote the Lease, and a renewal under the resourceVersion of our last write proves that
        nobody did (any write changes it): then the term resumes, its actors never stopped (stopping and
        starting them all cost a storm's convergence tens of seconds after a 10 s API server outage). Until
        then writes wait, unsent (`Suspended`). A conflict (someone wrote the Lease: a follower took it, or
        took it and released it) or a Lease gone ends the term, as does `release`. Returns whether the term
        resumed; the fence reopened then, until the renew deadline of the renewal that resumed it."""
        sent: set[str] = set()  # the renewTimes of the renewals sent meanwhile
        self._deadline = float("-inf")
        log.warning("leadership suspended (%s): could not renew within %gs; writes wait until the Lease is renewed "
                    "as last written (nobody else led) or taken by another", self.identity,
                    self.settings.renew_deadline)
        while True:
            # One send per attempt, tried often: a term resumed is fenced from when its renewal was sent,
            # so a send retried for seconds inside the gateway would resume it with seconds already spent.
            started = self._clock()
            try:
                async with asyncio.timeout(self.settings.renew_deadline):
                    renewed = await self._renew_as_written(started, NO_RETRIES, sent)
                    if not renewed and await self._landed(sent):
                        continue  # a renewal of ours whose answer was lost: renew from it
            except Exception as err:  # no answer, or not the Lease's: try again
                if isinstance(err, ApiError) and err.not_found:  # deleted: a campaign creates it again
                    log.warning("leader election (suspended): the Lease %s/%s is gone", self.namespace,
                                self.settings.name)
                    return False
                asked = err.retry_after if isinstance(err, ApiError) else None
                log.debug("leader election (suspended): %s", err)
                await asyncio.sleep(asked if asked is not None else
                                    SUSPENDED_RETRY * self.settings.retry_period * random.uniform(1.0, JITTER))
                continue
            if renewed:
                log.info("leadership resumed (%s): the Lease was renewed as last written, nobody led meanwhile",
                         self.identity)
            return renewed

    def _step_down(self) -> None:
        """Close the fence for good (the writes that wait for it are refused) and drop the writes queued for a
        slot: refused now, not when a slot frees."""
        self._fence.close()
        self._deadline = float("-inf")
        self.gateway.drop_queued_writes()
        if self._ended < self._term:
            self._ended = self._term
            self._metrics.leader.set(0)
            self._metrics.transitions.labels("follower").inc()
            self._notify()

    def _notify(self) -> None:
        self._step.set()
        self._step = asyncio.Event()

    async def _attempt(self, timeout: float | None = None) -> bool:
        """client-go's tryAcquireOrRenew; any failure is a `False`."""
        started = self._clock()
        self._expires_at = float("inf")
        try:
            async with asyncio.timeout(timeout if timeout is not None else self.settings.renew_deadline):
                return await self._acquire_or_renew(started)
        except TimeoutError:
            log.warning("leader election: the API server did not answer in time")
        except ApiError as err:
            if err.status != 409:
                log.warning("leader election: %s", err)
        except Exception as err:  # network
            log.warning("leader election: %s", err)
        return False

    async def _acquire_or_renew(self, started: float) -> bool:
        await self._whoami()
        if self.leading() and await self._renew_as_written(started):
            return True
        now = _micro_time()
        spec: dict[str, Any] = {"holderIdentity": self.identity,
                                "leaseDurationSeconds": max(1, round(self.settings.lease_duration)),
                                "acquireTime": now, "renewTime": now, "leaseTransitions": 0}
        try:
            lease = await self.gateway.request("get", COUNTED_AS, "GET", self._path(self.settings.name))
        except ApiError as err:
            if not err.not_found:
                raise
            body = {"apiVersion": COORDINATION_LEASE.api_version, "kind": "Lease",
                    "metadata": _holder_annotations({"name": self.settings.name, "namespace": self.namespace},
                                                    self.authenticated, self.advertise),
                    "spec": spec}
            self._won(await self._write("create", "POST", body), started)
            return True
        old = mapping_at(lease, "spec")
        if old != self._observed:
            self._observed, self._observed_at = old, self._clock()
        self._lease = lease
        holder = _holder(lease)
        self._expires_at = self._observed_at + float(old.get("leaseDurationSeconds") or 0)
        if holder and holder != self.identity and self._clock() < self._expires_at:
            return False  # someone else holds it and renewed within its lease duration
        if holder == self.identity:
            spec["acquireTime"] = old.get("acquireTime") or now
            spec["leaseTransitions"] = old.get("leaseTransitions") or 0
        else:
            spec["leaseTransitions"] = (old.get("leaseTransitions") or 0) + 1
        await self._replace(lease, spec, started)
        return True

    async def _replace(self, lease: Mapping[str, Any], spec: dict[str, Any], started: float,
                       retries: Retries | None = None) -> None:
        """Write `lease` with `spec` and this replica's holder annotations, under the resourceVersion it carries."""
        metadata = _holder_annotations(mapping_at(lease, "metadata"), self.authenticated, self.advertise)
        self._won(await self._write("update", "PUT", {**lease, "metadata": metadata, "spec": spec}, retries), started)

    async def _landed(self, sent: set[str]) -> bool:
        """Whether the Lease is as one of our renewals in `sent` wrote it, whose answer we never had (a send
        timed out, yet reached the API server): the next renewal then conflicts with our own write. Each was
        sent under the resourceVersion of our last write, so it landed only if nobody wrote in between; the
        Lease still holding it shows that nobody did since. Then it becomes the write renewed from."""
        lease = await self.gateway.request("get", COUNTED_AS, "GET", self._path(self.settings.name),
                                           retries=NO_RETRIES)
        if _holder(lease) != self.identity or mapping_at(lease, "spec").get("renewTime") not in sent:
            return False
        self._lease = lease
        return True

    async def _renew_as_written(self, started: float, retries: Retries | None = None,
                                sent: set[str] | None = None) -> bool:
        """A renewal in one round trip: the Lease as this replica last wrote it, with a new `renewTime`, under
        that write's resourceVersion. On a loaded API server a read and a write per renewal took long enough
        to miss the renew deadline (leaders stepped down under `bench failover`'s CPU hogs). A conflict means
        someone else wrote the Lease: False, and the attempt reads it as a campaign does."""
        lease = self._lease
        if lease is None or _holder(lease) != self.identity:
            return False
        spec = {**mapping_at(lease, "spec"), "renewTime": _micro_time(),
                "leaseDurationSeconds": max(1, round(self.settings.lease_duration))}
        if sent is not None:
            sent.add(spec["renewTime"])
        try:
            await self._replace(lease, spec, started, retries)
        except ApiError as err:
            if err.status != 409:
                raise
            return False
        self._expires_at = self._observed_at + float(spec["leaseDurationSeconds"])
        return True

    async def _whoami(self) -> None:
        """Learn once who the API server authenticates this replica as, for the Lease's annotations.

        A failure of the server or the network fails this attempt (tried again at the next); a definite
        no (403: no right to ask, 404: a server before 1.28) is given up on: the Lease then names no
        username, and an API server that runs the leader fence refuses this replica's writes (`refused`
        says so), while one that does not is unaffected."""
        if self.authenticated is not None or self._whoami_failed:
            return
        try:
            review = await self.gateway.request(
                "create", "SelfSubjectReview", "POST", SELF_SUBJECT_REVIEWS,
                body={"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        except ApiError as err:
            if err.status not in (403, 404):
                raise
            self._whoami_failed = True
            log.warning("could not learn who the API server knows this replica as (SelfSubjectReview: %s); the "
                        "leader Lease will not name it, so the API server's leader fence (%s), where installed, "
                        "refuses its writes", err.message, FENCE_POLICY)
            return
        user = mapping_at(mapping_at(review, "status"), "userInfo")
        pods = (user.get("extra") or {}).get(POD_NAME_EXTRA) or [""]
        self.authenticated = (str(user.get("username") or ""), str(pods[0]))
        log.info("authenticated as %s%s", self.authenticated[0],
                 f" (pod {self.authenticated[1]})" if self.authenticated[1] else "")

    def refused(self, message: str) -> None:
        """The API server's fence refused a write: ask the Lease who holds it (one question at a time, at most
        once per retry period). Another holder: our term is over, whatever our clock says, so step down now
        instead of at the renew deadline. This replica itself: the fence and the Lease disagree on who it
        is, which no retry mends; say so."""
        if not self.leading() or (self._refusal_check is not None and not self._refusal_check.done()):
            return
        if self._clock() - self._refusal_checked_at < self.settings.retry_period:
            return
        self._refusal_checked_at = self._clock()
        self._refusal_check = asyncio.create_task(self._check_refusal(message), name="leader fence refusal")

    async def _check_refusal(self, message: str) -> None:
        try:
            async with asyncio.timeout(self.settings.renew_deadline):
                lease = await self.gateway.request("get", COUNTED_AS, "GET", self._path(self.settings.name))
        except Exception as err:  # the renewals decide, as without the refusal
            log.warning("the API server's leader fence refused a write (%s); reading the Lease failed: %s",
                        message, err)
            return
        holder = _holder(lease)
        if holder != self.identity:
            if self.leading():
                log.warning("the API server's leader fence refused a write: the Lease is held by %s, not by this "
                            "replica (%s); stepping down at once", holder or "nobody", self.identity)
                self._step_down()
            return
        annotations = Meta.of(lease).annotations
        log.error("the API server's leader fence refused a write of this replica although it holds the Lease "
                  "%s/%s: %s. The Lease names %s=%r, %s=%r; the API server knows this replica as %r. Check "
                  "that it runs as a ServiceAccount with the right to create selfsubjectreviews "
                  "(deploy/rbac.yaml)", self.namespace, self.settings.name, message,
                  HOLDER_USERNAME, annotations.get(HOLDER_USERNAME), HOLDER_POD, annotations.get(HOLDER_POD),
                  self.authenticated)

    def _won(self, lease: dict[str, Any], started: float) -> None:
        self._lease = lease
        self._observed, self._observed_at = mapping_at(lease, "spec"), self._clock()
        self._deadline = started + self.settings.renew_deadline
        self._held_until = started + self.settings.lease_duration
        self._fence.open_until(self._deadline)

    async def _write(self, verb: str, method: str, body: dict[str, Any],
                     retries: Retries | None = None) -> dict[str, Any]:
        """Create or replace, with the resourceVersion read (optimistic concurrency)."""
        path = self._path(self.settings.name if method == "PUT" else None)
        return await self.gateway.request(verb, COUNTED_AS, method, path, body=body, retries=retries)

    async def _watch(self) -> None:
        """Wake the campaign when the Lease changes (released), instead of at the next retry."""
        params = {"watch": "true", "fieldSelector": f"metadata.name={self.settings.name}", "timeoutSeconds": 300}
        while True:
            try:
                rv = Meta.of(self._lease).resource_version or None
                resp = await self.gateway.stream(COUNTED_AS, self._path(), {**params, "resourceVersion": rv})
                try:
                    while line := await resp.content.readline():
                        if b'"BOOKMARK"' not in line:
                            self._changed.set()
                finally:
                    resp.close()
            except asyncio.CancelledError:
                raise
            except ApiError as err:
                if err.status == 403:  # a Role without `watch`: candidates poll, every retry period
                    log.warning("cannot watch the leader Lease (%s); candidates poll every %gs instead",
                                err.message, self.settings.retry_period)
                    return
                log.debug("leader election watch: %s", err)
            except Exception as err:
                log.debug("leader election watch: %s", err)
            await asyncio.sleep(self.settings.retry_period)

    def _path(self, name: str | None = None) -> str:
        return COORDINATION_LEASE.path(self.namespace, name)


def _holder(lease: Mapping[str, Any] | None) -> str:
    """Who holds the Lease (`spec.holderIdentity`); empty when nobody does."""
    return text(mapping_at(lease, "spec").get("holderIdentity")) or ""


def _holder_annotations(metadata: Mapping[str, Any], authenticated: tuple[str, str] | None,
                        advertise: Mapping[str, str] | None = None) -> dict[str, Any]:
    """`metadata` with the holder annotations naming `authenticated` (username, pod) and what it `advertise`s,
    or none of them (a former holder's are removed)."""
    annotations = {k: v for k, v in (metadata.get("annotations") or {}).items()
                   if k not in (HOLDER_USERNAME, HOLDER_POD, HOLDER_GRPC)}
    annotations.update(advertise or {})
    if authenticated is not None:
        username, pod = authenticated
        annotations[HOLDER_USERNAME] = username
        if pod:
            annotations[HOLDER_POD] = pod
    return {**metadata, "annotations": annotations}


def _micro_time() -> str:
    """A Kubernetes MicroTime."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def leadership(gateway: Gateway, namespace: str, settings: ElectionSettings | None,
               registry: CollectorRegistry | None, advertise: Mapping[str, str] | None = None) -> Leadership:
    """The election `settings` ask for; None: the only replica (`--no-leader-elect`)."""
    if settings is None:
        return Unelected(registry)
    return LeaderElector(gateway, namespace, settings, registry=registry, advertise=advertise)
