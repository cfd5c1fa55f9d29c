"""The operator run as deploy/ describes its pod, as the ServiceAccount, with in-cluster config.

The run itself (tests/deploy/pod_run.py, fixture `operator_pod` in conftest.py) reads
everything from deploy/: command and args, env, ports, probe paths, user,
volumes, read-only root. The container runs in Linux namespaces on this
machine (no container runtime here); see tests/deploy/pod.py for what
that proves and what it cannot.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import Any

import pytest

from lessor.shipped import manifests
from lessor.leadership.election import FENCE_POLICY, HOLDER_POD, HOLDER_USERNAME

pytestmark = pytest.mark.apiserver


def test_the_container_started_as_the_manifest_says(operator_pod: Any) -> None:
    run = operator_pod
    assert not run.failures, run.failures
    # Ready and alive by the probes' own paths and ports, on the pod's address.
    for probe in ("readinessProbe", "livenessProbe"):
        assert run.probes[run.container[probe]["httpGet"]["path"]] == 200, run.probes
    # Every port the manifest declares is served on the pod's address.
    assert run.listening and all(run.listening.values()), run.listening
    # The env the kubelet resolves from fieldRefs names the pod object that the API server admitted
    # in a namespace that enforces the restricted Pod Security level, which does refuse the same
    # pod without its securityContexts.
    assert "violates PodSecurity" in run.loose_pod_refusal, run.loose_pod_refusal
    assert run.env["POD_NAME"] == run.pod["metadata"]["name"]
    assert run.env["POD_NAMESPACE"] == run.pod["metadata"]["namespace"]
    assert "--kubeconfig" not in run.container["command"] + run.container.get("args", [])


def test_it_ran_as_the_security_context_says(operator_pod: Any) -> None:
    """Non-root user and group, no capabilities, no privilege escalation, and a read-only root
    filesystem, under which it still worked (the other tests)."""
    run = operator_pod
    context = {**run.pod["spec"].get("securityContext", {}), **run.container["securityContext"]}
    assert run.process["uid"] == str(context["runAsUser"]) and run.process["gid"] == str(context["runAsGroup"])
    assert int(run.process["CapEff"], 16) == 0 and run.process["NoNewPrivs"] == "1"
    assert context["readOnlyRootFilesystem"] and "ro" in run.process["root"].split(","), run.process


def test_it_authenticated_with_the_pod_bound_token_from_the_pod_network(operator_pod: Any) -> None:
    """The operator's requests (the audit policy records its ServiceAccount's) carried the token
    that TokenRequest bound to the pod, read from the in-cluster path, and came from the pod's IP."""
    run = operator_pod
    events = run.audit()
    assert events, "the audit log recorded nothing for the operator's ServiceAccount"
    bound = {e["user"].get("extra", {}).get("authentication.kubernetes.io/pod-name", [""])[0] for e in events}
    assert bound == {run.pod["metadata"]["name"]}, bound
    assert {ip for e in events for ip in e.get("sourceIPs", [])} == {run.pod_ip}
    assert "KUBECONFIG" not in run.env


def test_leases_and_claims_reach_ready_take_an_allowed_change_and_end(operator_pod: Any) -> None:
    run = operator_pod
    assert not run.refused_samples, run.refused_samples
    not_ready = {k: v for k, v in run.conditions.items() if v != ("True", "Ready")}
    assert run.conditions and not not_ready, f"not Ready: {not_ready}\n{run.log[-3000:]}"
    assert run.resized == "medium", f"a change the provider allows did not reach the ConfigMap: {run.resized}"
    assert run.released == ("False", "Released"), run.released
    assert run.handle_deleted and run.claim_deleted, "the claim whose lifespan ended, or its handle, is still there"


def test_the_webhook_registered_by_webhook_yaml_answers_through_the_service(operator_pod: Any) -> None:
    """A lease with an empty selector is refused at the door, with the field named, by the webhook
    of webhook.yaml, which the API server reached through the Service."""
    text = resources.files("lessor.deploy").joinpath("webhook.yaml").read_text()
    [configuration] = [d for d in manifests.load_documents([text]) if d["kind"] == "ValidatingWebhookConfiguration"]
    name = configuration["webhooks"][0]["name"]
    assert f'admission webhook "{name}" denied the request' in operator_pod.denial, operator_pod.denial
    assert "spec.selector" in operator_pod.denial


def test_the_api_server_admits_writes_only_from_the_lease_holder(operator_pod: Any) -> None:
    """leader-fence.yaml as it ships: the Lease names the operator's user and pod as the API server
    authenticated them (its SelfSubjectReview), and another ServiceAccount the fence judges, allowed by
    RBAC, is refused by the API server with the holder named."""
    run = operator_pod
    pod, lease = run.pod["metadata"]["name"], run.leader_lease
    holder = lease["spec"]["holderIdentity"]
    assert holder.startswith(f"{pod}_"), holder
    assert lease["metadata"]["annotations"][HOLDER_USERNAME] == "system:serviceaccount:lessor-system:lessor"
    assert lease["metadata"]["annotations"][HOLDER_POD] == pod
    assert f"ValidatingAdmissionPolicy '{FENCE_POLICY}'" in run.impostor_refusal, run.impostor_refusal
    assert f"is held by {holder} (system:serviceaccount:lessor-system:lessor, pod {pod})" in run.impostor_refusal


def test_no_request_was_forbidden(operator_pod: Any) -> None:
    run = operator_pod
    forbidden = [f"{e['verb']} {e['requestURI']}" for e in run.audit() if e.get("responseStatus", {}).get("code") == 403]
    assert not forbidden, forbidden
    assert not [line for line in run.log.splitlines() if re.search(r"403 Forbidden| is forbidden: User", line)]
    assert run.metrics, f"no /metrics scraped: {run.metrics_status}"
    assert not re.search(r'^lessor_\w+\{[^}]*code="403"[^}]*\} [1-9]', run.metrics, re.M)


def test_sigterm_stops_it_within_the_grace_period(operator_pod: Any) -> None:
    """The kubelet sends SIGTERM and SIGKILLs after the grace period: it must not come to that.
    `lessor run` exits 143 on SIGTERM, as a process ended by it does."""
    assert operator_pod.exit_code == 143, f"exit code {operator_pod.exit_code}\n{operator_pod.log[-2000:]}"


def test_metrics_are_https_for_a_scraper_allowed_to_read_them(operator_pod: Any) -> None:
    """As kubebuilder v4 scaffolds it: a token the API server vouches for, with `get` on /metrics
    (deploy/rbac.yaml's lessor-metrics-reader bound to the scraper's ServiceAccount), over HTTPS."""
    assert operator_pod.metrics_status == {"allowed": 200, "unbound": 403, "anonymous": 401, "plain-http": 0}, \
        operator_pod.metrics_status
    assert "lessor_leader" in operator_pod.metrics and "process_resident_memory_bytes" in operator_pod.metrics


def test_jumpstarters_grpc_endpoint_answers_on_the_pods_port_with_the_tokens_it_minted(operator_pod: Any) -> None:
    """deployment.yaml serves Jumpstarter's protocol (--grpc-port, the certificate of its mounted Secret, which
    names the host of --grpc-endpoint): with the tokens the operator minted into the samples' credential
    Secrets (as its ServiceAccount, rbac.yaml's Secret grants), an exporter's agent reports its status, and a
    client lists the exporters and makes a lease over gRPC, which the actors decide, and deletes it."""
    run = operator_pod
    grpc = run.grpc
    assert "failure" not in grpc, f"{grpc}\n{run.log[-3000:]}"
    exporters = sorted(d["metadata"]["name"] for d in manifests.samples() if d["kind"] == "Exporter")
    assert grpc["exporters"] == exporters, grpc
    assert grpc["statusMessage"] == "pod run", grpc
    assert grpc["decided"] and grpc["released"] == ("False", "Released"), grpc
    advertise = [a for a in run.argv if a.endswith(":8082") and not a.startswith("lessor-grpc")]
    assert advertise == [f"{run.pod_ip}:8082"], run.argv  # $(POD_IP) expanded as the kubelet does
