"""Start etcd, kube-apiserver and (when built) kube-controller-manager on loopback."""

from __future__ import annotations

import asyncio
import os
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType

import aiohttp
import yaml

from lessor.tools.controlplane.build import Binaries
from lessor.tls.certs import CertificateAuthority, service_account_key
from lessor.tools.controlplane.processes import Child, free_port

Progress = Callable[[str], None]


class ControlPlaneError(RuntimeError):
    """A component did not start; the message carries the end of its log."""


class ControlPlane:
    """A throwaway control plane in `directory`; `kubeconfig` exists only once it is ready."""

    def __init__(
        self,
        directory: Path,
        binaries: Binaries,
        *,
        controller_manager: bool = True,
        progress: Progress | None = None,
        ready_timeout: float = 60.0,
        apiserver_args: tuple[str, ...] = (),
        address: str = "127.0.0.1",
        audit_users: tuple[str, ...] = (),
        audit_verbs: tuple[str, ...] = (),
    ) -> None:
        """`address`: where the API server listens (loopback unless a test's pod network needs
        another local address). `audit_users`: record these users' requests at Metadata level in
        `audit_log` (off when empty: only the tests that read it pay for it). `audit_verbs`: only these
        verbs of theirs (all when empty; a benchmark that reads writes only need not pay for its reads)."""
        self.directory = directory.resolve()
        self.binaries = binaries
        self.run_controller_manager = controller_manager and binaries.kube_controller_manager is not None
        self.ready_timeout = ready_timeout
        self.apiserver_args = apiserver_args
        self.address = address
        self.audit_users = audit_users
        self.audit_verbs = audit_verbs
        self._say = progress or (lambda _: None)
        self._children: list[Child] = []
        self.server = ""
        self.etcd_url = ""
        self.startup_seconds = 0.0

    @property
    def kubeconfig(self) -> Path:
        return self.directory / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.directory / "pki"

    @property
    def audit_log(self) -> Path | None:
        """JSON lines, one audit event per stage of each request of `audit_users`."""
        return self.directory / "logs" / "audit.log" if self.audit_users else None

    async def __aenter__(self) -> ControlPlane:
        try:
            await self.start()
        except BaseException:
            await self.stop()
            raise
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()

    async def start(self) -> None:
        started = time.monotonic()
        self.kubeconfig.unlink(missing_ok=True)
        for sub in ("pki", "logs", "etcd"):
            (self.directory / sub).mkdir(parents=True, exist_ok=True)
        files = self._write_pki()
        etcd_port, peer_port, api_port = free_port(), free_port(), free_port()
        self.server = f"https://{self.address}:{api_port}"

        etcd_url = self.etcd_url = f"http://127.0.0.1:{etcd_port}"
        await self._spawn("etcd", [
            str(self.binaries.etcd),
            "--name=lessor", f"--data-dir={self.directory / 'etcd'}",
            f"--listen-client-urls={etcd_url}", f"--advertise-client-urls={etcd_url}",
            f"--listen-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}",
            f"--initial-cluster=lessor=http://127.0.0.1:{peer_port}",
            "--unsafe-no-fsync",  # a local, disposable cluster: durability is not worth the latency
            "--quota-backend-bytes=8589934592",
            "--log-level=warn",
        ])
        await self._wait_until("etcd", lambda: self._etcd_healthy(etcd_url))

        await self._spawn("kube-apiserver", [
            str(self.binaries.kube_apiserver),
            f"--etcd-servers={etcd_url}",
            f"--bind-address={self.address}", f"--advertise-address={self.address}", f"--secure-port={api_port}",
            f"--tls-cert-file={files['apiserver.crt']}", f"--tls-private-key-file={files['apiserver.key']}",
            f"--client-ca-file={files['ca.crt']}",
            f"--service-account-key-file={files['sa.pub']}",
            f"--service-account-signing-key-file={files['sa.key']}",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            "--api-audiences=https://kubernetes.default.svc.cluster.local",
            "--authorization-mode=RBAC",
            "--enable-admission-plugins=NamespaceLifecycle,ServiceAccount,MutatingAdmissionWebhook,"
            "ValidatingAdmissionWebhook,ValidatingAdmissionPolicy,ResourceQuota",
            "--service-cluster-ip-range=10.96.0.0/16",
            "--allow-privileged=true",
            "--profiling=false",
            "--enable-priority-and-fairness=false",
            "--endpoint-reconciler-type=none",
            "--v=1",
            *self._audit_args(),
            *self.apiserver_args,
        ])
        await self._wait_until("kube-apiserver", self._apiserver_ready)

        if self.run_controller_manager:
            assert self.binaries.kube_controller_manager is not None
            kcm_config = self.directory / "controller-manager.kubeconfig"
            self._write_kubeconfig(kcm_config, files["admin.crt"], files["admin.key"])
            await self._spawn("kube-controller-manager", [
                str(self.binaries.kube_controller_manager),
                f"--kubeconfig={kcm_config}",
                f"--authentication-kubeconfig={kcm_config}",
                f"--authorization-kubeconfig={kcm_config}",
                "--bind-address=127.0.0.1", f"--secure-port={free_port()}",
                "--leader-elect=false",
                "--controllers=garbage-collector-controller,namespace-controller,"
                "serviceaccount-controller,serviceaccount-token-controller",
                f"--service-account-private-key-file={files['sa.key']}",
                f"--root-ca-file={files['ca.crt']}",
                "--use-service-account-credentials=false",
                "--v=1",
            ])

        self._write_kubeconfig(self.kubeconfig, files["admin.crt"], files["admin.key"])
        self.startup_seconds = time.monotonic() - started
        self._say(f"API server ready at {self.server} in {self.startup_seconds:.1f}s; kubeconfig: {self.kubeconfig}")

    def _audit_args(self) -> list[str]:
        if not self.audit_users:
            return []
        policy = self.directory / "audit-policy.yaml"
        policy.write_text(yaml.safe_dump({
            "apiVersion": "audit.k8s.io/v1", "kind": "Policy",
            # One event per request once answered (watches: when they start, and when they end).
            "omitStages": ["RequestReceived"],
            "rules": [{"level": "Metadata", "users": list(self.audit_users),
                       **({"verbs": list(self.audit_verbs)} if self.audit_verbs else {})}, {"level": "None"}],
        }))
        return [f"--audit-policy-file={policy}", f"--audit-log-path={self.audit_log}",
                "--audit-log-format=json", "--audit-log-mode=blocking"]

    async def stop(self) -> None:
        """Stop in reverse order, so the API server never outlives etcd's clients' needs."""
        for child in reversed(self._children):
            await child.stop()
        self._children.clear()

    async def wait(self) -> str:
        """Return the name of the first component that exits (for supervisors of the whole tree)."""
        waits = {asyncio.ensure_future(c.process.wait()): c for c in self._children if c.process}
        done, pending = await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        for task in pending:
            task.cancel()
        return waits[next(iter(done))].name

    async def compact(self) -> int:
        """Compact etcd up to now, so older resourceVersions are gone (410) as on a long-lived cluster."""
        async with aiohttp.ClientSession() as http:
            async with http.post(f"{self.etcd_url}/v3/kv/range", json={"key": "AA=="}) as r:
                revision = int((await r.json(content_type=None))["header"]["revision"])
            async with http.post(f"{self.etcd_url}/v3/kv/compaction",
                                 json={"revision": str(revision), "physical": True}) as r:
                r.raise_for_status()
        return revision

    async def kill_apiserver(self) -> None:
        """SIGKILL kube-apiserver, as a crash or an OOM kill ends it: its port refuses connections and its
        clients' requests in flight break, until `start_apiserver`. etcd and what was stored live on."""
        child = self._child("kube-apiserver")
        if child.process is not None and child.running:
            child.process.kill()
            await child.process.wait()

    async def start_apiserver(self) -> float:
        """Start the killed kube-apiserver again, with the same flags and port; return once `/readyz` says
        ready, with the seconds that took."""
        child = self._child("kube-apiserver")
        started = time.monotonic()
        await child.start()
        await self._wait_until("kube-apiserver", self._apiserver_ready, child)
        return time.monotonic() - started

    def _child(self, name: str) -> Child:
        found = next((c for c in self._children if c.name == name), None)
        if found is None:
            raise ControlPlaneError(f"no {name} in this control plane (not started, or stopped)")
        return found

    async def _spawn(self, name: str, argv: list[str]) -> None:
        child = Child(name, argv, self.directory / "logs" / f"{name}.log")
        await child.start()
        self._children.append(child)
        self._say(f"started {name} (log: {child.log_path})")

    async def _wait_until(self, name: str, probe: Callable[[], object], child: Child | None = None) -> None:
        child = child or self._children[-1]
        deadline = time.monotonic() + self.ready_timeout
        while time.monotonic() < deadline:
            if not child.running:
                raise ControlPlaneError(f"{name} exited during start-up; end of {child.log_path}:\n{child.log_tail()}")
            if await probe():  # type: ignore[misc]
                return
            await asyncio.sleep(0.1)
        raise ControlPlaneError(
            f"{name} was not ready within {self.ready_timeout:.0f}s; end of {child.log_path}:\n{child.log_tail()}"
        )

    async def _etcd_healthy(self, url: str) -> bool:
        try:
            async with aiohttp.ClientSession() as http, http.get(f"{url}/health", timeout=aiohttp.ClientTimeout(total=2)) as r:
                return r.status == 200 and (await r.json(content_type=None)).get("health") == "true"
        except (aiohttp.ClientError, OSError, TimeoutError, ValueError):
            return False

    async def _apiserver_ready(self) -> bool:
        ctx = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        ctx.load_cert_chain(str(self.pki / "admin.crt"), str(self.pki / "admin.key"))
        try:
            async with aiohttp.ClientSession() as http, http.get(
                f"{self.server}/readyz", ssl=ctx, timeout=aiohttp.ClientTimeout(total=2)
            ) as r:
                return r.status == 200
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False

    def _write_pki(self) -> dict[str, Path]:
        ca = CertificateAuthority()
        files: dict[str, Path] = {}
        (self.pki / "ca.crt").write_bytes(ca.cert_pem)
        files["ca.crt"] = self.pki / "ca.crt"
        serving = ca.issue(
            "kube-apiserver", server=True,
            hosts=(*dict.fromkeys(("127.0.0.1", self.address)), "localhost", "kubernetes", "kubernetes.default",
                   "kubernetes.default.svc", "kubernetes.default.svc.cluster.local", "10.96.0.1"),
        )
        files["apiserver.crt"], files["apiserver.key"] = serving.write(self.pki, "apiserver")
        admin = ca.issue("lessor-admin", organization="system:masters", client=True)
        files["admin.crt"], files["admin.key"] = admin.write(self.pki, "admin")
        sa = service_account_key()
        (self.pki / "sa.pub").write_bytes(sa.cert_pem)
        (self.pki / "sa.key").write_bytes(sa.key_pem)
        (self.pki / "sa.key").chmod(0o600)
        files["sa.pub"], files["sa.key"] = self.pki / "sa.pub", self.pki / "sa.key"
        return files

    def _write_kubeconfig(self, path: Path, cert: Path, key: Path) -> None:
        """Atomically, so a watcher of `path` never reads half a file."""
        config = {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [{"name": "lessor", "cluster": {
                "server": self.server, "certificate-authority": str(self.pki / "ca.crt")}}],
            "users": [{"name": "lessor-admin", "user": {
                "client-certificate": str(cert), "client-key": str(key)}}],
            "contexts": [{"name": "lessor", "context": {"cluster": "lessor", "user": "lessor-admin"}}],
            "current-context": "lessor",
        }
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        tmp.write_text(yaml.safe_dump(config, sort_keys=False))
        tmp.chmod(0o600)
        os.replace(tmp, path)
