"""The topology: an in-memory graph of the watched objects that routes each change to the
actors it concerns (DESIGN.md section 1; docs/topology.md)."""

from lessor.topology.changes import Change, Created, Deleted, Updated
from lessor.topology.fields import Edge
from lessor.topology.graph import ADDED, DELETED, MODIFIED, Topology
from lessor.topology.keys import ObjectKey, address, key_of

__all__ = [
    "ADDED",
    "DELETED",
    "MODIFIED",
    "Change",
    "Created",
    "Deleted",
    "Edge",
    "ObjectKey",
    "Topology",
    "Updated",
    "address",
    "key_of",
]
