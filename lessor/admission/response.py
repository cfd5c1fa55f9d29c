"""Turns check reports into the ``response`` of an AdmissionReview.

Clients such as kubectl print ``status.message`` and ignore
``status.details``, so the message repeats every cause on one line; the
details keep them structured, one cause per check cause, with the check's
name as the cause's ``reason`` (the JSON name of metav1.StatusCause's type).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lessor.admission.checker import AdmissionRequest
from lessor.admission.results import Report

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"


def admission_review(response: dict[str, Any]) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}


def build_response(
    request: AdmissionRequest, reports: Sequence[Report], warnings: Sequence[str] = ()
) -> dict[str, Any]:
    """Internal errors win over denials (500 InternalError, else 422 Invalid).

    A check's warnings are prefixed with its name so users know whom to ask.
    """
    response: dict[str, Any] = {"uid": request.get("uid", ""), "allowed": True}
    all_warnings = [*warnings, *(f"{r.name}: {w}" for r in reports for w in r.result.warnings)]
    if all_warnings:
        response["warnings"] = all_warnings
    rejecting = [r for r in reports if not r.result.allowed]
    if not rejecting:
        return response
    if any(r.result.internal_error for r in rejecting):
        code, reason, verdict = 500, "InternalError", "lessor preflight could not finish"
    else:
        code, reason, verdict = 422, "Invalid", "denied by lessor preflight"
    causes = [
        {"reason": r.name, "message": _one_line(c.message), **({"field": c.field} if c.field else {})}
        for r in rejecting
        for c in r.result.causes
    ]
    summary = "; ".join(
        ": ".join(part for part in (cause["reason"], cause.get("field", ""), cause["message"]) if part)
        for cause in causes
    )
    kind = request.get("kind") or {}
    response["allowed"] = False
    response["status"] = {
        "status": "Failure",
        "code": code,
        "reason": reason,
        "message": f"{verdict}: {summary}",
        "details": {
            "name": request.get("name", ""),
            "group": kind.get("group", ""),
            "kind": kind.get("kind", ""),
            "causes": causes,
        },
    }
    return response


def _one_line(text: str) -> str:
    return " ".join(text.split())
