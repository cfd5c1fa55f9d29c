"""How the topology names objects: by kind name (a string), as `lessor.model` defines them.

The topology keys objects by `ObjectKey`, whose kind is the bare kind for lessor's own kinds;
these are those names, taken from the object model.
"""

from __future__ import annotations

from lessor.model import kinds
from lessor.model.keys import ObjectKey, address, key_of
from lessor.model.kinds import GROUP, kind_name

__all__ = ["CLAIM", "CLIENT", "EXPORTER", "GROUP", "HANDLE", "LEASE", "LESSOR_KINDS", "POLICY", "POOL", "PROVIDER",
           "SCALING", "ObjectKey", "address", "key_of", "kind_name"]

EXPORTER = kinds.EXPORTER.kind
CLIENT = kinds.CLIENT.kind
POLICY = kinds.POLICY.kind
LEASE = kinds.LEASE.kind
PROVIDER = kinds.PROVIDER.kind
POOL = kinds.POOL.kind
HANDLE = kinds.HANDLE.kind
CLAIM = kinds.CLAIM.kind
SCALING = kinds.SCALING.kind

LESSOR_KINDS = frozenset(kinds.BY_NAME)
