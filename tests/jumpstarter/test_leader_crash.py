"""A leader SIGKILLed behind a follower: the real `jmp run`, connected through the follower, stays up.

Two `lessor run` processes with the deployed election timings (15 s lease) on their own control plane; the
tools' only endpoint is the follower. While the leader is dead and its Lease has not expired, the follower
holds the exporter's calls instead of failing them; it then wins the election and serves them itself. The
exporter's agent neither exits nor restarts, its `Listen` of a lease granted before the crash reaches the
new leader's router, and a lease asked for after the crash is granted and reached.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from lessor.tls.certs import CertificateAuthority
from lessor.gateway import Gateway
from lessor.gateway.resources import CLIENT, EXPORTER, LEASE, NAMESPACE
from lessor.app.install import install
from lessor.tools.bench.common import is_leader, start_operator, wait_http
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port
from tests.jumpstarter.test_grpc import JMP, LESSOR, run
from tests.polling import until
from tests.slowness import scaled

pytestmark = pytest.mark.apiserver

OPS = "lessor-system"
NS = "lab"
REGISTERS = "Registering exporter with controller"
"""What the agent logs once per start of its worker (`jmp run` starts another after a failure)."""


class _Replica:
    """`lessor run --grpc-port` in a process of its own, serving its own port and advertising it; every
    replica names the same endpoint to the tools (the follower's)."""

    def __init__(self, kubeconfig: Path, folder: Path, port: int, endpoint: str, certs: Path) -> None:
        folder.mkdir()
        self.folder, self.health, self.metrics = folder, free_port(), free_port()
        self.proc = start_operator(kubeconfig, folder, self.health, self.metrics, "--grpc-port", str(port),
                                   "--grpc-endpoint", endpoint, "--grpc-advertise", f"localhost:{port}",
                                   "--grpc-cert-dir", str(certs))

    async def leads(self) -> bool:
        return await asyncio.to_thread(is_leader, self.metrics)

    def log(self) -> str:
        return (self.folder / "operator.log").read_text(errors="replace")[-4000:]

    async def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.to_thread(self.proc.wait, 30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


async def _until_leads(replica: _Replica, seconds: float) -> None:
    deadline = asyncio.get_running_loop().time() + scaled(seconds)
    while not await replica.leads():
        assert replica.proc.poll() is None and asyncio.get_running_loop().time() < deadline, replica.log()
        await asyncio.sleep(0.2)


@pytest.fixture
async def lab(tmp_path: Path) -> AsyncIterator[tuple[Gateway, Path]]:
    async with ControlPlane(tmp_path / "cp", ensure_binaries(), controller_manager=False) as cp, \
            await Gateway.connect(str(cp.kubeconfig)) as kube:
        await install(kube, OPS, progress=lambda _: None)
        await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        yield kube, cp.kubeconfig


def _ready(lease: Mapping[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (lease.get("status") or {}).get("conditions") or ())


async def test_jmp_run_through_the_follower_stays_up_when_the_leader_is_killed(
        lab: tuple[Gateway, Path], tmp_path: Path) -> None:
    kube, kubeconfig = lab
    ca = CertificateAuthority("test-ca")
    certs = tmp_path / "certs"
    certs.mkdir()
    ca.issue("lessor-grpc", hosts=("localhost",), server=True).write(certs, "tls")
    (certs / "ca.crt").write_bytes(ca.cert_pem)
    leader_port, follower_port = free_port(), free_port()
    endpoint = f"localhost:{follower_port}"
    first = _Replica(kubeconfig, tmp_path / "first", leader_port, endpoint, certs)
    replicas = [first]
    agent: subprocess.Popen[bytes] | None = None
    try:
        await wait_http(f"http://127.0.0.1:{first.health}/readyz", first.proc)
        await _until_leads(first, 60)
        second = _Replica(kubeconfig, tmp_path / "second", follower_port, endpoint, certs)
        replicas.append(second)
        await wait_http(f"http://127.0.0.1:{second.health}/readyz", second.proc)
        assert not await second.leads()

        async def config(kind: str, name: str, extra: Mapping[str, Any]) -> Path:
            out = tmp_path / f"{kind}-{name}.yaml"
            await kube.create(CLIENT if kind == "client" else EXPORTER, NS, {
                "apiVersion": "lessor.dev/v1alpha1", "kind": kind.capitalize(),
                "metadata": {"name": name, "labels": {"board": "crash"} if kind == "exporter" else {}}})
            await until(kube, CLIENT if kind == "client" else EXPORTER, NS, name,
                        lambda o: bool((o.get("status") or {}).get("credential")))
            done = await run(str(LESSOR), "credentials", kind, name, "-n", NS, "--kubeconfig", str(kubeconfig),
                             "--ca-file", str(certs / "ca.crt"), "-o", str(out))
            assert done.returncode == 0, done.stdout
            body = yaml.safe_load(out.read_text())
            assert body["endpoint"] == endpoint, body
            out.write_text(yaml.safe_dump({**body, **extra}))
            return out

        exporter = await config("exporter", "board", {"export": {"power": {
            "type": "jumpstarter_driver_power.driver.MockPower"}}})
        client = await config("client", "alice", {"drivers": {"allow": [
            "jumpstarter_driver_power.*", "jumpstarter_driver_composite.*"]}})
        agent_log = tmp_path / "board.log"

        def says() -> str:
            return agent_log.read_text(errors="replace")

        with agent_log.open("wb") as out:
            agent = subprocess.Popen([str(JMP), "run", "--exporter-config", str(exporter)], stdout=out,
                                     stderr=subprocess.STDOUT, start_new_session=True)
        await until(kube, EXPORTER, NS, "board", lambda o: (o.get("status") or {}).get("exporterStatus") == "Available",
                    timeout=60)
        # A lease held across the crash: the agent listens for its Dials (through the follower) meanwhile.
        made = await run(str(JMP), "create", "lease", "--client-config", str(client), "-l", "board=crash",
                         "--duration", "1h", "-o", "name")
        assert made.returncode == 0, made.stdout
        held = made.stdout.strip().split("/")[-1]
        await until(kube, LEASE, NS, held, _ready)
        await until(kube, EXPORTER, NS, "board", lambda o: (o.get("status") or {}).get("exporterStatus") == "LeaseReady",
                    timeout=60)

        first.proc.send_signal(signal.SIGKILL)
        await asyncio.to_thread(first.proc.wait, 30)
        await _until_leads(second, 60)  # once the dead leader's 15 s Lease expired
        assert agent.poll() is None, "jmp run exited:\n" + says()
        assert says().count(REGISTERS) == 1, "the agent started again:\n" + says()

        # The Listen held across the crash reaches the new leader's router: the held lease's shell gets through.
        shell = await run(str(JMP), "shell", "--client-config", str(client), "--lease", held, "--", "j", "power",
                          "on", timeout=120)
        assert shell.returncode == 0, shell.stdout + "\n--- exporter:\n" + says()
        deleted = await run(str(JMP), "delete", "lease", "--client-config", str(client), held)
        assert deleted.returncode == 0, deleted.stdout
        # A lease asked for after the crash is granted by the new leader, and reached.
        shell = await run(str(JMP), "shell", "--client-config", str(client), "-l", "board=crash", "--duration",
                          "10m", "--", "j", "power", "off", timeout=120)
        assert shell.returncode == 0, shell.stdout + "\n--- exporter:\n" + says()
        assert "power off" in says()  # the mock driver itself was called
        assert agent.poll() is None and says().count(REGISTERS) == 1, says()
    finally:
        if agent is not None:
            os.killpg(agent.pid, signal.SIGTERM)
            try:
                await asyncio.to_thread(agent.wait, scaled(20))
            except subprocess.TimeoutExpired:
                os.killpg(agent.pid, signal.SIGKILL)
                agent.wait()
        for replica in replicas:
            await replica.stop()
