"""The aiohttp application that serves the validating webhook (TLS is added by whoever serves it)."""

from __future__ import annotations

import json

from aiohttp import web

from lessor.admission.checker import Lookup
from lessor.admission.deadline import Deadline
from lessor.admission.registry import Registry
from lessor.admission.review import MalformedReview, review

VALIDATE_PATH = "/validate"

# An AdmissionReview carries both the new and the old object, each of which
# may approach the API server's 3 MiB request limit; aiohttp's default
# 1 MiB would turn big objects into errors.
_MAX_BODY = 8 * 1024 * 1024


def make_app(registry: Registry, lookup: Lookup, *, deadline: Deadline = Deadline()) -> web.Application:
    """POST ``/validate`` answers an AdmissionReview; a body that is not one gets 400."""

    async def validate(request: web.Request) -> web.Response:
        try:
            body = await request.json()
            answer = await review(body, registry, lookup, deadline)
        except (json.JSONDecodeError, UnicodeDecodeError, MalformedReview) as exc:
            raise web.HTTPBadRequest(text=f"not an AdmissionReview: {exc}") from exc
        return web.json_response(answer)

    app = web.Application(client_max_size=_MAX_BODY)
    app.router.add_post(VALIDATE_PATH, validate)
    return app
