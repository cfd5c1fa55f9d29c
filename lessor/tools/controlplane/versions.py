"""The one place the Kubernetes release is pinned; everything else is derived from it."""

KUBERNETES_VERSION = "1.35.4"
