"""One run of the operator as deploy/ describes it, recorded for tests/deploy/test_pod.py and tests/test_rbac.py.

Everything about the pod is read from deploy/: the container's command, args,
env, ports, probes, user, volumes and read-only root from deployment.yaml; the
ServiceAccount from rbac.yaml; the Service's port wiring from service.yaml;
the registration from webhook.yaml. What stands in for the cluster's parts:

- kubelet: the pod object is created from the Deployment's template (so the
  namespace's restricted Pod Security level judges it), its token comes from
  the TokenRequest API bound to that pod, the Secret's keys are written to the
  volume's folder, and the container runs in a `PodSandbox` (namespaces, not
  an image) with those files at their in-cluster paths;
- kube-proxy and the endpoints controller: the API server runs with
  `--enable-aggregator-routing`, so it sends webhook calls for the Service
  straight to the Service's endpoints, which the test writes (the pod's IP
  and the targetPort's containerPort). webhook.yaml is registered unchanged
  but for the caBundle, which cert-manager would inject.
- the kubernetes Service: KUBERNETES_SERVICE_HOST is the API server's address
  on the pod network.

leader-fence.yaml is applied as it ships (the API server admits the operator's
writes only while it holds the leader Lease), and an impostor (another
ServiceAccount the fence judges, `lessor-impostor`) tries a write while the
operator leads.

The scenario is the samples of deploy/samples/ applied by an administrator,
exporter heartbeats kept fresh as `lessor dev` does, leases and claims
waited for, then a lease released and a claim's lifespan ended, so that the
write paths that end things run too.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import copy
import datetime as dt
import json
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import aiohttp
import grpc
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc

from lessor.shipped import manifests
from lessor.admission.registration import until_enforced
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tls.certs import CertificateAuthority
from tests.deploy.pod import (SERVICE_ACCOUNT_PATH, Mount, PodSandbox, container_of, container_port, expand, flag,
                              resolve_env)
from lessor.tools.dev.commands import _heartbeat as heartbeat
from lessor.gateway import ApiError, Gateway
from lessor.gateway.resources import CLAIM, CONFIGMAP, EXPORTER, HANDLE, LEASE
from lessor.app.install import install
from tests.slowness import scaled
from tests.tasks import cancelled

LAB = "lab"
LEASES = ("alice-rpi4", "bob-stm32")
CLAIMS = ("alice-env", "bob-env")


def deploy(name: str) -> list[dict[str, Any]]:
    """The documents of deploy/NAME as the package ships them."""
    return list(manifests.load_documents([resources.files("lessor.deploy").joinpath(name).read_text()]))


def one(name: str, kind: str) -> dict[str, Any]:
    return next(d for d in deploy(name) if d["kind"] == kind)


@dataclass
class PodRun:
    """What happened, for the tests to judge."""

    controlplane: ControlPlane
    container: dict[str, Any]
    pod: dict[str, Any]
    pod_ip: str
    env: dict[str, str]
    log_path: Path
    loose_pod_refusal: str = ""
    """What the namespace said to the same pod without its securityContexts (empty: admitted)."""
    probes: dict[str, int] = field(default_factory=dict)
    listening: dict[str, bool] = field(default_factory=dict)
    process: dict[str, str] = field(default_factory=dict)
    """What /proc says of the running operator: `uid`, `gid`, `root` (mount options of /), `CapEff`."""
    """containerPort name -> whether it accepted a connection on the pod's IP."""
    """probe path -> HTTP status, as the kubelet would have seen it once the pod was ready."""
    conditions: dict[str, tuple[str, str] | None] = field(default_factory=dict)
    """`Kind/name` -> (status, reason) of its Ready condition when the scenario stopped waiting."""
    refused_samples: list[str] = field(default_factory=list)
    denial: str = ""
    """The webhook's answer to a lease with an empty selector."""
    resized: str | None = None
    """`data.size` of alice-env's ConfigMap after the claim asked small -> medium (the provider allows it)."""
    released: tuple[str, str] | None = None
    handle_deleted: bool = False
    claim_deleted: bool = False
    metrics: str = ""
    """/metrics as a scraper allowed to get it (rbac.yaml's lessor-metrics-reader) read it."""
    metrics_status: dict[str, int] = field(default_factory=dict)
    leader_lease: dict[str, Any] = field(default_factory=dict)
    """The leader Lease (coordination.k8s.io) while the operator led."""
    impostor_refusal: str = ""
    """The API server's answer to an Exporter status patch by `lessor-impostor`, allowed by RBAC."""
    """who scraped /metrics (`allowed`, `unbound`, `anonymous`, `plain-http`) -> HTTP status (0: refused)."""
    argv: list[str] = field(default_factory=list)
    """The command the container ran, $(VAR) expanded."""
    grpc_ca: bytes = b""
    """The CA of the certificate in the gRPC endpoint's Secret."""
    grpc: dict[str, Any] = field(default_factory=dict)
    """What Jumpstarter's protocol answered on the pod's gRPC port (`_jumpstarter`), or `failure`."""
    exit_code: int | None = None
    failures: list[str] = field(default_factory=list)

    @property
    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def audit(self) -> list[dict[str, Any]]:
        """The operator's requests, one event each (its last stage)."""
        assert self.controlplane.audit_log is not None
        events: dict[str, dict[str, Any]] = {}
        for line in self.controlplane.audit_log.read_text().splitlines():
            event = json.loads(line)
            events[event["auditID"]] = event
        return list(events.values())


def ready_condition(obj: Mapping[str, Any] | None) -> tuple[str, str] | None:
    for c in (obj or {}).get("status", {}).get("conditions", []):
        if c["type"] == "Ready":
            return c["status"], c.get("reason", "")
    return None


@contextlib.asynccontextmanager
async def operator_pod(directory: Path, operator_user: str) -> AsyncIterator[PodRun]:
    deployment = one("deployment.yaml", "Deployment")
    container = container_of(deployment)
    pod_name = f"{deployment['metadata']['name']}-{uuid.uuid4().hex[:5]}"
    binaries = ensure_binaries(lambda line: print(f"lessor: {line}", flush=True))
    async with PodSandbox(directory / "sandbox", pod_name) as sandbox, ControlPlane(
        directory / "controlplane", binaries, controller_manager=False, address=sandbox.host_ip,
        audit_users=(operator_user,), apiserver_args=("--enable-aggregator-routing=true",),
    ) as cp, await Gateway.connect(str(cp.kubeconfig)) as admin:
        await install(admin, deployment["metadata"]["namespace"], progress=lambda _: None)
        for name in ("namespace.yaml", "rbac.yaml", "service.yaml", "leader-fence.yaml"):
            await manifests.apply_all(admin, deploy(name))
        pod, refusal = await _create_pod(admin, deployment, pod_name)
        pod.setdefault("status", {})["podIP"] = sandbox.pod_ip  # what the kubelet reports once it runs
        webhook_ca = await _webhook_secret(admin, deployment)
        grpc_ca = await _grpc_secret(admin, deployment)
        volumes = await _volumes(admin, directory, deployment, pod, cp)
        env = {
            **resolve_env(container, pod),
            # What the kubelet adds: the kubernetes Service, the hostname, the image's PATH and HOME.
            "KUBERNETES_SERVICE_HOST": sandbox.host_ip,
            "KUBERNETES_SERVICE_PORT": str(urlsplit(cp.server).port),
            "HOSTNAME": pod_name,
            "PATH": _image_path(),
            "HOME": "/",
        }
        context = {**deployment["spec"]["template"]["spec"].get("securityContext", {}),
                   **container.get("securityContext", {})}
        sandbox.mount(volumes, read_only_root=bool(context.get("readOnlyRootFilesystem")),
                      image=[Path(sys.base_prefix), Path(sys.prefix)])
        await _register_webhook(admin, container, pod, sandbox.pod_ip, webhook_ca)
        # The command with $(VAR) expanded from the env, as the kubelet runs it.
        child = sandbox.container(container["name"], expand(_argv(deployment), env), env=env,
                                  user=int(context["runAsUser"]), group=int(context["runAsGroup"]))
        run = PodRun(cp, container, pod, sandbox.pod_ip, env, child.log_path, loose_pod_refusal=refusal,
                     grpc_ca=grpc_ca, argv=expand(_argv(deployment), env))
        await child.start()
        try:
            await _scenario(run, admin, sandbox.pod_ip, child)
        finally:
            # The kubelet's SIGTERM, and SIGKILL once the grace period is over.
            await child.stop(grace=deployment["spec"]["template"]["spec"].get("terminationGracePeriodSeconds", 30))
            assert child.process is not None
            run.exit_code = child.process.returncode
        yield run


def _image_path() -> str:
    """Where `pip install` put the `lessor` console script (the image's PATH holds it too)."""
    scripts = Path(sys.executable).parent
    assert (scripts / "lessor").exists(), f"no console script `lessor` in {scripts}: is the package installed?"
    return f"{scripts}:/usr/local/bin:/usr/bin:/bin"


async def _create_pod(admin: Gateway, deployment: Mapping[str, Any], name: str) -> tuple[dict[str, Any], str]:
    """The Deployment's pod, as the ReplicaSet controller would create it (no scheduler binds it),
    and the namespace's answer to the same pod without its securityContexts (a dry run)."""
    template = deployment["spec"]["template"]
    namespace = deployment["metadata"]["namespace"]
    pod = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {**template["metadata"], "name": name, "namespace": namespace}, "spec": template["spec"]}
    res = await admin.resolve("v1", "Pod")
    loose = copy.deepcopy(pod)
    loose["spec"].pop("securityContext", None)
    for container in loose["spec"]["containers"]:
        container.pop("securityContext", None)
    try:
        await admin.request("create", "Pod", "POST", res.path(namespace), params={"dryRun": "All"}, body=loose)
        refusal = ""
    except ApiError as err:
        refusal = err.message
    return await admin.create(res, namespace, pod), refusal


async def _volumes(admin: Gateway, directory: Path, deployment: Mapping[str, Any], pod: Mapping[str, Any],
                   cp: ControlPlane) -> list[Mount]:
    """The service-account files and each volume's folder, as the kubelet fills them."""
    spec = deployment["spec"]["template"]["spec"]
    namespace = pod["metadata"]["namespace"]
    account = spec["serviceAccountName"]
    # TokenRequest, bound to the pod like the kubelet's projected token.
    answer = await admin.request(
        "create", "TokenRequest", "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
        body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
              "spec": {"expirationSeconds": 3607, "boundObjectRef": {
                  "apiVersion": "v1", "kind": "Pod", "name": pod["metadata"]["name"],
                  "uid": pod["metadata"]["uid"]}}})
    sa = directory / "serviceaccount"
    sa.mkdir()
    (sa / "token").write_text(answer["status"]["token"])
    (sa / "ca.crt").write_bytes((cp.pki / "ca.crt").read_bytes())
    (sa / "namespace").write_text(namespace)
    for f in sa.iterdir():
        f.chmod(0o644)
    sa.chmod(0o755)
    mounts = [Mount(sa, SERVICE_ACCOUNT_PATH)]
    volumes = {v["name"]: v for v in spec.get("volumes", [])}
    container = container_of(deployment)
    for vm in container.get("volumeMounts", []):
        volume = volumes[vm["name"]]
        folder = directory / "volumes" / vm["name"]
        folder.mkdir(parents=True)
        if "secret" in volume:
            secret = await admin.get(await admin.resolve("v1", "Secret"), namespace, volume["secret"]["secretName"])
            for key, value in secret.get("data", {}).items():
                (folder / key).write_bytes(base64.b64decode(value))
                (folder / key).chmod(0o644)
            folder.chmod(0o755)
        elif "emptyDir" in volume:
            folder.chmod(0o1777)
        else:
            raise AssertionError(f"volume {vm['name']}: only secret and emptyDir volumes are simulated")
        mounts.append(Mount(folder, vm["mountPath"], read_only=bool(vm.get("readOnly"))))
    return mounts


def _webhook_service() -> tuple[dict[str, Any], dict[str, Any], dict[str, Any]]:
    """webhook.yaml's configuration, the Service it calls, and the port of that Service it calls."""
    configuration = one("webhook.yaml", "ValidatingWebhookConfiguration")
    ref = configuration["webhooks"][0]["clientConfig"]["service"]
    service = next(d for d in deploy("service.yaml") if d["metadata"]["name"] == ref["name"])
    port = next(p for p in service["spec"]["ports"] if p["port"] == ref.get("port", 443))
    return configuration, service, port


async def _webhook_secret(admin: Gateway, deployment: Mapping[str, Any]) -> bytes:
    """The Secret deployment.yaml mounts at --webhook-cert-dir, holding what cert-manager's Certificate
    (sketched in webhook.yaml) would issue: a certificate for the Service's DNS names. Returns its CA (PEM)."""
    _, service, _ = _webhook_service()
    name, namespace = service["metadata"]["name"], service["metadata"]["namespace"]
    return await _cert_secret(admin, deployment, "--webhook-cert-dir",
                              (f"{name}.{namespace}.svc", f"{name}.{namespace}.svc.cluster.local"))


async def _grpc_secret(admin: Gateway, deployment: Mapping[str, Any]) -> bytes:
    """The Secret deployment.yaml mounts at --grpc-cert-dir, with a certificate for the host of
    --grpc-endpoint (what docs/deploying.md's Certificate issues). Returns its CA (PEM)."""
    endpoint = flag(_argv(deployment), "--grpc-endpoint")
    assert endpoint, "deployment.yaml serves gRPC without --grpc-endpoint: the tools would dial localhost"
    return await _cert_secret(admin, deployment, "--grpc-cert-dir", (endpoint.rsplit(":", 1)[0],))


def _argv(deployment: Mapping[str, Any]) -> list[str]:
    container = container_of(deployment)
    return [*container.get("command", []), *container.get("args", [])]


async def _cert_secret(admin: Gateway, deployment: Mapping[str, Any], option: str, hosts: tuple[str, ...]) -> bytes:
    """The Secret of the volume mounted where the command's `option` points, with a certificate for `hosts`
    from a new CA and that CA as `ca.crt`, as cert-manager writes it; returns the CA's PEM."""
    folder = flag(_argv(deployment), option)
    mount = next(vm for vm in container_of(deployment).get("volumeMounts", []) if vm["mountPath"] == folder)
    secret_name = next(v["secret"]["secretName"] for v in deployment["spec"]["template"]["spec"]["volumes"]
                       if v["name"] == mount["name"])
    ca = CertificateAuthority(f"{secret_name}-ca")
    pair = ca.issue(secret_name, server=True, hosts=hosts)
    await manifests.apply_all(admin, [{
        "apiVersion": "v1", "kind": "Secret", "type": "kubernetes.io/tls",
        "metadata": {"name": secret_name, "namespace": deployment["metadata"]["namespace"]},
        "data": {"tls.crt": base64.b64encode(pair.cert_pem).decode(),
                 "tls.key": base64.b64encode(pair.key_pem).decode(),
                 "ca.crt": base64.b64encode(ca.cert_pem).decode()}}])
    return ca.cert_pem


async def _register_webhook(admin: Gateway, container: Mapping[str, Any], pod: Mapping[str, Any], pod_ip: str,
                            ca_pem: bytes) -> None:
    """The Service's endpoints (the pod's IP and the targetPort's containerPort), then webhook.yaml."""
    configuration, service, port = _webhook_service()
    ref = service["metadata"]
    namespace = ref["namespace"]
    target = container_port(container, port["targetPort"])
    owner = {"kind": "Pod", "name": pod["metadata"]["name"], "namespace": namespace, "uid": pod["metadata"]["uid"]}
    await manifests.apply_all(admin, [
        {"apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
         "metadata": {"name": f"{ref['name']}-pod", "namespace": namespace,
                      "labels": {"kubernetes.io/service-name": ref["name"]}},
         "addressType": "IPv4",
         "endpoints": [{"addresses": [pod_ip], "conditions": {"ready": True}, "targetRef": owner}],
         "ports": [{"name": port["name"], "port": target, "protocol": "TCP"}]},
    ])
    configuration["webhooks"][0]["clientConfig"]["caBundle"] = base64.b64encode(ca_pem).decode()
    await manifests.apply_all(admin, [configuration])


async def _scenario(run: PodRun, admin: Gateway, pod_ip: str, child: Any) -> None:
    container = run.container
    probes = {p: container[p]["httpGet"] for p in ("readinessProbe", "livenessProbe") if p in container}
    url = {name: f"http://{pod_ip}:{container_port(container, get['port'])}{get['path']}"
           for name, get in probes.items()}
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=scaled(5))) as http:
        if not await _until(lambda: _status(http, url["readinessProbe"], 200), 60, child):
            run.failures.append(f"readiness probe {url['readinessProbe']} never answered 200")
            return
        for address in url.values():
            run.probes[urlsplit(address).path] = await _get_status(http, address)
        for port in container.get("ports", []):
            run.listening[port["name"]] = await _accepts(pod_ip, int(port["containerPort"]))
        run.process = _process(child.process.pid)
        # Through the Service's endpoints to the pod: the API server now calls the webhook.
        lease = {"apiVersion": "lessor.dev/v1alpha1", "kind": "Lease",
                 "metadata": {"name": "probe", "namespace": "default"},
                 "spec": {"clientRef": {"name": "nobody"}, "selector": {}, "duration": "1m"}}
        try:
            await until_enforced(admin, LEASE, "default", lease, timeout=scaled(30))
            await admin.create(LEASE, "default", lease)
        except ApiError as err:
            run.denial = err.message
        except TimeoutError as err:
            run.failures.append(f"the webhook was never called: {err}")

        docs = manifests.samples()
        for doc in docs:
            try:
                await manifests.apply_all(admin, [doc])
            except ApiError as err:
                run.refused_samples.append(f"{doc['kind']}/{doc['metadata']['name']}: {err.message}")
        exporters = [(d["metadata"]["namespace"], d["metadata"]["name"]) for d in docs if d["kind"] == "Exporter"]
        beats = asyncio.create_task(heartbeat(admin, exporters))  # the exporters' agents, as in `lessor dev`
        try:
            wanted = [(LEASE, n) for n in LEASES] + [(CLAIM, n) for n in CLAIMS]

            async def all_ready() -> bool:
                for res, name in wanted:
                    run.conditions[f"{res.kind}/{name}"] = ready_condition(await _get(admin, res, LAB, name))
                return all(c == ("True", "Ready") for c in run.conditions.values())

            if await _until(all_ready, 90, child):
                await _impostor(run, admin, directory_of(run))
                await _resizing(run, admin, child)
                await _jumpstarter(run, admin, pod_ip, child)
                await _ending(run, admin, child)
            await _scrape(run, admin, http, f"{pod_ip}:{container_port(container, 'metrics')}")
        finally:
            await cancelled(beats)


async def _scrape(run: PodRun, admin: Gateway, http: aiohttp.ClientSession, address: str) -> None:
    """/metrics as Prometheus reads it: a ServiceAccount bound to lessor-metrics-reader, over HTTPS
    (the certificate is self-signed, as the ServiceMonitor's insecureSkipVerify says); and as others do."""
    namespace = run.pod["metadata"]["namespace"]
    allowed, unbound = await _account_token(admin, namespace, "prometheus"), await _account_token(
        admin, namespace, "nobody")
    await manifests.apply_all(admin, [{  # the ClusterRole came with rbac.yaml
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "prometheus-reads-lessor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "lessor-metrics-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "prometheus", "namespace": namespace}]}])
    url = f"https://{address}/metrics"

    async def scrape(who: str, token: str | None) -> bool:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError):
            async with http.get(url, headers=headers, ssl=False) as resp:
                run.metrics_status[who] = resp.status
                if resp.status == 200:
                    run.metrics = await resp.text()
                return resp.status == 200
        return False

    deadline = time.monotonic() + scaled(15)  # until the API server's authorizer has seen the new binding
    while not await scrape("allowed", allowed) and time.monotonic() < deadline:
        await asyncio.sleep(0.5)
    for who, token in (("unbound", unbound), ("anonymous", None)):
        await scrape(who, token)
    run.metrics_status["plain-http"] = await _get_status(http, f"http://{address}/metrics")


async def _account_token(admin: Gateway, namespace: str, account: str) -> str:
    await admin.request("create", "ServiceAccount", "POST", f"/api/v1/namespaces/{namespace}/serviceaccounts",
                        body={"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": account}})
    answer = await admin.request("create", "TokenRequest", "POST",
                                 f"/api/v1/namespaces/{namespace}/serviceaccounts/{account}/token",
                                 body={"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
                                       "spec": {"expirationSeconds": 600}})
    return str(answer["status"]["token"])


def directory_of(run: PodRun) -> Path:
    return run.log_path.parent


async def _impostor(run: PodRun, admin: Gateway, folder: Path) -> None:
    """While the operator leads: the leader Lease, and a write by another ServiceAccount that the fence
    judges (named lessor-*), which RBAC allows (the operator's ClusterRole) and the fence refuses."""
    namespace = run.pod["metadata"]["namespace"]
    run.leader_lease = await admin.get(await admin.resolve("coordination.k8s.io/v1", "Lease"), namespace,
                                       "lessor-leader")
    token = await _account_token(admin, namespace, "lessor-impostor")
    await manifests.apply_all(admin, [{
        "apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding",
        "metadata": {"name": "lessor-impostor"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": "lessor"},
        "subjects": [{"kind": "ServiceAccount", "name": "lessor-impostor", "namespace": namespace}]}])
    kubeconfig = folder / "impostor.kubeconfig"
    kubeconfig.write_text(json.dumps({
        "apiVersion": "v1", "kind": "Config", "current-context": "impostor",
        "clusters": [{"name": "c", "cluster": {"server": run.controlplane.server,
                                               "certificate-authority": str(run.controlplane.pki / "ca.crt")}}],
        "users": [{"name": "impostor", "user": {"token": token}}],
        "contexts": [{"name": "impostor", "context": {"cluster": "c", "user": "impostor"}}]}))
    exporter = next(d for d in manifests.samples() if d["kind"] == "Exporter")["metadata"]
    async with await Gateway.connect(str(kubeconfig)) as impostor:
        deadline = time.monotonic() + scaled(15)  # until the authorizer has seen the binding
        while time.monotonic() < deadline:
            try:
                await impostor.patch_status(EXPORTER, exporter.get("namespace", "default"), exporter["name"],
                                            {"exporterStatus": "Offline"})
                run.impostor_refusal = "admitted"
                return
            except ApiError as err:
                run.impostor_refusal = err.message
                if err.status == 403 and "ValidatingAdmissionPolicy" in err.message:
                    return
            await asyncio.sleep(0.3)


async def _jumpstarter(run: PodRun, admin: Gateway, pod_ip: str, child: Any) -> None:
    """Jumpstarter's protocol on the pod's gRPC port, as the tools speak it to the host of --grpc-endpoint
    (the certificate of the mounted Secret names it), with the tokens the operator minted into the samples'
    credential Secrets: an exporter's agent reports its status, a client lists exporters, makes a lease for that
    exporter's board, which the actors decide (Ready or waiting), and deletes it."""
    try:
        await _jumpstarter_calls(run, admin, pod_ip, child)
    except grpc.aio.AioRpcError as err:
        run.grpc["failure"] = f"{err.code().name}: {err.details()}"
    except (AssertionError, ApiError) as err:
        run.grpc["failure"] = str(err)


async def _jumpstarter_calls(run: PodRun, admin: Gateway, pod_ip: str, child: Any) -> None:
    host = (flag(run.argv, "--grpc-endpoint") or "").rsplit(":", 1)[0]
    docs = manifests.samples()
    client = next(d for d in docs if d["kind"] == "Client")["metadata"]
    exporter = next(d for d in docs if d["kind"] == "Exporter")["metadata"]
    secrets = await admin.resolve("v1", "Secret")
    tokens: dict[str, str] = {}

    async def minted(kind: str, name: str) -> bool:
        secret = await _get(admin, secrets, LAB, f"{name}-{kind}")
        if secret is not None:
            tokens[kind] = base64.b64decode(secret["data"]["token"]).decode()
        return secret is not None

    assert await _until(lambda: minted("client", client["name"]), 30, child), "no client credential was minted"
    assert await _until(lambda: minted("exporter", exporter["name"]), 30, child), "no exporter credential was minted"

    def md(kind: str, name: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {tokens[kind.lower()]}"), ("jumpstarter-kind", kind),
                ("jumpstarter-namespace", LAB), ("jumpstarter-name", name))

    port = container_port(run.container, "grpc")
    async with grpc.aio.secure_channel(f"{pod_ip}:{port}", grpc.ssl_channel_credentials(run.grpc_ca),
                                       options=(("grpc.ssl_target_name_override", host),)) as channel:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
        clients = client_pb2_grpc.ClientServiceStub(channel)
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE"), message="pod run"),
            metadata=md("Exporter", exporter["name"]), timeout=scaled(10))

        async def reported() -> bool:
            status = ((await _get(admin, EXPORTER, LAB, exporter["name"])) or {}).get("status") or {}
            run.grpc["statusMessage"] = status.get("statusMessage")
            return status.get("statusMessage") == "pod run"

        await _until(reported, 30, child)
        listed = await clients.ListExporters(client_pb2.ListExportersRequest(parent=f"namespaces/{LAB}"),
                                             metadata=md("Client", client["name"]), timeout=scaled(10))
        run.grpc["exporters"] = sorted(e.name.rsplit("/", 1)[-1] for e in listed.exporters)
        lease = client_pb2.Lease(selector=f"board={exporter['labels']['board']}")
        lease.duration.FromSeconds(60)
        made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{LAB}", lease=lease),
                                         metadata=md("Client", client["name"]), timeout=scaled(10))
        name = made.name.rsplit("/", 1)[-1]

        async def decided() -> bool:
            run.grpc["decided"] = ready_condition(await _get(admin, LEASE, LAB, name))
            return run.grpc["decided"] is not None

        await _until(decided, 30, child)
        await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=made.name),
                                  metadata=md("Client", client["name"]), timeout=scaled(10))

        async def released() -> bool:
            run.grpc["released"] = ready_condition(await _get(admin, LEASE, LAB, name))
            return run.grpc["released"] == ("False", "Released")

        await _until(released, 30, child)


async def _resizing(run: PodRun, admin: Gateway, child: Any) -> None:
    """A claim's change that the provider's updateFilters allow reaches its resource (an apply to a
    resource the operator created: the write path of an update)."""
    claim = await admin.get(CLAIM, LAB, CLAIMS[0])
    reference = claim["status"]["resources"][0]["reference"]
    resources = copy.deepcopy(claim["spec"]["resources"])
    resources[0]["template"]["data"]["size"] = "medium"
    await admin.merge_patch(CLAIM, LAB, CLAIMS[0], {"spec": {"resources": resources}})

    async def resized() -> bool:
        configmap = await _get(admin, CONFIGMAP, reference["namespace"], reference["name"])
        run.resized = ((configmap or {}).get("data") or {}).get("size")
        return run.resized == "medium"

    await _until(resized, 30, child)


async def _ending(run: PodRun, admin: Gateway, child: Any) -> None:
    """Release a lease and end a claim's lifespan: the operator ends, labels and deletes what it made,
    and at last the claim itself."""
    await admin.merge_patch(LEASE, LAB, LEASES[0], {"spec": {"release": True}})
    claim = await admin.get(CLAIM, LAB, CLAIMS[1])
    handle = claim["status"]["resourceHandle"]
    end = (dt.datetime.now(dt.UTC) + dt.timedelta(seconds=3)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await admin.merge_patch(CLAIM, LAB, CLAIMS[1], {"spec": {"lifespan": {"end": end}}})

    async def released() -> bool:
        run.released = ready_condition(await _get(admin, LEASE, LAB, LEASES[0]))
        return run.released == ("False", "Released")

    async def ended() -> bool:
        run.handle_deleted = await _get(admin, HANDLE, handle["namespace"], handle["name"]) is None
        run.claim_deleted = await _get(admin, CLAIM, LAB, CLAIMS[1]) is None
        return run.handle_deleted and run.claim_deleted

    await _until(released, 30, child)
    await _until(ended, 60, child)


async def _until(check: Any, timeout: float, child: Any) -> bool:
    deadline = time.monotonic() + scaled(timeout)
    while time.monotonic() < deadline:
        if not child.running:
            return False
        if await check():
            return True
        await asyncio.sleep(0.5)
    return False


async def _get(admin: Gateway, res: Any, namespace: str, name: str) -> dict[str, Any] | None:
    try:
        return await admin.get(res, namespace, name)
    except ApiError as err:
        if err.not_found:
            return None
        raise


def _process(pid: int) -> dict[str, str]:
    status = dict(line.split(":\t", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines()
                  if ":\t" in line)
    root = next(line.split()[5] for line in Path(f"/proc/{pid}/mountinfo").read_text().splitlines()
                if line.split()[4] == "/")
    return {"name": status["Name"].strip(), "uid": status["Uid"].split()[0], "gid": status["Gid"].split()[0],
            "CapEff": status["CapEff"].strip(), "NoNewPrivs": status.get("NoNewPrivs", "").strip(), "root": root}


async def _accepts(host: str, port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection(host, port), scaled(5))
    except (OSError, TimeoutError):
        return False
    writer.close()
    await writer.wait_closed()
    return True


async def _get_status(http: aiohttp.ClientSession, url: str) -> int:
    try:
        async with http.get(url) as resp:
            return resp.status
    except (aiohttp.ClientError, OSError, TimeoutError):
        return 0


async def _status(http: aiohttp.ClientSession, url: str, expected: int) -> bool:
    return await _get_status(http, url) == expected
