"""Answers one AdmissionReview: exemptions, the skip annotation, the checks, the response."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lessor.admission.body import MAX_DEPTH, too_deep
from lessor.admission.checker import AdmissionRequest, Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.exempt import needs_checks
from lessor.admission.registry import Registry
from lessor.admission.results import Cause, CheckResult, Report
from lessor.admission.response import API_VERSION, KIND, admission_review, build_response
from lessor.admission.runner import run_checks
from lessor.admission.shape import wrong_type
from lessor.admission.skip import requested_skips, select

_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(ValueError):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview request; the message names the field."""


NESTING = "nesting"
"""The name denials for objects nested too deep go by, as a check's would."""
SHAPE = "shape"
"""The name denials for fields whose type is not the CRD's go by."""


async def review(body: Any, registry: Registry, lookup: Lookup, deadline: Deadline) -> dict[str, Any]:
    """The AdmissionReview to answer ``body`` with; raises MalformedReview."""
    request = _request(body)
    if not needs_checks(request):
        return admission_review(build_response(request, ()))
    if (pointer := too_deep(request["object"])) is not None:
        return too_deep_answer(request, pointer)
    kind = request["kind"]
    if (wrong := wrong_type(kind["group"], kind["version"], kind["kind"], request["object"])) is not None:
        field, message = wrong
        return admission_review(build_response(request, [Report(SHAPE, CheckResult.deny(Cause(message, field)))]))
    checkers = registry.checkers(kind["group"], kind["kind"])
    selection = select(checkers, requested_skips(request.get("object")))
    reports = await run_checks(selection.selected, request, lookup, deadline.seconds)
    return admission_review(build_response(request, reports, selection.warnings))


def too_deep_answer(request: AdmissionRequest, pointer: str | None) -> dict[str, Any]:
    """A denial for an object nested deeper than checks can safely walk, naming where (when known)."""
    from lessor.admission.checks.fields import field_path  # the checks package imports this one

    message = f"nests deeper than {MAX_DEPTH} levels of arrays and objects"
    field = ""
    if pointer is not None:
        full = field_path("", pointer)
        field = field_path("", "/" + "/".join(pointer.split("/")[1:6]))  # where it starts, not all 100 levels
        message += f" (at {full[:200]}{'...' if len(full) > 200 else ''})"
    return admission_review(build_response(request, [Report(NESTING, CheckResult.deny(Cause(message, field)))]))


def _request(body: Any) -> AdmissionRequest:
    """``body["request"]``, once every part that the framework and the checks rely on has its type.

    The API server always sends these; a body without them was written by
    someone else, who gets told which field is wrong rather than a 500.
    """
    if not isinstance(body, Mapping):
        raise MalformedReview(f"the body is a JSON {_type(body)}, not an object")
    if body.get("apiVersion") != API_VERSION or body.get("kind") != KIND:
        raise MalformedReview(f"expected apiVersion {API_VERSION} and kind {KIND}")
    request = body.get("request")
    if request is None:
        raise MalformedReview("request is missing")
    _expect(request, Mapping, "request")
    if not isinstance(request.get("uid"), str) or not request["uid"]:
        raise MalformedReview("request.uid is missing" if request.get("uid") is None
                              else "request.uid must be a non-empty string")
    kind = request.get("kind")
    _expect(kind, Mapping, "request.kind")
    for key in ("group", "version", "kind"):
        _expect(kind.get(key, ""), str, f"request.kind.{key}")
    if request.get("operation") not in _OPERATIONS:
        raise MalformedReview(f"request.operation must be one of {', '.join(_OPERATIONS)}, "
                              f"not {request.get('operation')!r}")
    for key in ("name", "namespace"):
        _expect(request.get(key, ""), str, f"request.{key}")
    for key, needed in (("object", ("CREATE", "UPDATE")), ("oldObject", ("UPDATE",))):
        obj = request.get(key)
        if obj is None and request["operation"] not in needed:
            continue
        _expect(obj, Mapping, f"request.{key}")
        _object(obj, f"request.{key}")
    return {"name": "", "namespace": "", **request}  # cluster-scoped kinds have none


def _object(obj: Mapping[str, Any], field: str) -> None:
    metadata: Any = obj.get("metadata")
    _expect(metadata, Mapping, f"{field}.metadata")
    for key in ("name", "namespace"):
        _expect(metadata.get(key, ""), str, f"{field}.metadata.{key}")
    for key in ("labels", "annotations"):
        values = metadata.get(key) or {}
        _expect(values, Mapping, f"{field}.metadata.{key}")
        for name, value in values.items():
            _expect(value, str, f"{field}.metadata.{key}[{name}]")
    if obj.get("spec") is not None:
        _expect(obj["spec"], Mapping, f"{field}.spec")


def _expect(value: Any, expected: type, field: str) -> None:
    if not isinstance(value, expected):
        name = "an object" if expected is Mapping else f"a {_type(expected())}"
        raise MalformedReview(f"{field} must be {name}, not {_type(value) if value is not None else 'missing'}")


def _type(value: Any) -> str:
    """The JSON name of a decoded value's type."""
    names = {dict: "object", list: "array", str: "string", bool: "boolean", int: "number", float: "number"}
    return "null" if value is None else names.get(type(value), type(value).__name__)
