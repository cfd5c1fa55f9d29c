"""`lessor migrate`: lessor's objects for a live cluster's Poolboy or Jumpstarter objects.

Nothing is deleted or re-created, and the old objects are left as they are. The order makes a
running lessor operator harmless too: providers, then handles (bound ones name their claim, and
keep their names, so their guid and their resources' names stay), then the resources those handles
list are adopted, then claims (with `status.resourceHandle`), then scalings (with what they created
so far), then pools, which find their handles already there. Adoption adds lessor's ownership marks
(actors/provisioning/ownership.py) to a resource only when a Poolboy handle lists it AND the resource carries
Poolboy's own marks for that handle; anything else stays untouched and is reported. Jumpstarter:
clients, policies, exporters (with the agent's status and `leaseRef`), then leases with their status,
so an active lease keeps its exporter.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from typing import Any, TextIO

from lessor.actors.provisioning.handle_render import tracking
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import CLAIM, CLIENT, EXPORTER, HANDLE, LEASE, POLICY, POOL, PROVIDER, SCALING
from lessor.leadership.election import COORDINATION_LEASE, LEASE_NAME
from lessor.templates import parse_timestamp

from .convert import Note, convert_object, trust_linked_values
from lessor.model.fields import mapping_at
from lessor.model.labels import LEASE_ENDED
from lessor.model.views import Meta, View
from lessor.model.views.leasing import LeaseView


@dataclass
class Step:
    """One change: `text` says what (printed by --dry-run), `run` makes it and says what happened."""

    text: str
    run: Callable[[], Awaitable[str]]
    pause: float = 0.0
    """Seconds to wait before running it, so that a lessor operator that is running sees what came before."""


@dataclass
class Plan:
    steps: list[Step] = field(default_factory=list)
    notes: list[Note] = field(default_factory=list)


_SETTLE = 1.0  # seconds between the phases


class MigrationError(Exception):
    """The cluster is not ready for a migration; the message says what to do."""


async def run_migrate(args: argparse.Namespace, *, stdout: TextIO = sys.stdout, stderr: TextIO = sys.stderr) -> int:
    async with await Gateway.connect(args.kubeconfig) as gateway:
        try:
            plan = await make_plan(gateway, args.source, operator_namespace=args.operator_namespace,
                                   namespaces=args.namespace, poolboy_namespace=args.poolboy_namespace,
                                   poolboy_group=args.poolboy_group, jumpstarter_group=args.jumpstarter_group)
        except MigrationError as error:
            print(f"lessor migrate: error: {error}", file=stderr)
            return 2
        for note in plan.notes:
            print(f"lessor migrate: {note}", file=stderr)
        if args.dry_run:
            for step in plan.steps:
                print(step.text, file=stdout)
            print(f"lessor migrate: dry run: {len(plan.steps)} changes planned, none made", file=stderr)
            return 0
        for done, step in enumerate(plan.steps):
            if step.pause:
                await asyncio.sleep(step.pause)
            try:
                print(await step.run(), file=stdout)
            except ApiError as error:
                print(f"lessor migrate: error: {step.text}: {error}. The {done} changes before it were made; fix "
                      "the cause and run the same command again (it leaves what exists as it is)", file=stderr)
                return 1
        print(f"lessor migrate: {len(plan.steps)} changes made", file=stderr)
    return 0


async def make_plan(gateway: Gateway, source: str, *, operator_namespace: str = "lessor-system",
                    namespaces: Sequence[str] = (), poolboy_namespace: str = "poolboy",
                    poolboy_group: str = "poolboy.gpte.redhat.com", jumpstarter_group: str = "jumpstarter.dev",
                    now: datetime | None = None) -> Plan:
    """What migrating would do, read from the cluster; nothing is written."""
    await _listed(gateway, PROVIDER, operator_namespace, "lessor's CRDs are not installed: run `lessor install`")
    now = now or datetime.now(timezone.utc)
    await _no_running_operator(gateway, operator_namespace, now)
    if source == "poolboy":
        return await _poolboy_plan(gateway, operator_namespace, namespaces, poolboy_namespace, poolboy_group, now)
    if source == "jumpstarter":
        return await _jumpstarter_plan(gateway, namespaces, jumpstarter_group)
    raise MigrationError(f"unknown source {source!r}: poolboy or jumpstarter")


# ------------------------------------------------------------------------------------ Poolboy


async def _poolboy_plan(gateway: Gateway, ops: str, namespaces: Sequence[str], poolboy_ns: str, group: str,
                        now: datetime) -> Plan:
    def old(kind: str) -> Resource:
        return Resource(group, "v1", kind, kind.lower() + "s")

    hint = f"is Poolboy installed, with the API group {group}? (--poolboy-group)"
    providers = await _listed(gateway, old("ResourceProvider"), poolboy_ns, hint)
    pools = await _listed(gateway, old("ResourcePool"), poolboy_ns, hint)
    handles = await _listed(gateway, old("ResourceHandle"), poolboy_ns, hint)
    claims: list[dict[str, Any]] = []
    for namespace in _scopes(namespaces):
        claims += await _listed(gateway, old("ResourceClaim"), namespace, hint)
    try:
        scalings = await _listed(gateway, old("ResourcePoolScaling"), poolboy_ns, hint)
    except MigrationError:
        scalings = []  # Poolboy before v1.17 has no scalings

    plan, adoptions, handle_steps, claim_steps, scaling_steps, pool_steps = Plan(), Plan(), Plan(), Plan(), Plan(), Plan()
    converted: dict[str, tuple[str, dict[str, Any]]] = {}
    for obj in providers:
        if (new_provider := _create(gateway, plan, PROVIDER, obj, ops)) is not None:
            converted[Meta.of(new_provider).name] = (_subject(obj), new_provider)
    plan.notes += trust_linked_values(converted)  # on the objects the steps create: Poolboy's linked values kept
    # Claims first, to know which handles may come: a bound handle whose claim stays behind (expired, or
    # outside --namespace) is not migrated, or lessor would end it and delete what it made.
    migrated_claims: dict[tuple[str, str], dict[str, Any]] = {}
    for obj in claims:
        view = View.of(obj)
        end = mapping_at(view.status, "lifespan").get("end") or mapping_at(view.spec, "lifespan").get("end")
        if end and _past(end, now):
            plan.notes.append(Note(_subject(obj), "(object)", f"its lifespan ended at {end}: not migrated, so "
                                                              "lessor does not provision it again"))
            continue
        migrated_claims[(view.namespace, view.name)] = obj
    live_handles = set()
    for obj in handles:
        if Meta.of(obj).deleting:
            plan.notes.append(Note(_subject(obj), "(object)", "being deleted: not migrated"))
            continue
        claim = View.of(obj).spec.get("resourceClaim")
        if isinstance(claim, Mapping) and (str(claim.get("namespace")), str(claim.get("name"))) not in migrated_claims:
            plan.notes.append(Note(_subject(obj), "spec.resourceClaim", f"its claim {claim.get('namespace')}/"
                                                                        f"{claim.get('name')} is not migrated, so "
                                                                        "neither is the handle nor what it made"))
            continue
        new = _create(gateway, handle_steps, HANDLE, obj, ops, keep=_handle_with_references)
        if new is None:
            continue
        created = View.of(new)
        live_handles.add(created.name)
        end = mapping_at(created.spec, "lifespan").get("end")
        if end and _past(end, now):
            plan.notes.append(Note(_subject(obj), "spec.lifespan.end", f"{end} has passed: lessor deletes the "
                                                                      "handle and its resources, as Poolboy would",
                                   False))
        await _plan_adoptions(gateway, adoptions, obj, new, group)
    for obj in migrated_claims.values():
        handle = mapping_at(View.of(obj).status, "resourceHandle").get("name")
        bound = {"resourceHandle": {"name": handle, "namespace": ops}} if handle in live_handles else None
        if handle and handle not in live_handles:
            plan.notes.append(Note(_subject(obj), "status.resourceHandle", f"ResourceHandle {handle} is gone: "
                                                                           "lessor binds or creates another"))
        _create(gateway, claim_steps, CLAIM, obj, ops, status=bound)
    for obj in scalings:  # with its count, or the pool would create what Poolboy already did
        status = View.of(obj).status
        made = {key: status[key] for key in ("count", "state") if key in status}
        _create(gateway, scaling_steps, SCALING, obj, ops, status=made or None)
    for obj in pools:
        _create(gateway, pool_steps, POOL, obj, ops)
    # Resources are marked before their handles exist, handles exist before their claims, claims and scalings
    # before pools: at no point does a running operator see a claim without its handle, or a pool short of handles.
    for part in (adoptions, handle_steps, claim_steps, scaling_steps, pool_steps):
        if part.steps and plan.steps:
            part.steps[0].pause = _SETTLE
        plan.steps += part.steps
        plan.notes += part.notes
    return plan


def _handle_with_references(old: Mapping[str, Any], new: dict[str, Any]) -> None:
    """The references Poolboy keeps in status (v1.17) or spec (older), on lessor's `spec.resources`."""
    status_resources = _entries(View.of(old).status)
    for index, entry in enumerate(_entries(View.of(new).spec)):
        reference = entry.get("reference") or (status_resources[index].get("reference")
                                               if index < len(status_resources) else None)
        if isinstance(reference, Mapping):
            entry["reference"] = {key: reference[key] for key in ("apiVersion", "kind", "name", "namespace")
                                  if key in reference}


async def _plan_adoptions(gateway: Gateway, plan: Plan, old: Mapping[str, Any], new: Mapping[str, Any],
                          group: str) -> None:
    """Adopt each resource the Poolboy handle lists, if it is there and carries Poolboy's marks for it."""
    old_meta = Meta.of(old)
    for index, entry in enumerate(_entries(View.of(new).spec)):
        reference = entry.get("reference")
        if not isinstance(reference, Mapping) or not reference.get("name"):
            continue
        what = f"{reference.get('apiVersion')} {reference.get('kind')} {reference.get('namespace', '')}/" \
               f"{reference['name']}"
        field_name = f"spec.resources[{index}].reference"
        try:
            res = await gateway.resolve(str(reference.get("apiVersion")), str(reference.get("kind")))
            live = await gateway.get(res, reference.get("namespace") if res.namespaced else None, reference["name"])
        except (ApiError, LookupError) as error:
            if isinstance(error, ApiError) and not error.not_found:
                raise
            plan.notes.append(Note(_subject(old), field_name, f"{what} does not exist: lessor creates it"))
            continue
        live_meta = Meta.of(live)
        annotations = live_meta.annotations
        theirs = (annotations.get(f"{group}/resource-handle-name"),
                  annotations.get(f"{group}/resource-handle-namespace"))
        uid = annotations.get(f"{group}/resource-handle-uid")
        if theirs != (old_meta.name, old_meta.namespace) or (uid and uid != old_meta.uid):
            plan.notes.append(Note(_subject(old), field_name, f"{what} does not carry Poolboy's marks for this "
                                                              "handle: not adopted, and lessor will not touch it "
                                                              "(the claim shows ResourceConflict)"))
            continue
        provider = ((entry.get("provider") or {}).get("name")) or ""
        labels, marks = tracking(new, provider)
        if all(live_meta.labels.get(k) == v for k, v in labels.items()) and all(annotations.get(k) == v
                                                                          for k, v in marks.items()):
            continue
        version = live_meta.resource_version or None
        namespace = reference.get("namespace") if res.namespaced else None
        handle = f"ResourceHandle {Meta.of(new).namespace}/{Meta.of(new).name}"
        plan.steps.append(Step(f"adopt {what} for {handle}",
                               _adopter(gateway, res, namespace, reference["name"], version, labels, marks,
                                        f"adopted {what} for {handle}")))


def _adopter(gateway: Gateway, res: Resource, namespace: str | None, name: str, version: str | None,
             labels: Mapping[str, str], annotations: Mapping[str, str], done: str) -> Callable[[], Awaitable[str]]:
    async def adopt() -> str:
        # The resourceVersion read while planning: a resource changed since is refused, not overwritten.
        await gateway.merge_patch(res, namespace, name, {"metadata": {
            "resourceVersion": version, "labels": dict(labels), "annotations": dict(annotations)}})
        return done
    return adopt


# ------------------------------------------------------------------------------------ Jumpstarter


async def _jumpstarter_plan(gateway: Gateway, namespaces: Sequence[str], group: str) -> Plan:
    hint = f"is the Jumpstarter controller installed, with the API group {group}? (--jumpstarter-group)"
    plan = Plan()
    for kind, new_res, keep_status in (("Client", CLIENT, False), ("ExporterAccessPolicy", POLICY, False),
                                       ("Exporter", EXPORTER, True), ("Lease", LEASE, True)):
        old_res = Resource(group, "v1alpha1", kind, {"ExporterAccessPolicy": "exporteraccesspolicies"}.get(
            kind, kind.lower() + "s"))
        for namespace in _scopes(namespaces):
            for obj in await _listed(gateway, old_res, namespace, hint):
                status = View.of(obj).status if keep_status else None
                _create(gateway, plan, new_res, obj, None, status=status,
                        keep=_ended_label if kind == "Lease" else None)
    return plan


def _ended_label(old: Mapping[str, Any], new: dict[str, Any]) -> None:
    if LeaseView.of(old).ended:
        new["metadata"].setdefault("labels", {})[LEASE_ENDED] = "true"


# ------------------------------------------------------------------------------------ shared


async def _no_running_operator(gateway: Gateway, operator_namespace: str, now: datetime) -> None:
    """Refuse while an elected lessor operator renews its leadership: it could serve a claim or a lease
    between two steps (a claim seen before its handle gets a new one)."""
    try:
        lease = await gateway.get(COORDINATION_LEASE, operator_namespace, LEASE_NAME)
    except ApiError as error:
        if error.not_found:
            return
        raise
    spec = View.of(lease).spec
    renewed, holder = spec.get("renewTime"), spec.get("holderIdentity")
    duration = float(spec.get("leaseDurationSeconds") or 15)
    if holder and renewed and not _past(renewed, now - timedelta(seconds=2 * duration)):
        raise MigrationError(f"lessor's operator is running ({holder} renewed the Lease {operator_namespace}/"
                             f"{LEASE_NAME} at {renewed}): stop it first (scale its Deployment to 0, or stop "
                             "`lessor run`), migrate, then start it again")



def _create(gateway: Gateway, plan: Plan, res: Resource, old: Mapping[str, Any], ops: str | None, *,
            status: Mapping[str, Any] | None = None,
            keep: Callable[[Mapping[str, Any], dict[str, Any]], None] | None = None) -> dict[str, Any] | None:
    """Plan the creation of the lessor object for `old` (and its status); returns it, or None if it cannot be."""
    new, notes = convert_object(old, operator_namespace=ops or "lessor-system")
    plan.notes += [note for note in notes if note.field != "status"]
    if new is None:
        return None
    if keep is not None:
        keep(old, new)
    created = Meta.of(new)
    namespace, name = created.namespace or None, created.name
    text = f"{res.kind} {namespace or ''}/{name}"

    async def create() -> str:
        try:
            await gateway.create(res, namespace, new)
        except ApiError as error:
            if error.status != 409:
                raise
            return f"exists: {text} (left as it is)"
        if status:
            await gateway.patch_status(res, namespace, name, dict(status))
        return f"created: {text}" + (" with its status" if status else "")

    plan.steps.append(Step(f"create {text}" + (" with its status" if status else ""), create))
    return new


def _scopes(namespaces: Sequence[str]) -> list[str | None]:
    """The namespaces to list in; None: all of them."""
    return list(namespaces) or [None]


async def _listed(gateway: Gateway, res: Resource, namespace: str | None, hint: str) -> list[dict[str, Any]]:
    try:
        return (await gateway.list(res, namespace))[0]
    except ApiError as error:
        if error.not_found:
            raise MigrationError(f"the API server serves no {res.kind} in {res.api_version}: {hint}") from None
        raise


def _subject(obj: Mapping[str, Any]) -> str:
    meta = Meta.of(obj)
    return f"{obj.get('kind')} {meta.namespace}/{meta.name}"


def _entries(fields: Mapping[str, Any]) -> list[Any]:
    """`resources` of a spec or status: the entries that are mappings (a user may write any shape)."""
    value = fields.get("resources")
    return [e if isinstance(e, Mapping) else {} for e in value] if isinstance(value, list) else []


def _past(value: Any, now: datetime) -> bool:
    try:
        return parse_timestamp(str(value)) <= now
    except (TypeError, ValueError):
        return False
