"""Rendering provider templates: every string inside an object is a Jinja2 template.

Type rule: a string that is exactly one `{{ expression }}` takes the value
of the expression (`"{{ resource_index }}"` is the number 0,
`"{{ resource_claim.metadata.labels }}"` is an object, timestamps become
RFC 3339 strings); any other string renders to a string. The value is
what the expression computed, never a re-parse of its text, so
`"{{ '1.0' }}"` stays the string `"1.0"`. Strings without Jinja markup are
returned untouched and object keys are never rendered. A field or list item
whose whole-string template is `omit` (`"{{ x | default(omit) }}"` with `x`
undefined) is left out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

from jinja2.exceptions import SecurityError

from .budget import MAX_SIZE, BudgetExceeded, deep_size, evaluating, out_of_time, too_big
from .errors import TemplateError, describe
from .jsonvalues import OMIT, plain
from .pointers import escape_pointer_token, strings_in
from .sandbox import compile_template
from .poolboy import Now, poolboy_object, poolboy_timedelta
from .timestamps import TimestampFactory

_MARKUP = ("{{", "{%", "{#")


def template_variables(
    *,
    resource_claim: Mapping[str, Any] | None = None,
    resource_handle: Mapping[str, Any] | None = None,
    resource_index: int | None = None,
    resource_provider: Mapping[str, Any] | None = None,
    resource_template: Mapping[str, Any] | None = None,
    requester_identity: Mapping[str, Any] | None = None,
    requester_user: Mapping[str, Any] | None = None,
    clock: Callable[[], datetime] | None = None,
) -> dict[str, Any]:
    """The variables a provider template sees.

    Those that do not apply (no claim bound yet, no requester annotation)
    are none rather than missing, so a template can test
    `resource_claim is none` instead of failing as undefined. The claim,
    handle and provider also answer Poolboy's attribute names
    (`resource_claim.annotations`, `.labels`, `.name`...: `poolboy.py`).
    """
    return {
        "resource_claim": poolboy_object(resource_claim),
        "resource_handle": poolboy_object(resource_handle),
        "resource_index": resource_index,
        "resource_provider": poolboy_object(resource_provider),
        "resource_template": resource_template,
        "requester_identity": requester_identity,
        "requester_user": requester_user,
        "timestamp": TimestampFactory(clock),
        "timedelta": poolboy_timedelta,
        "now": Now(clock),
        "omit": OMIT,
    }


def render_string(source: str, variables: Mapping[str, Any], path: str = "") -> Any:
    """Render one template string; raises TemplateError naming `path`."""
    return _render_string(source, variables, path, omit=False)


def _render_string(source: str, variables: Mapping[str, Any], path: str, *, omit: bool) -> Any:
    """`omit`: whether the caller leaves out a value that is `omit` (a field's or item's), or refuses it."""
    if not any(mark in source for mark in _MARKUP):
        return source
    try:
        with evaluating():
            value = compile_template(source)(variables)
            if value is OMIT and omit:
                return OMIT
            value = plain(value)
            if deep_size(value) > MAX_SIZE:
                raise SecurityError(too_big("the value"))
            return value
    except BudgetExceeded:
        raise TemplateError(out_of_time(), path) from None
    except Exception as error:  # anything the template provoked is the template's error
        raise TemplateError(describe(error), path) from error


def render_object(template: Any, variables: Mapping[str, Any], path: str = "") -> Any:
    """Render every string value in a JSON object, returning a new object.

    `path` is the JSON pointer of `template` itself (e.g. `/spec/override`),
    so errors name the field from the root of the Kubernetes object.
    """
    return _render_value(template, variables, path, omit=False)


def _render_value(template: Any, variables: Mapping[str, Any], path: str, *, omit: bool) -> Any:
    if isinstance(template, str):
        return _render_string(template, variables, path, omit=omit)
    if isinstance(template, Mapping):
        rendered = ((key, _render_value(value, variables, f"{path}/{escape_pointer_token(str(key))}", omit=True))
                    for key, value in template.items())
        return {key: value for key, value in rendered if value is not OMIT}
    if isinstance(template, list):
        items = (_render_value(item, variables, f"{path}/{index}", omit=True) for index, item in enumerate(template))
        return [item for item in items if item is not OMIT]
    return template


def template_errors(field: str, value: Any) -> list[str]:
    """`field<pointer>: why` for each string in `value` that is a template Jinja2 cannot parse."""
    errors = []
    for pointer, source in strings_in(value):
        if not any(mark in source for mark in _MARKUP):
            continue
        try:
            compile_template(source)
        except Exception as error:  # whatever Jinja2 raises while parsing is the template's error
            errors.append(f"{field}{pointer}: {describe(error)}")
    return errors
