"""Every label and annotation name lessor writes or reads under its own domain, in one place.

They are part of the API (docs/api.md lists them): users select on them
(`kubectl get leases -l lessor.dev/lease-ended!=true`), and the operator finds
what it made by them after a restart.
"""

from __future__ import annotations

DOMAIN = "lessor.dev/"
"""Keys under it are lessor's: a claim or provider may not set them on what lessor creates."""

LEASE_ENDED = "lessor.dev/lease-ended"
"""Label of an ended Lease ("true"), so that watches and lists can leave ended leases out."""

HANDLE_NAME = "lessor.dev/resource-handle-name"
HANDLE_NAMESPACE = "lessor.dev/resource-handle-namespace"
CLAIM_NAME = "lessor.dev/resource-claim-name"
CLAIM_NAMESPACE = "lessor.dev/resource-claim-namespace"
PROVIDER_NAME = "lessor.dev/resource-provider-name"
POOL_NAME = "lessor.dev/resource-pool-name"
"""Labels of each resource a handle creates: whose it is (the topology routes its changes by them)."""

APPLIED = "lessor.dev/applied"
"""Annotation of each resource a handle creates: a digest of the definition last created or applied, so that
whatever incarnation of the handle's actor looks next sees that a definition which only leaves a field out
differs from what the resource was given (handle.py, `stamped`)."""

IGNORE = "lessor.dev/ignore"
"""A claim, handle or pool carrying this label (any value, Poolboy's `.../ignore` too once converted) is left
alone by the operator: no status, no binding, no resource written or deleted, until the label goes."""

POOL_SCALING = "lessor.dev/resource-pool-scaling"
"""Label of a handle a ResourcePoolScaling asked for."""

CLAIM_TEMPLATES = "lessor.dev/claim-templates"
"""Annotation of a bound handle: the claim's templates (JSON) as the handle was last brought in step with them.

A claim changed while lessor was down is diffed from these, so a removal reaches the handle too."""

TAG_PREFIX = "metadata.lessor.dev/"
"""Prefix of the labels a Lease gets from its `spec.tags` (`metadata.lessor.dev/team: qa`)."""

SKIP_PREFLIGHT = "preflight.lessor.dev/skip"
"""Annotation with which a user skips the webhook's preflight checks (`all`, or a list of them)."""

HOLDER_USERNAME = "lessor.dev/holder-username"
HOLDER_POD = "lessor.dev/holder-pod"
"""Annotations of the leader Lease: the holder's username and pod as the API server authenticates it,
which the API server's fence (deploy/leader-fence.yaml) compares with each writer's."""
HOLDER_GRPC = "lessor.dev/holder-grpc"
"""Annotation of the leader Lease: HOST:PORT where the holder serves Jumpstarter's gRPC protocol
(`lessor run --grpc-advertise`), which followers name to the tools they turn away."""
