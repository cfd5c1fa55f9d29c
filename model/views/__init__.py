"""One typed, immutable view per object kind, built once when an object is observed.

Actors, rules and the webhook read an object's fields through its view, not by walking the raw body: a field
that a user may write in any shape is read, checked and typed in one place, and a notion such as "ended",
"enabled" or "held by" is defined once. The raw body stays at hand (`View.body`) for what is written back
(patches, templates), never for deciding.

- `meta`: `Meta`, the metadata every kind shares, and `View`, the base of every kind's view;
- `leasing`: Exporter, Lease, Client, ExporterAccessPolicy;
- `provisioning`: ResourceClaim, ResourceHandle, ResourcePool, ResourceProvider, and the ResourcePoolScaling a
  pool reads.
"""

from .meta import Meta, View, ref_name

__all__ = ["Meta", "View", "ref_name"]
