"""Answers one AdmissionReview: exemptions, the skip annotation, the checks, the response."""

from __future__ import annotations

from typing import Any

from lessor.admission.checker import AdmissionRequest, Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.exempt import needs_checks
from lessor.admission.registry import Registry
from lessor.admission.response import API_VERSION, KIND, admission_review, build_response
from lessor.admission.runner import run_checks
from lessor.admission.skip import requested_skips, select


class MalformedReview(ValueError):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview request."""


async def review(body: Any, registry: Registry, lookup: Lookup, deadline: Deadline) -> dict[str, Any]:
    """The AdmissionReview to answer ``body`` with; raises MalformedReview."""
    request = _request(body)
    if not needs_checks(request):
        return admission_review(build_response(request, ()))
    kind = request.get("kind") or {}
    checkers = registry.checkers(kind.get("group", ""), kind.get("kind", ""))
    selection = select(checkers, requested_skips(request.get("object")))
    reports = await run_checks(selection.selected, request, lookup, deadline.seconds)
    return admission_review(build_response(request, reports, selection.warnings))


def _request(body: Any) -> AdmissionRequest:
    if not isinstance(body, dict):
        raise MalformedReview("the body is not a JSON object")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise MalformedReview(f"expected apiVersion {API_VERSION} and kind {KIND}")
    request = body.get("request")
    if not isinstance(request, dict) or not isinstance(request.get("uid"), str) or not request["uid"]:
        raise MalformedReview("request.uid is missing")
    return request
