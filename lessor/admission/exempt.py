"""Which admission requests are admitted without running any check.

Checks judge what an object asks for. A delete asks for nothing, and an
update that touches only metadata or status (labels, finalizers, the
controller's own status writes, the skip annotation itself) asks for nothing
new; checking those would only let a flaky check block clean-up and the
operator's own bookkeeping.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.admission.checker import AdmissionRequest

_CHECKED_OPERATIONS = frozenset({"CREATE", "UPDATE"})
_UNCHECKED_FIELDS = frozenset({"metadata", "status"})


def needs_checks(request: AdmissionRequest) -> bool:
    operation = request.get("operation")
    if operation not in _CHECKED_OPERATIONS:
        return False
    if operation == "UPDATE":
        return _checked_part(request.get("object")) != _checked_part(request.get("oldObject"))
    return True


def _checked_part(obj: Mapping[str, Any] | None) -> dict[str, Any]:
    return {key: value for key, value in (obj or {}).items() if key not in _UNCHECKED_FIELDS}
