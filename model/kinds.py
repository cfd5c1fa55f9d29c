"""The kinds lessor owns: apiVersion, kind, plural and the prefix of their actors' addresses.

The API protocol (`lessor.actors.api`), the gateway's REST resources and the
topology's keys all take their identity from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

GROUP = "lessor.dev"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"


@dataclass(frozen=True)
class Kind:
    """A kind named by apiVersion and kind (equality and hashing use only these two).

    `plural` and `prefix` (the actor address prefix, None for kinds without actors) are known for lessor's
    own kinds; any other kind is just `Kind(apiVersion, kind)`.
    """

    api_version: str
    kind: str
    plural: str = field(default="", compare=False)
    prefix: str | None = field(default=None, compare=False)


EXPORTER = Kind(API_VERSION, "Exporter", "exporters", "exporter")
CLIENT = Kind(API_VERSION, "Client", "clients", "client")
POLICY = Kind(API_VERSION, "ExporterAccessPolicy", "exporteraccesspolicies", "policy")
LEASE = Kind(API_VERSION, "Lease", "leases", "lease")
PROVIDER = Kind(API_VERSION, "ResourceProvider", "resourceproviders", "provider")
POOL = Kind(API_VERSION, "ResourcePool", "resourcepools", "pool")
HANDLE = Kind(API_VERSION, "ResourceHandle", "resourcehandles", "handle")
CLAIM = Kind(API_VERSION, "ResourceClaim", "resourceclaims", "claim")
SCALING = Kind(API_VERSION, "ResourcePoolScaling", "resourcepoolscalings")  # no actor: its pool's actor serves it

LESSOR_KINDS: tuple[Kind, ...] = (EXPORTER, CLIENT, POLICY, LEASE, PROVIDER, POOL, HANDLE, CLAIM, SCALING)
BY_NAME: dict[str, Kind] = {k.kind: k for k in LESSOR_KINDS}
"""lessor's kinds by their bare kind name."""


def kind_name(api_version: str, kind: str) -> str:
    """How the topology names a kind: bare for lessor.dev kinds (or when apiVersion is unknown), else
    `apiVersion/Kind` (`v1/ConfigMap`), because a created resource may be of any group."""
    if not api_version or (kind in BY_NAME and api_version.partition("/")[0] == GROUP):
        return kind
    return f"{api_version}/{kind}"


def kind_of(reference: Mapping[str, Any]) -> Kind:
    """The kind a reference or object names by its `apiVersion` and `kind` (lessor's own with its plural and prefix)."""
    api_version, kind = str(reference.get("apiVersion") or ""), str(reference.get("kind") or "")
    known = BY_NAME.get(kind)
    return known if known is not None and known.api_version == api_version else Kind(api_version, kind)
