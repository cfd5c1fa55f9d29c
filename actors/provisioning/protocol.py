"""What claim, pool and handle actors say to each other.

A claim gets a pool's handle with one request and one answer:

    claim ──WantHandle──────► pool     bind me one of your unbound handles that matches my templates
    claim ◄──────HandleBound── pool     after spec.resourceClaim was written (the commit point)
    claim ◄─────────NoHandle── pool     none matches or none is free: the claim makes its own

The claim asks one pool at a time and waits for its answer (a timer asks
again if the pool died with the question). A pool answers a claim that one
of its handles already names with that handle, so asking twice never binds
twice. Should a crash between a commit and its answer still leave a claim
named by two handles, the claim keeps the one it adopted first and deletes
the other.

    claim ──ClaimDeleted──► handle    the claim is gone: delete the resources, then the handle
    handle ──WatchKind────► kinds     (the app) watch created resources of this kind
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from .claim_spec import ClaimSpec

KINDS = "kinds"
"""The app's actor that starts a watch for each kind of created resource (labelled with a handle)."""


@dataclass(frozen=True, slots=True)
class WantHandle:
    """To a pool: bind one of your handles to this claim, if one matches `spec` (the claim, resolved)."""

    namespace: str
    claim: str
    spec: ClaimSpec
    claim_object: Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class HandleBound:
    """To a claim: `handle` (as written) names you in `spec.resourceClaim`; its lifespan starts at `start`."""

    pool: str
    handle: Mapping[str, Any]
    start: datetime


@dataclass(frozen=True, slots=True)
class NoHandle:
    """To a claim: this pool has no unbound handle that matches."""

    pool: str


@dataclass(frozen=True, slots=True)
class ClaimDeleted:
    """To a handle: the claim it was bound to was deleted (the handle checks with the API before acting)."""

    namespace: str
    claim: str


@dataclass(frozen=True, slots=True)
class WatchKind:
    """To the app's `kinds` actor: make sure created resources of this kind are watched."""

    api_version: str
    kind: str
