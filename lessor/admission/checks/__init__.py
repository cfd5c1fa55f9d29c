"""lessor's preflight checks, one module per kind; see docs/admission.md for the list."""

from __future__ import annotations

from lessor.actors.provisioning.throttle import Throttle
from lessor.admission.registry import Registry
from lessor.admission.checks.claims import ClaimChecker
from lessor.admission.checks.leases import LeaseChecker
from lessor.admission.checks.policies import PolicyChecker
from lessor.admission.checks.pools import PoolChecker
from lessor.admission.checks.providers import ProviderChecker
from lessor.admission.checks.scalings import ScalingChecker
from lessor.gateway.resources import CLAIM, LEASE, POLICY, POOL, PROVIDER, SCALING


def preflight_registry(operator_namespace: str, throttle: Throttle | None = None) -> Registry:
    """Every checker, for its kind; providers are looked up in ``operator_namespace``. ``throttle``: the
    operator's, so that templates running out of time in the webhook count as in its claim actors."""
    registry = Registry()
    registry.register(LEASE.group, LEASE.kind, LeaseChecker())
    registry.register(POLICY.group, POLICY.kind, PolicyChecker())
    registry.register(PROVIDER.group, PROVIDER.kind, ProviderChecker())
    registry.register(POOL.group, POOL.kind, PoolChecker(operator_namespace, throttle))
    registry.register(CLAIM.group, CLAIM.kind, ClaimChecker(operator_namespace, throttle))
    registry.register(SCALING.group, SCALING.kind, ScalingChecker())
    return registry


__all__ = ["ClaimChecker", "LeaseChecker", "PolicyChecker", "PoolChecker", "ProviderChecker", "ScalingChecker",
           "preflight_registry"]
