"""Manifests that run lessor as a pod, and the samples `lessor dev` applies."""
