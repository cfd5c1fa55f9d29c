"""A caller's own leases: found, listed, created and ended as it would by hand, for both services."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from typing import Any

import grpc

from lessor.actors.api import Api
from lessor.model.kinds import API_VERSION, LEASE
from lessor.model.selectors import SelectorError, parse_selector
from lessor.model.views.leasing import LeaseView

from .backend import Backend
from .guard import Refusal, in_namespace, invalid
from .names import parse_resource, selector_from_text
from .tokens import Subject

_NEVER = datetime.min.replace(tzinfo=UTC)


async def release(api: Api, lease: LeaseView) -> None:
    """End a lease as DeleteLease does: `spec.release`, which its actor turns into its end (Released)."""
    if active(lease):
        await api.merge_patch(LEASE, lease.namespace, lease.name, {"spec": {"release": True}})


async def own_lease(backend: Backend, subject: Subject, namespace: str, name: str) -> LeaseView:
    """The caller's own lease NAMESPACE/NAME: NOT_FOUND, or PERMISSION_DENIED for another client's."""
    in_namespace(subject, namespace, "leases")
    lease = LeaseView.maybe(await backend.api.get(LEASE, namespace, name))
    if lease is None:
        raise Refusal(grpc.StatusCode.NOT_FOUND, f"lease {namespace}/{name} does not exist")
    if lease.client != subject.name:
        raise Refusal(grpc.StatusCode.PERMISSION_DENIED,
                      f"lease {namespace}/{name} belongs to client {lease.client}, not to {subject.name}")
    return lease


def lease_ref(subject: Subject, text: str) -> tuple[str, str]:
    """(namespace, name) of a lease the controller's older calls name: `namespaces/NS/leases/NAME`, or a bare
    NAME in the caller's namespace (as the controller reads it)."""
    if "/" not in text:
        if not text:
            raise invalid("name: a lease name is required")
        return subject.namespace, text
    try:
        return parse_resource(text, "leases")
    except ValueError as err:
        raise invalid(str(err)) from None


def own_leases(backend: Backend, subject: Subject, namespace: str, *, only_active: bool,
               labels: Callable[[Mapping[str, str] | None], bool] = lambda _: True,
               tags: Callable[[Mapping[str, str] | None], bool] = lambda _: True) -> list[LeaseView]:
    """The caller's own leases of `namespace` in the informers' copy, oldest first, for ClientService's and
    ControllerService's ListLeases alike."""
    in_namespace(subject, namespace, "leases")
    leases = [
        lease for lease in map(LeaseView.of, backend.cached(LEASE.kind, namespace))
        if lease.client == subject.name
        and (active(lease) or not only_active)
        and labels(lease.meta.labels) and tags(lease.tags)
    ]
    leases.sort(key=lambda lease: (lease.meta.created or _NEVER, lease.name))
    return leases


async def create_lease(backend: Backend, subject: Subject, namespace: str, name: str,
                       spec: Mapping[str, Any]) -> LeaseView:
    """A new Lease of the caller's (`spec.clientRef`), named `name` or a fresh UUID, as it would write it by
    hand: for ClientService's CreateLease and ControllerService's RequestLease alike."""
    in_namespace(subject, namespace, "leases")
    body = {"apiVersion": API_VERSION, "kind": LEASE.kind,
            "metadata": {"name": name or str(uuid.uuid4()), "namespace": namespace},
            "spec": {"clientRef": {"name": subject.name}, **spec}}
    return LeaseView.of(await backend.api.create(LEASE, namespace, body))


def active(lease: LeaseView) -> bool:
    """Not ended, and not released (the actor writes its end a moment after DeleteLease sets spec.release)."""
    return not lease.ended and not lease.release


def selector_filter(text: str, field: str) -> Callable[[Mapping[str, str] | None], bool]:
    if not text:
        return lambda _: True
    try:
        selector = parse_selector(selector_from_text(text), field)
    except (ValueError, SelectorError) as err:
        raise invalid(f"{field}: {err}") from None
    return selector.matches
