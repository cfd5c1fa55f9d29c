"""`--metrics-secure`: who may read /metrics, asked of the API server as kubebuilder v4 scaffolds it.

A scraper sends `Authorization: Bearer <token>`. A TokenReview says whose token it is, and a
SubjectAccessReview whether that user may `get` the non-resource URL `/metrics` (the ClusterRole
`lessor-metrics-reader` of deploy/rbac.yaml grants it). No token, or one the
API server does not accept: 401. A user without the right: 403. Answers are kept for a few seconds
so that a scrape every 15 s costs the API server at most two requests; a failed review is not kept.
"""

from __future__ import annotations

import hashlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from lessor.gateway import ApiError, Gateway
from lessor.model.fields import mapping_at

log = logging.getLogger(__name__)

TOKEN_REVIEWS = "/apis/authentication.k8s.io/v1/tokenreviews"
ACCESS_REVIEWS = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


@dataclass(frozen=True, slots=True)
class Verdict:
    status: int  # 200, 401 or 403
    reason: str


class MetricsAuthorizer:
    """`await authorize(header)` for each request to `path`."""

    def __init__(self, gateway: Gateway, path: str = "/metrics", *, ttl: float = 10.0, max_cached: int = 1024,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.gateway = gateway
        self.path = path
        self.ttl = ttl
        self.max_cached = max_cached
        self._clock = clock
        self._cache: dict[str, tuple[float, Verdict]] = {}

    async def __call__(self, authorization: str | None) -> Verdict:
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            return Verdict(401, "send a service account token: Authorization: Bearer <token>")
        key = hashlib.sha256(token.strip().encode()).hexdigest()
        now = self._clock()
        cached = self._cache.get(key)
        if cached is not None and cached[0] > now:
            return cached[1]
        verdict = await self._review(token.strip())
        if len(self._cache) >= self.max_cached:
            self._cache.clear()
        self._cache[key] = (now + self.ttl, verdict)
        return verdict

    async def _review(self, token: str) -> Verdict:
        review = await self.gateway.request("create", "TokenReview", "POST", TOKEN_REVIEWS, body={
            "apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}})
        status = mapping_at(review, "status")
        if not status.get("authenticated"):
            return Verdict(401, f"the API server did not accept the token: {status.get('error') or 'unauthenticated'}")
        user = mapping_at(status, "user")
        access = await self.gateway.request("create", "SubjectAccessReview", "POST", ACCESS_REVIEWS, body={
            "apiVersion": "authorization.k8s.io/v1", "kind": "SubjectAccessReview",
            "spec": {"user": user.get("username", ""), "uid": user.get("uid", ""), "groups": user.get("groups", []),
                     "extra": user.get("extra", {}),
                     "nonResourceAttributes": {"path": self.path, "verb": "get"}}})
        name = user.get("username", "")
        if mapping_at(access, "status").get("allowed"):
            return Verdict(200, f"{name} may get {self.path}")
        return Verdict(403, f'{name} may not get {self.path} (bind the ClusterRole lessor-metrics-reader)')


async def authorize_or_error(authorizer: MetricsAuthorizer, authorization: str | None) -> Verdict:
    """As `authorizer`, but an API server that cannot answer is a 503 rather than an exception."""
    try:
        return await authorizer(authorization)
    except (ApiError, aiohttp.ClientError, OSError, TimeoutError) as err:
        log.warning("metrics authorization could not be checked: %s", err)
        return Verdict(503, "the API server could not review the token; try again")
