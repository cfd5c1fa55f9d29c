"""ResourceProvider checks: what the provider will run later must at least compile now.

A provider's templates, schema and regexes are used only when a claim or
pool needs them, possibly days later and for someone else; a typo found
then blocks that user. Refusing the provider blocks only its author.
What is refused is decided by `lessor.actors.provisioning.validity.provider_errors`
(the compiled provider the operator uses, and its `Valid` condition); the
checks only sort its errors by name.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

from lessor.actors.provisioning.validity import INVALID_REGEX, INVALID_SCHEMA, INVALID_TEMPLATE, provider_errors
from lessor.admission.checker import AdmissionRequest, Check, Lookup
from lessor.admission.checks.fields import deny_errors, grouped

_CHECKS = (
    ("provider-templates", lambda error: error.reason == INVALID_TEMPLATE
     and error.field.startswith(("spec.default", "spec.override", "spec.vars"))),
    ("provider-checks", lambda error: error.reason == INVALID_TEMPLATE),
    ("provider-schema", lambda error: error.reason == INVALID_SCHEMA),
    ("provider-regexes", lambda error: error.reason == INVALID_REGEX),
)


class ProviderChecker:
    name = "provider"
    check_names = ("provider-templates", "provider-checks", "provider-schema", "provider-regexes", "provider-spec")

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        errors = grouped(provider_errors(request["object"]), _CHECKS, "provider-spec")
        return {name: partial(deny_errors, found) for name, found in errors.items()}
