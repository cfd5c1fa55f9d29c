"""Serving and registering the webhook: `lessor run` in development, certificate rotation, a webhook that is down."""

from __future__ import annotations

import asyncio
import base64
import collections
import logging
import os
import re
import ssl
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from prometheus_client import CollectorRegistry

from lessor.admission import Registry
from lessor.admission.lookup import GatewayLookup
from lessor.admission.registration import NAME, development_configuration, registered, until_enforced
from lessor.admission.server import CertificateFiles, WebhookSettings, development_certificate, webhook
from lessor.tls.certs import CertificateAuthority
from lessor.tools.controlplane.processes import free_port
from lessor.gateway import LESSOR_RESOURCES, ApiError, Gateway
from lessor.gateway.resources import API_VERSION, CLAIM, LEASE, NAMESPACE, PROVIDER, VALIDATING_WEBHOOK
from lessor.app.operator import Operator, OperatorConfig
from tests.slowness import scaled
from tests.tasks import cancelled


def selectorless_lease(name: str = "lease") -> dict[str, Any]:
    """Denied by lease-selector: proof that the webhook was called."""
    return {"apiVersion": API_VERSION, "kind": "Lease", "metadata": {"name": name},
            "spec": {"clientRef": {"name": "alice"}, "duration": "1h"}}


@pytest.fixture
async def scoped(kube: Gateway) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """A fresh namespace, and a namespaceSelector that only it matches: registrations made with it
    never reach other tests' objects on the shared control plane."""
    scope = uuid.uuid4().hex[:10]
    name = f"t-{scope}"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace",
                                        "metadata": {"name": name, "labels": {"test.lessor.dev/scope": scope}}})
    yield name, {"matchLabels": {"test.lessor.dev/scope": scope}}
    await kube.delete(NAMESPACE, None, name)


async def configuration(kube: Gateway, name: str) -> dict[str, Any] | None:
    try:
        return await kube.get(VALIDATING_WEBHOOK, None, name)
    except ApiError as err:
        if err.not_found:
            return None
        raise


async def test_lessor_run_registers_its_development_webhook_and_removes_it_when_stopped(
    kube: Gateway, kubeconfig: Path, scoped: tuple[str, dict[str, Any]]
) -> None:
    namespace, selector = scoped
    config = OperatorConfig(kubeconfig=str(kubeconfig), bind_address="127.0.0.1", health_port=free_port(),
                            metrics_port=free_port(), webhook=WebhookSettings(port=0, namespace_selector=selector))
    operator = asyncio.create_task(Operator(config, kube, CollectorRegistry()).run())
    try:
        async with asyncio.timeout(scaled(20)):
            while (registered_now := await configuration(kube, NAME)) is None:
                await asyncio.sleep(0.05)
        await until_enforced(kube, LEASE, namespace, selectorless_lease(), timeout=scaled(20))
    finally:
        await cancelled(operator)

    (hook,) = registered_now["webhooks"]
    assert re.fullmatch(r"https://127\.0\.0\.1:\d+/validate", hook["clientConfig"]["url"])
    ca = x509.load_pem_x509_certificate(base64.b64decode(hook["clientConfig"]["caBundle"]))
    assert ca.extensions.get_extension_for_class(x509.BasicConstraints).value.ca
    assert (hook["failurePolicy"], hook["sideEffects"], hook["admissionReviewVersions"], hook["timeoutSeconds"]) == (
        "Fail", "None", ["v1"], 10)
    (rule,) = hook["rules"]
    assert (rule["apiGroups"], rule["apiVersions"], rule["operations"]) == (["lessor.dev"], ["v1alpha1"],
                                                                            ["CREATE", "UPDATE"])
    assert sorted(rule["resources"]) == sorted(r.plural for r in LESSOR_RESOURCES)  # no "leases/status"
    assert await configuration(kube, NAME) is None


async def test_while_the_webhook_is_down_specs_are_refused_but_status_writes_and_deletes_go_through(
    kube: Gateway, scoped: tuple[str, dict[str, Any]]
) -> None:
    """What stopping `lessor run` without unregistering means, given failurePolicy Fail."""
    lab, selector = scoped
    await kube.create(LEASE, lab, selectorless_lease())
    ca_bundle, _ = development_certificate()
    nobody_listens = development_configuration(f"https://127.0.0.1:{free_port()}/validate", ca_bundle, 5,
                                               name=f"lessor-preflight-{lab}", namespace_selector=selector)
    async with registered(kube, nobody_listens):
        await until_enforced(kube, LEASE, lab, selectorless_lease("probe"), timeout=scaled(20))

        with pytest.raises(ApiError) as refused:
            await kube.merge_patch(LEASE, lab, "lease", {"spec": {"duration": "2h"}})
        status = await kube.patch_status(LEASE, lab, "lease", {"ended": True})
        await kube.delete(LEASE, lab, "lease")

    assert "failed calling webhook" in refused.value.message
    assert status["status"]["ended"] is True


def replace(folder: Path, cert_pem: bytes, key_pem: bytes) -> None:
    """Swap both files in place of the old ones, as the kubelet updates a mounted Secret."""
    for name, data in (("tls.crt", cert_pem), ("tls.key", key_pem)):
        staged = folder / f".{name}.new"
        staged.write_bytes(data)
        os.replace(staged, folder / name)


async def served_name(port: int, ca: CertificateAuthority) -> str:
    trust = ssl.create_default_context(cadata=ca.cert_pem.decode())
    _, writer = await asyncio.open_connection("127.0.0.1", port, ssl=trust)
    try:
        der = writer.get_extra_info("ssl_object").getpeercert(binary_form=True)
    finally:
        writer.close()
    cert = x509.load_der_x509_certificate(der)
    return str(cert.subject.get_attributes_for_oid(NameOID.COMMON_NAME)[0].value)


@pytest.fixture
async def production(kube: Gateway, tmp_path: Path) -> AsyncIterator[tuple[int, CertificateAuthority]]:
    """`lessor run --webhook-cert-dir`, serving what is in tmp_path."""
    ca = CertificateAuthority()
    first = ca.issue("first", hosts=("127.0.0.1",), server=True)
    replace(tmp_path, first.cert_pem, first.key_pem)
    settings = WebhookSettings(port=0, cert_dir=tmp_path)
    async with webhook(kube, Registry(), GatewayLookup(kube), settings, "127.0.0.1") as port:
        yield port, ca


async def test_with_a_cert_dir_the_webhook_serves_rotated_certificates_and_registers_nothing(
    kube: Gateway, tmp_path: Path, production: tuple[int, CertificateAuthority], caplog: pytest.LogCaptureFixture
) -> None:
    port, ca = production
    second = ca.issue("second", hosts=("127.0.0.1",), server=True)
    third = ca.issue("third", hosts=("127.0.0.1",), server=True)

    before = await served_name(port, ca)
    replace(tmp_path, second.cert_pem, second.key_pem)
    rotated = await served_name(port, ca)
    with caplog.at_level(logging.WARNING, logger="lessor.admission.server"):
        replace(tmp_path, third.cert_pem, second.key_pem)  # half-way through a rotation: mismatched
        half_way = await served_name(port, ca)
    replace(tmp_path, third.cert_pem, third.key_pem)
    completed = await served_name(port, ca)

    assert (before, rotated, half_way, completed) == ("first", "second", "second", "third")
    assert "still serving the previous one" in caplog.text
    assert await configuration(kube, NAME) is None


def test_a_cert_dir_without_a_key_pair_fails_at_start_up(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        CertificateFiles(tmp_path)



async def test_the_operators_webhook_judges_from_its_informer_cache_without_a_request_per_provider(
    kube: Gateway, kubeconfig: Path, scoped: tuple[str, dict[str, Any]]
) -> None:
    """A claim naming 200 providers once cost 200 GETs; the operator's webhook reads its informers instead,
    and asks the API only to confirm the one it does not find."""
    lab, selector = scoped
    providers = f"{lab}-providers"
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": providers}})
    names = [f"env-{i:03d}" for i in range(200)]
    registry = CollectorRegistry()
    config = OperatorConfig(operator_namespace=providers, bind_address="127.0.0.1", health_port=free_port(),
                            metrics_port=free_port(),
                            webhook=WebhookSettings(port=0, registration=f"lessor-preflight-{lab}",
                                                    namespace_selector=selector))
    async with await Gateway.connect(str(kubeconfig), registry=registry) as gateway:
        operator = Operator(config, gateway, registry)
        running = asyncio.create_task(operator.run())
        try:
            create = asyncio.Semaphore(16)

            async def provider(name: str) -> None:
                async with create:
                    await kube.create(PROVIDER, providers, {
                        "apiVersion": API_VERSION, "kind": "ResourceProvider", "metadata": {"name": name},
                        "spec": {"match": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"env": name}}}})

            await asyncio.gather(*(provider(name) for name in names))
            (cache,) = [i for i in operator.informers if i.resource.kind == PROVIDER.kind]
            async with asyncio.timeout(scaled(30)):
                while sum(key[0] == providers for key in cache.store) < len(names) or not operator.ready()[0]:
                    await asyncio.sleep(0.05)
            await until_enforced(kube, LEASE, lab, selectorless_lease(), timeout=scaled(20))
            before = collections.Counter(gateway.requests)

            entries = [{"name": f"r{i}", "provider": {"name": name},
                        "template": {"apiVersion": "v1", "kind": "ConfigMap", "data": {"env": name}}}
                       for i, name in enumerate([*names, "env-missing"])]
            with pytest.raises(ApiError) as denied:
                await kube.request("create", CLAIM.kind, "POST", CLAIM.path(lab), params={"dryRun": "All"}, body={
                    "apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": {"name": "wide"},
                    "spec": {"resources": entries}})
            made = collections.Counter(gateway.requests) - before
        finally:
            await cancelled(running)
            await kube.delete(NAMESPACE, None, providers)

    assert [(c["reason"], c.get("field")) for c in denied.value.causes] == [
        ("claim-providers", "spec.resources[200].provider.name")]  # the 200 that exist were found
    assert f"there is no ResourceProvider env-missing in namespace {providers}" in denied.value.message
    # The 200 found cost no request; the one missing is confirmed by one GET before it is denied (the
    # watch may trail a create just made, and a denial must be certain).
    assert (made[("get", PROVIDER.kind)], made[("list", PROVIDER.kind)]) == (1, 0), made
