"""ResourcePool checks: the pool's providers exist and its templates are ones they accept.

A pool with a bad template would fill itself with handles that fail, or
never fill at all; its author should hear about it when applying it.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from lessor.admission import AdmissionRequest, Check, Lookup
from lessor.admission.checks.provided import checks_result, entries, fetch_providers, providers_result, templates_result


class PoolChecker:
    name = "pool"
    check_names = ("pool-providers", "pool-templates", "pool-checks")

    def __init__(self, operator_namespace: str) -> None:
        self._providers_namespace = operator_namespace

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        pool, namespace = request["object"], self._providers_namespace
        resolved = entries(pool, await fetch_providers(pool, lookup, namespace), namespace)
        return {
            "pool-providers": partial(providers_result, resolved),
            "pool-templates": partial(templates_result, resolved, None),
            "pool-checks": partial(checks_result, resolved, None),
        }
