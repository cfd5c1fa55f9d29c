"""Registering the webhook with the API server in development.

The configuration is deploy/webhook.yaml's, so what development and
production check is the same by construction: same rules (CREATE and UPDATE
of the nine kinds' main resources, never their ``/status``), same
``failurePolicy: Fail``. Only the client configuration differs: a URL on
loopback with the development CA instead of the in-cluster Service.

With ``failurePolicy: Fail`` a registration that outlives its process would
refuse every create and update of lessor objects ("failed calling webhook
... connection refused"). So the registration is removed when the process
that made it stops cleanly, unless someone replaced it meanwhile; a process
that is killed leaves it behind until the next start replaces it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import logging
import time
from collections.abc import AsyncIterator, Mapping
from functools import cache
from importlib import resources
from typing import Any

from lessor.shipped import manifests
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import VALIDATING_WEBHOOK
from lessor.model.views import Meta

log = logging.getLogger(__name__)

NAME = "lessor-preflight"


@cache
def _deployed() -> dict[str, Any]:
    text = resources.files("lessor.deploy").joinpath("webhook.yaml").read_text()
    return next(d for d in manifests.load_documents([text]) if d["kind"] == VALIDATING_WEBHOOK.kind)


def development_configuration(
    url: str,
    ca_bundle: bytes,
    timeout: int,
    *,
    name: str = NAME,
    namespace_selector: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """deploy/webhook.yaml's configuration, calling ``url`` and trusting ``ca_bundle`` (PEM).

    ``namespace_selector`` limits it to some namespaces, which lets tests and
    benchmarks share an API server with other users.
    """
    configuration = copy.deepcopy(_deployed())
    configuration["metadata"] = {**configuration["metadata"], "name": name}
    for hook in configuration["webhooks"]:
        hook["clientConfig"] = {"url": url, "caBundle": base64.b64encode(ca_bundle).decode()}
        hook["timeoutSeconds"] = timeout
        if namespace_selector is not None:
            hook["namespaceSelector"] = dict(namespace_selector)
    return configuration


@contextlib.asynccontextmanager
async def registered(gateway: Gateway, configuration: dict[str, Any]) -> AsyncIterator[None]:
    """Create or update (server-side apply) the configuration; delete it on exit unless replaced."""
    name = Meta.of(configuration).name
    applied = await gateway.apply(VALIDATING_WEBHOOK, None, name, configuration)
    try:
        yield
    finally:
        try:
            await gateway.delete(VALIDATING_WEBHOOK, None, name,
                                 resource_version=Meta.of(applied).resource_version)
            log.info("ValidatingWebhookConfiguration %s removed", name)
        except ApiError as err:
            if not (err.not_found or err.conflict):
                raise
            log.info("ValidatingWebhookConfiguration %s left in place: it was changed or removed meanwhile", name)


async def until_enforced(
    gateway: Gateway, resource: Resource, namespace: str, body: dict[str, Any], *, timeout: float = 20.0
) -> None:
    """Wait until the API server sends ``body``, which must not be admitted, to a webhook.

    The API server picks up a new configuration asynchronously, so right
    after registering, requests may still pass unchecked. Probes are dry
    runs: nothing is stored.
    """
    deadline = time.monotonic() + timeout
    while True:
        try:
            await gateway.request("create", resource.kind, "POST", resource.path(namespace),
                                  params={"dryRun": "All"}, body=body)
        except ApiError as err:
            if ' webhook "' in err.message:  # 'admission webhook "x" denied', or 'failed calling webhook "x"'
                return
            raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"no webhook was called within {timeout:.0f} s")
        await asyncio.sleep(0.05)
