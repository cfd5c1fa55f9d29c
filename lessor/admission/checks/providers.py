"""ResourceProvider checks: what the provider will run later must at least compile now.

A provider's templates, schema and regexes are used only when a claim or
pool needs them, possibly days later and for someone else; a typo found
then blocks that user. Refusing the provider blocks only its author.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import partial
from typing import Any

from lessor.admission import AdmissionRequest, Cause, Check, CheckResult, Lookup
from lessor.admission.checks.fields import field_path, spec
from lessor.templates import InvalidSchemaError, strings_in, validate_schema
from lessor.templates.errors import describe
from lessor.templates.sandbox import compile_expression, compile_template

_TEMPLATED = ("default", "override")


class ProviderChecker:
    name = "provider"
    check_names = ("provider-templates", "provider-checks", "provider-schema", "provider-regexes")

    async def setup(self, request: AdmissionRequest, lookup: Lookup) -> Mapping[str, Check]:
        provider = spec(request["object"])
        validation = provider.get("validation") or {}
        checks: dict[str, Check] = {"provider-regexes": partial(_regexes, provider)}
        if (provider.get("template") or {}).get("enable"):
            checks["provider-templates"] = partial(_templates, provider)
        if validation.get("checks"):
            checks["provider-checks"] = partial(_check_expressions, validation["checks"])
        if "openAPIV3Schema" in validation:
            checks["provider-schema"] = partial(_schema, validation["openAPIV3Schema"])
        return checks


async def _templates(provider: Mapping[str, Any]) -> CheckResult:
    causes = []
    for key in _TEMPLATED:
        for pointer, source in strings_in(provider.get(key)):
            try:
                compile_template(source)
            except Exception as err:  # whatever Jinja2 raises while parsing is the template's error
                causes.append(Cause(describe(err), field_path(f"spec.{key}", pointer)))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()


async def _check_expressions(checks: list[Any]) -> CheckResult:
    causes = []
    for i, check in enumerate(checks):
        expression = check.get("check") if isinstance(check, Mapping) else None
        if not isinstance(expression, str):
            continue  # the CRD schema requires it
        try:
            compile_expression(expression)
        except Exception as err:
            causes.append(Cause(describe(err), f"spec.validation.checks[{i}].check"))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()


async def _schema(schema: Any) -> CheckResult:
    field = "spec.validation.openAPIV3Schema"
    if not isinstance(schema, Mapping):
        return CheckResult.deny(Cause("must be an object", field))
    try:
        validate_schema(None, schema)
    except InvalidSchemaError as err:
        return CheckResult.deny(Cause(str(err), field))
    return CheckResult.ok()


async def _regexes(provider: Mapping[str, Any]) -> CheckResult:
    """matchIgnore and updateFilters[].pathMatch are Python regular expressions over JSON pointers."""
    patterns = [(f"spec.matchIgnore[{i}]", p) for i, p in enumerate(provider.get("matchIgnore") or ())]
    patterns += [
        (f"spec.updateFilters[{i}].pathMatch", f.get("pathMatch"))
        for i, f in enumerate(provider.get("updateFilters") or ())
        if isinstance(f, Mapping)
    ]
    causes = []
    for field, pattern in patterns:
        try:
            re.compile(pattern)
        except (re.error, TypeError) as err:
            causes.append(Cause(f"invalid regular expression {pattern!r}: {err}", field))
    return CheckResult.deny(*causes) if causes else CheckResult.ok()
