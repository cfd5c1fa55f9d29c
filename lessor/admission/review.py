"""Answers one AdmissionReview: exemptions, the skip annotation, the checks, the response."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import anyio

from lessor.admission.body import MAX_DEPTH, too_deep
from lessor.admission.checker import AdmissionRequest, Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.exempt import needs_checks
from lessor.admission.registry import Registry
from lessor.model.views import Meta
from lessor.admission.results import Cause, CheckResult, Report
from lessor.admission.response import API_VERSION, KIND, admission_review, build_response
from lessor.admission.runner import run_checks, unfinished
from lessor.admission.shape import warm, wrong_type
from lessor.admission.skip import requested_skips, select
from lessor.templates import offload

_OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")


class MalformedReview(ValueError):
    """The body is not an ``admission.k8s.io/v1`` AdmissionReview request; the message names the field."""


NESTING = "nesting"
"""The name denials for objects nested too deep go by, as a check's would."""
SHAPE = "shape"
"""The name denials for fields whose type is not the CRD's go by."""


async def review(body: Any, registry: Registry, lookup: Lookup, deadline: Deadline,
                 began: float | None = None, *, large: bool = False) -> dict[str, Any]:
    """The AdmissionReview to answer ``body`` with; raises MalformedReview.

    The deadline counts from ``began`` (when the request arrived; default: now). For a ``large`` body the
    walks over the whole object (nesting, types) run in a render thread, in the line of the object's
    namespace, so a big object costs its namespace's turn and not the event loop's (a small one is walked
    at once: it would wait longer for a thread than the walk takes). What does not finish in time is
    answered as each check's failure policy says.
    """
    warm()  # the CRDs' types, read once per process (`make_app` reads them before serving)
    start = time.monotonic() if began is None else began
    request = _request(body)
    if not needs_checks(request):
        return admission_review(build_response(request, ()))
    kind = request["kind"]
    checkers = registry.checkers(kind["group"], kind["kind"])
    tenant = Meta.of(request["object"]).namespace or str(request.get("namespace") or "")
    shape: tuple[str, Any] | None = ("late", None)
    if not large:
        shape = _shape(request)
    else:
        with anyio.move_on_after(deadline.seconds - (time.monotonic() - start)):
            shape = await offload(_shape, request, key=tenant)
    if shape is not None and shape[0] == "late":
        why = f"reading the object's nesting and types did not finish within the review's {deadline.seconds:g} s"
        reports = [Report(name, unfinished(checker, name, why)) for checker in checkers for name in checker.check_names]
        return admission_review(build_response(request, reports))
    if shape is not None and shape[0] == NESTING:
        return too_deep_answer(request, shape[1])
    if shape is not None:
        field, message = shape[1]
        return admission_review(build_response(request, [Report(SHAPE, CheckResult.deny(Cause(message, field)))]))
    selection = select(checkers, requested_skips(request.get("object")))
    remaining = max(0.0, deadline.seconds - (time.monotonic() - start))
    reports = await run_checks(selection.selected, request, lookup, remaining, deadline.seconds)
    return admission_review(build_response(request, reports, selection.warnings))


def _shape(request: AdmissionRequest) -> tuple[str, Any] | None:
    """(NESTING, pointer) or (SHAPE, (field, message)) for an object checks cannot walk, else None."""
    if (pointer := too_deep(request["object"])) is not None:
        return NESTING, pointer
    kind = request["kind"]
    if (wrong := wrong_type(kind["group"], kind["version"], kind["kind"], request["object"])) is not None:
        return SHAPE, wrong
    return None


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
