"""The credential of a Client or an Exporter: a token in a Secret named by `status.credential.name`.

Jumpstarter's tools authenticate with a bearer token that the controller mints for each Client and
Exporter. When lessor serves that protocol (`lessor run --grpc-port`, `Context.credentials` set), the
Client's actor and the exporter actor call `ensure_credential` whenever they see their object: it keeps a
Secret `<name>-client` / `<name>-exporter` (key `token`, owned by the object so that deleting it deletes the
Secret) and writes `status.credential.name` and `status.endpoint` under a resourceVersion precondition.

The credential heals: the actor reads its Secret again at an observation at least `CHECK_EVERY` after its last
read (and at its start), and at the renewal time of the token it holds (a timer). A Secret deleted or without
its token is made again; a token that has expired, or is in the last tenth of its lifetime, is minted again.

A Secret of that name that lessor did not make (no `app.kubernetes.io/managed-by: lessor` label) is left
alone and no credential is written: lessor never overwrites a user's Secret.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from lessor.model.views import Meta
from lessor.model.views.leasing import ClientView, ExporterView

from ..api import AlreadyExists, ApiFailure, Conflict, Kind, NotFound
from ..context import Credentials
from ..object_actor import ObjectActor

log = logging.getLogger(__name__)

Credentialed = ClientView | ExporterView

SECRET = Kind("v1", "Secret", "secrets")
TOKEN_KEY = "token"
MANAGED_BY = ("app.kubernetes.io/managed-by", "lessor")


def secret_name(name: str, word: str) -> str:
    """`board-1-exporter`, `alice-client`: the name upstream gives the Secret."""
    return f"{name}-{word}"


def _owned_by(secret: Meta, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in secret.owners)


def _owner_references(obj: Credentialed) -> list[dict[str, Any]]:
    return [{"apiVersion": obj.body.get("apiVersion"), "kind": obj.body.get("kind"), "name": obj.name,
             "uid": obj.meta.uid}]


def _secret_body(obj: Credentialed, name: str, token: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1", "kind": "Secret", "type": "Opaque",
        "metadata": {
            "name": name, "namespace": obj.namespace,
            "labels": {MANAGED_BY[0]: MANAGED_BY[1]},
            "ownerReferences": _owner_references(obj),
        },
        "data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()},
    }


RETRY_AFTER = 60.0
"""Seconds before an object whose credential could not be written is tried again (not at every heartbeat)."""
CHECK_EVERY = 60.0
"""Seconds at least between two reads of a credential Secret that an observation makes (an exporter is
observed at every heartbeat): a deleted or emptied Secret is made again at the first observation after."""


@dataclass(slots=True)
class CredentialState:
    """One actor's knowledge of its credential, kept by the actor (its incarnation's, never a module's)."""

    check_at: float = 0.0
    """Monotonic time from which an observation reads the Secret again (0: at the next)."""
    retry_at: float = 0.0
    """Monotonic time before which a failed write is not tried again."""


@dataclass(frozen=True, slots=True)
class RenewCredential:
    """Sent to self at the renewal time of the token in the object's Secret: read it, and mint it again."""


async def ensure_credential(actor: ObjectActor, word: str, state: CredentialState, *, renew: bool = False) -> None:
    """Give the actor's object a credential if lessor serves gRPC and it has none (or one of a former object),
    and heal the one it has (see the module's docstring); `renew`: read the Secret now (the renewal timer).

    A failure (the API refuses the Secret: RBAC, quota) is logged and tried again after `RETRY_AFTER`: it never
    fails the actor, whose leasing does not depend on it."""
    credentials = actor.ctx.credentials
    obj: Credentialed | None = actor.seen_as(ClientView) if word == "client" else actor.seen_as(ExporterView)
    if credentials is None or obj is None:
        return
    now = time.monotonic()
    if now < state.retry_at:
        return
    try:
        await _ensure(actor, word, credentials, obj, state, renew=renew)
        state.retry_at = 0.0
    except (ApiFailure, _NotOurs) as err:
        if isinstance(err, ApiFailure) and err.reason == "NotLeader":
            return  # this term is over: the next leader writes it
        state.retry_at = now + RETRY_AFTER
        log.warning("%s %s/%s: its credential could not be written (tried again in %.0fs): %s", word,
                    actor.namespace, actor.name, RETRY_AFTER, err)


class _NotOurs(Exception):
    """A Secret of the credential's name that lessor did not make."""


@dataclass(frozen=True, slots=True)
class RotateCredential:
    """Ask: a freshly signed token in the object's credential Secret (Jumpstarter's RotateToken). Answers the
    token, or None when there is no credential lessor made for this object (yet)."""


async def rotate_credential(actor: ObjectActor, word: str) -> str | None:
    """Mint the object's token again (a new `iat`, and `exp` with a token lifetime) into its Secret: the Secret
    lessor made for this object only (its owner's UID), patched; the old token stays valid until it expires or
    the key is rotated, as upstream's."""
    credentials = actor.ctx.credentials
    obj: Credentialed | None = actor.seen_as(ClientView) if word == "client" else actor.seen_as(ExporterView)
    if credentials is None or obj is None:
        return None
    uid = obj.meta.uid
    name = secret_name(actor.name, word)
    found = await actor.ctx.api.get(SECRET, actor.namespace, name)
    if found is None or not _owned_by(Meta.of(found), uid):
        return None
    token = await credentials.mint(word, actor.namespace, actor.name, uid)
    await actor.ctx.api.merge_patch(SECRET, actor.namespace, name,
                                    {"data": {TOKEN_KEY: base64.b64encode(token.encode()).decode()}})
    return token


async def _ensure(actor: ObjectActor, word: str, credentials: Credentials, obj: Credentialed,
                  state: CredentialState, *, renew: bool) -> None:
    uid = obj.meta.uid
    name = secret_name(actor.name, word)
    named = obj.credential == name and obj.endpoint == credentials.endpoint
    if named and not renew and time.monotonic() < state.check_at:
        return
    api = actor.ctx.api
    found = await api.get(SECRET, actor.namespace, name)
    secret = Meta.of(found) if found is not None else None
    if secret is not None and not _owned_by(secret, uid):
        if secret.labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
            raise _NotOurs(f"Secret {actor.namespace}/{name} exists and is not lessor's (no label "
                           f"{MANAGED_BY[0]}={MANAGED_BY[1]}): it is left alone")
    token = _token(found) if secret is not None and _owned_by(secret, uid) else None
    renew_at = credentials.renew_at(token) if token else None
    if token is None or (renew_at is not None and renew_at <= time.time()):
        token = await credentials.mint(word, actor.namespace, actor.name, uid)
        renew_at = credentials.renew_at(token)
        body = _secret_body(obj, name, token)
        try:
            if secret is None:
                await api.create(SECRET, actor.namespace, body)
            else:  # a former object's (its token names another UID), emptied, or expiring
                await api.merge_patch(SECRET, actor.namespace, name,
                                      {"metadata": {"ownerReferences": _owner_references(obj)},
                                       "data": body["data"]})
        except AlreadyExists:
            pass  # made meanwhile by this object's previous incarnation: it names this UID
        except NotFound:
            state.check_at = 0.0  # deleted between the read and the patch: made at the next observation
            return
    state.check_at = time.monotonic() + CHECK_EVERY
    if renew_at is not None:  # a silent object's token is renewed all the same
        actor.schedule("credential", RenewCredential(), delay=max(renew_at - time.time(), 0.0))
    if named:
        return
    # Under the version this actor decided from; a conflict leaves `obj` alone (the exporter actor reads who
    # holds it from each newer version it observes) and the next observation writes again.
    patch = {"metadata": {"resourceVersion": obj.meta.resource_version or None},
             "status": {"credential": {"name": name}, "endpoint": credentials.endpoint}}
    try:
        actor.obj = await api.merge_patch(actor.kind, actor.namespace, actor.name, patch, subresource="status")
    except (Conflict, NotFound):
        state.check_at = 0.0
        return


def _token(secret: Mapping[str, Any] | None) -> str | None:
    encoded = ((secret or {}).get("data") or {}).get(TOKEN_KEY)
    try:
        return base64.b64decode(encoded).decode() or None if isinstance(encoded, str) else None
    except ValueError:
        return None
