"""Whether a ResourceProvider is valid: one pure function, and its `Rule`.

The operator writes the verdict as the provider's `Valid` condition (the
`validity` actor, registered with this rule in lessor/app/operator.py) and the
admission webhook denies the same errors (lessor.admission checks for
providers): one rule, one place.

Reasons (besides the shared `InvalidDuration` and `InvalidField` of
`validity`): `InvalidTemplate` (a Jinja2 template or expression that does
not compile, or uses a function, filter or test lessor's templates lack:
`lessor.templates.vocabulary`), `InvalidSchema`, `InvalidRegex`, `KindNotFixed` (a provider
that does not fix the kind it creates).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.model.jsonpatch import field_path

from ..api import PROVIDER
from ..validity import INVALID_DURATION, INVALID_FIELD, FieldError, Rule
from lessor.model.views.provisioning import ProviderView

from .provider import provider_from

INVALID_TEMPLATE = "InvalidTemplate"
INVALID_SCHEMA = "InvalidSchema"
INVALID_REGEX = "InvalidRegex"
KIND_NOT_FIXED = "KindNotFixed"


# --- ResourceProvider -----------------------------------------------------------------------


def provider_errors(provider: Mapping[str, Any]) -> list[FieldError]:
    """The problems `provider_from` finds (the provider the claims, pools and handles use), by field."""
    return [_provider_error(text) for text in provider_from(provider).errors]


def _provider_error(text: str) -> FieldError:
    """`spec.override/metadata/name: message` (as the compiled provider says it) as a FieldError."""
    field, _, message = text.partition(": ")
    prefix, slash, pointer = field.partition("/")
    if slash:  # a string inside default or override: a template that does not compile
        return FieldError(field_path(prefix, slash + pointer), message, INVALID_TEMPLATE)
    return FieldError(field, message, _provider_reason(field, message))


def _provider_reason(field: str, message: str) -> str:
    if field.startswith("spec.validation.openAPIV3Schema"):
        return INVALID_SCHEMA
    if (field.startswith("spec.matchIgnore") or field.endswith(".pathMatch")) and "regular expression" in message:
        return INVALID_REGEX
    if field.startswith("spec.lifespan"):
        return INVALID_TEMPLATE if message.startswith(("syntax error", "refused by the sandbox")) else INVALID_DURATION
    if field.startswith(("spec.validation.checks", "spec.readinessCheck", "spec.healthCheck")) or \
            field.endswith((".check", ".waitFor", ".when")):  # parameters' checks, links' expressions
        return INVALID_TEMPLATE
    if field == "spec.override" and "apiVersion" in message:
        return KIND_NOT_FIXED
    return INVALID_FIELD


def _provider_summary(obj: Mapping[str, Any]) -> str:
    provider = provider_from(obj)
    if provider.link_only:
        return "creates nothing itself: a claim of it gets its linkedResourceProviders' resources"
    if provider.kind and provider.api_version:
        return f"creates {provider.kind} ({provider.api_version}) for each claim's resource"
    return "creates the kind its override's templates render, for each claim's resource"


PROVIDER_RULE = Rule(PROVIDER, provider_errors, log_refusals=True, summary=_provider_summary, view=ProviderView)
