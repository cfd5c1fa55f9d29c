"""The webhook's Prometheus metrics: reviews by kind and result, their latency, denials by check."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

# Admission answers take milliseconds; the API server gives up at the configuration's timeout (<= 30 s).
_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)


class WebhookMetrics:
    def __init__(self, registry: CollectorRegistry) -> None:
        self._requests = Counter(
            "lessor_webhook_requests", "AdmissionReviews answered, by kind and result (allowed, denied, "
            "error: a check could not finish, malformed: not an AdmissionReview)", ["kind", "result"],
            registry=registry)
        self._seconds = Histogram(
            "lessor_webhook_request_duration_seconds", "Time to answer an AdmissionReview, by kind",
            ["kind"], buckets=_BUCKETS, registry=registry)
        self._denials = Counter(
            "lessor_webhook_denials", "Checks that refused an object (one per check, however many causes), "
            "by kind and check", ["kind", "check"], registry=registry)

    def observe(self, body: Any, answer: dict[str, Any] | None, seconds: float) -> None:
        """`answer` None: the body was not an AdmissionReview."""
        # Any JSON at all may come here (it runs for malformed bodies too): read it without trusting its shape.
        request = body.get("request") if isinstance(body, dict) else None
        stanza = request.get("kind") if isinstance(request, dict) else None
        kind = str(stanza.get("kind") or "") if isinstance(stanza, dict) else ""
        response = (answer or {}).get("response") or {}
        status = response.get("status") or {}
        if answer is None:
            result = "malformed"
        elif response.get("allowed"):
            result = "allowed"
        else:
            result = "error" if status.get("code") == 500 else "denied"
        self._requests.labels(kind, result).inc()
        self._seconds.labels(kind).observe(seconds)
        for check in sorted({c.get("reason", "") for c in (status.get("details") or {}).get("causes") or ()}):
            self._denials.labels(kind, check).inc()
