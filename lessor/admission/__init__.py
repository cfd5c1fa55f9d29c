"""Preflight checks for lessor's validating admission webhook.

Checkers, registered per kind, set up once per request and return checks;
all of them run concurrently under a deadline shorter than the webhook's
timeout, and their results come back in declared order as one
AdmissionReview answer. See docs/admission.md.
"""

from lessor.admission.app import VALIDATE_PATH, make_app
from lessor.admission.checker import AdmissionRequest, Check, Checker, FailurePolicy, Lookup, Unavailable
from lessor.admission.deadline import Deadline
from lessor.admission.registry import Registry
from lessor.admission.results import Cause, CheckResult, Report
from lessor.admission.review import MalformedReview, review
from lessor.admission.skip import SKIP_ANNOTATION

__all__ = [
    "SKIP_ANNOTATION",
    "VALIDATE_PATH",
    "AdmissionRequest",
    "Cause",
    "Check",
    "CheckResult",
    "Checker",
    "Deadline",
    "FailurePolicy",
    "Lookup",
    "MalformedReview",
    "Registry",
    "Report",
    "Unavailable",
    "review",
    "make_app",
]
