"""What the checks share: field paths as users write them, and what an update changed."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from lessor.admission import AdmissionRequest, Cause
from lessor.jsonpatch import parse_pointer
from lessor.selectors import SelectorError

_PLAIN_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_-]*")


def field_path(prefix: str, pointer: str) -> str:
    """``spec.resources[0].template`` + ``/data/size`` is ``spec.resources[0].template.data.size``.

    Library errors name JSON pointers; a denial names the field the way the
    user wrote it, so kubectl output reads like the manifest.
    """
    path = prefix
    for token in parse_pointer(pointer):
        if token.isdigit():
            path += f"[{token}]"
        elif _PLAIN_KEY.fullmatch(token):
            path += f".{token}" if path else token
        else:
            path += f"[{token}]"
    return path


def spec(obj: Mapping[str, Any] | None) -> Mapping[str, Any]:
    spec = (obj or {}).get("spec")
    return spec if isinstance(spec, Mapping) else {}


def spec_changed(request: AdmissionRequest, *keys: str) -> bool:
    """Whether a create, or an update that changed one of these ``spec`` keys.

    Checks judge what a change asks for: releasing a lease must not be
    refused because its client was deleted since it was created.
    """
    if request.get("operation") != "UPDATE":
        return True
    new, old = spec(request.get("object")), spec(request.get("oldObject"))
    return any(new.get(key) != old.get(key) for key in keys)


def selector_causes(error: SelectorError) -> list[Cause]:
    return [Cause(cause.message, cause.field) for cause in error.causes]
