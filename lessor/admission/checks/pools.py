"""ResourcePool checks: the pool's providers exist and its templates are ones they accept.

Judged as the operator judges a pool (`resolve_pool`): providers named, the
schema only. A provider's ``validation.checks`` are written about claims
(``resource_claim``), so a pool's template is not run through them.

A pool with a bad template would fill itself with handles that fail, or
never fill at all; its author should hear about it when applying it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import Any

from lessor.actors.provisioning.lifespan import LifespanConfig
from lessor.actors.provisioning.throttle import Throttle
from lessor.admission.checker import AdmissionRequest, Check, Lookup
from lessor.admission.results import Cause, CheckResult
from lessor.admission.checks.fields import spec
from lessor.admission.checks.provided import providers_result, resolve_resources, templates_result


class PoolChecker:
    name = "pool"
    check_names = ("pool-providers", "pool-templates", "pool-lifespan")

    def __init__(self, operator_namespace: str, throttle: Throttle | None = None) -> None:
        self._providers_namespace = operator_namespace
        self._throttle = throttle

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        pool, namespace = request["object"], self._providers_namespace
        resolution, _ = await resolve_resources(pool, lookup, namespace, claim=False, throttle=self._throttle)
        checks: dict[str, Check] = {
            "pool-providers": partial(providers_result, resolution),
            "pool-templates": partial(templates_result, resolution),
        }
        if spec(pool).get("lifespan") is not None:
            checks["pool-lifespan"] = partial(_lifespan, spec(pool)["lifespan"])
        return checks


async def _lifespan(lifespan: Any) -> CheckResult:
    """The settings the operator would refuse (a duration beyond 100 years...), read by the operator's parser."""
    _, errors = LifespanConfig.parse(lifespan, "spec.lifespan")
    causes = [Cause(message, field) for field, message in (error.split(": ", 1) for error in errors)]
    return CheckResult.deny(*causes) if causes else CheckResult.ok()
