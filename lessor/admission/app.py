"""The aiohttp application that serves the validating webhook (TLS is added by whoever serves it)."""

from __future__ import annotations

import contextlib
import time

from aiohttp import web

from lessor.admission.body import MAX_BODY, MalformedBody, parse_json
from lessor.admission.checker import Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.metrics import WebhookMetrics
from lessor.admission.registry import Registry
from lessor.admission.review import MalformedReview, review, too_deep_answer
from lessor.admission.shape import warm
from lessor.templates.budget import FairQueue, rendering

VALIDATE_PATH = "/validate"
LARGE_BODY = 64 * 1024
"""Bytes: a body larger than this is walked (nesting, types) in a render thread, not on the event loop."""


def make_app(registry: Registry, lookup: Lookup, *, deadline: Deadline = Deadline(),  # noqa: B008 (frozen)
             metrics: WebhookMetrics | None = None, queue: FairQueue | None = None) -> web.Application:
    """POST ``/validate`` answers an AdmissionReview.

    ``queue``: the render threads its template work runs in (its operator's; None: the process's).

    A body that is not one gets 400 saying what is wrong with it, one over
    the size limit 413; neither reaches a check.
    """

    async def validate(request: web.Request) -> web.Response:
        began, body, answer = time.monotonic(), None, None
        try:
            if request.content_length is not None and request.content_length > MAX_BODY:
                raise _too_large(request.content_length)
            try:
                raw = await request.read()
            except web.HTTPRequestEntityTooLarge:
                raise _too_large(None) from None
            try:
                body = parse_json(raw)
                with rendering(queue) if queue is not None else contextlib.nullcontext():
                    answer = await review(body, registry, lookup, deadline, began, large=len(raw) > LARGE_BODY)
            except MalformedBody as exc:
                if not exc.uid:
                    raise web.HTTPBadRequest(text=f"not an AdmissionReview: {exc}") from None
                answer = too_deep_answer({"uid": exc.uid}, None)  # an AdmissionReview all the same: deny it
            except MalformedReview as exc:
                raise web.HTTPBadRequest(text=f"not an AdmissionReview: {exc}") from None
        finally:
            if metrics is not None:
                metrics.observe(body, answer, time.monotonic() - began)
        return web.json_response(answer)

    warm()
    app = web.Application(client_max_size=MAX_BODY)
    app.router.add_post(VALIDATE_PATH, validate)
    return app


def _too_large(size: int | None) -> web.HTTPRequestEntityTooLarge:
    return web.HTTPRequestEntityTooLarge(
        max_size=MAX_BODY, actual_size=size or MAX_BODY + 1,
        text=f"not an AdmissionReview: the body is larger than the limit of {MAX_BODY} bytes",
    )
