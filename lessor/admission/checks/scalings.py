"""ResourcePoolScaling checks: the pool it names, looked up, so that a typo is heard at once.

A scaling may come before its pool (the pool's actor reads it when the pool
appears), so a missing pool is a warning, not a denial.
"""

from __future__ import annotations

from collections.abc import Mapping

from lessor.admission.checker import AdmissionRequest, Check, Lookup
from lessor.admission.results import CheckResult
from lessor.admission.checks.fields import name_problem
from lessor.gateway.resources import POOL
from lessor.model.views.provisioning import ScalingView


class ScalingChecker:
    name = "scaling"
    check_names = ("scaling-pool",)

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        scaling = ScalingView.of(request["object"])
        name = scaling.pool_given
        namespace = scaling.namespace or request.get("namespace") or ""
        if not isinstance(name, str) or name_problem(name):
            return {}  # the CRD's schema answers a missing name

        async def check() -> CheckResult:
            if await lookup.get(POOL.group, POOL.kind, namespace, name) is not None:
                return CheckResult.ok()
            return CheckResult.ok(f"there is no ResourcePool {name} in namespace {namespace} (yet): "
                                  "the scaling waits for it")

        return {"scaling-pool": check}
