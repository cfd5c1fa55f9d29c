"""The credential of a Client or an Exporter: a token in a Secret named by `status.credential.name`.

Jumpstarter's tools authenticate with a bearer token that the controller mints for each Client and
Exporter. When lessor serves that protocol (`lessor run --grpc-port`, `Context.credentials` set), the
Client's actor and the exporter actor call `ensure_credential` whenever they see their object: it keeps a
Secret `<name>-client` / `<name>-exporter` (key `token`, owned by the object so that deleting it deletes the
Secret) and writes `status.credential.name` and `status.endpoint` under a resourceVersion precondition.

A Secret of that name that lessor did not make (no `app.kubernetes.io/managed-by: lessor` label) is left
alone and no credential is written: lessor never overwrites a user's Secret.
"""

from __future__ import annotations

import base64
import logging
import time
from dataclasses import dataclass
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

_failed: dict[tuple[str, str, str], float] = {}  # (word, namespace, name) → when its last attempt failed


async def ensure_credential(actor: ObjectActor, word: str) -> None:
    """Give the actor's object a credential if lessor serves gRPC and it has none (or one of a former object).

    A failure (the API refuses the Secret: RBAC, quota) is logged and tried again after `RETRY_AFTER`: it never
    fails the actor, whose leasing does not depend on it."""
    credentials = actor.ctx.credentials
    obj: Credentialed | None = actor.seen_as(ClientView) if word == "client" else actor.seen_as(ExporterView)
    if credentials is None or obj is None:
        return
    key = (word, actor.namespace, actor.name)
    if time.monotonic() - _failed.get(key, -RETRY_AFTER) < RETRY_AFTER:
        return
    try:
        await _ensure(actor, word, credentials, obj)
        _failed.pop(key, None)
    except (ApiFailure, _NotOurs) as err:
        if isinstance(err, ApiFailure) and err.reason == "NotLeader":
            return  # this term is over: the next leader writes it
        _failed[key] = time.monotonic()
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


async def _ensure(actor: ObjectActor, word: str, credentials: Credentials, obj: Credentialed) -> None:
    uid = obj.meta.uid
    name = secret_name(actor.name, word)
    if obj.credential == name and obj.endpoint == credentials.endpoint:
        return  # level-based on the object: a Secret deleted by hand comes back at the object's next change
    api = actor.ctx.api
    found = await api.get(SECRET, actor.namespace, name)
    secret = Meta.of(found) if found is not None else None
    if secret is not None and not _owned_by(secret, uid):
        if secret.labels.get(MANAGED_BY[0]) != MANAGED_BY[1]:
            raise _NotOurs(f"Secret {actor.namespace}/{name} exists and is not lessor's (no label "
                           f"{MANAGED_BY[0]}={MANAGED_BY[1]}): it is left alone")
    if secret is None or not _owned_by(secret, uid):
        body = _secret_body(obj, name, await credentials.mint(word, actor.namespace, actor.name, uid))
        try:
            if secret is None:
                await api.create(SECRET, actor.namespace, body)
            else:  # a former object's: its token names another UID
                await api.merge_patch(SECRET, actor.namespace, name,
                                      {"metadata": {"ownerReferences": _owner_references(obj)},
                                       "data": body["data"]})
        except AlreadyExists:
            pass  # made meanwhile by this object's previous incarnation: it names this UID
    # Under the version this actor decided from; a conflict leaves `obj` alone (the exporter actor reads who
    # holds it from each newer version it observes) and the next observation writes again.
    patch = {"metadata": {"resourceVersion": obj.meta.resource_version or None},
             "status": {"credential": {"name": name}, "endpoint": credentials.endpoint}}
    try:
        actor.obj = await api.merge_patch(actor.kind, actor.namespace, actor.name, patch, subresource="status")
    except (Conflict, NotFound):
        return
