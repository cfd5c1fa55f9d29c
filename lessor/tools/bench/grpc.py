"""Benchmark of Jumpstarter's protocol on lessor (`lessor run --grpc-port`): a lease over gRPC, and the router.

- CreateLease → Ready: one client asks for one exporter over gRPC and polls GetLease (as `jmp` does) until
  Ready, then deletes the lease and waits for the exporter to be free; `--leases` times.
- The router: a Dial of the granted lease, the exporter's Listen and the two RouterService streams, as the
  tools use them; bytes per second one way in `--frame-kib` frames, and the round trip of a small frame
  (each way through the router), against a direct TCP connection on loopback in the same run.
- `--hostile`: instead, what any caller can send (grpc_hostile.py): malformed bodies, crafted tokens, stream
  floods and a router reader that never reads, with the codes answered, log lines, RSS and another client's
  latency.
- `--through follower`: two replicas with leader election, and every call sent to the one that does not
  lead, which relays it to the leader (as a Service in front of a Deployment of two may do).

On a fresh local control plane, the operator a separate `lessor run` process with the development certificate.
Needs the [jumpstarter] extra.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import re
import statistics
import subprocess
import tempfile
import time
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any

from lessor.tls.certs import CertificateAuthority
from lessor.gateway import ApiError, Gateway, Resource
from lessor.gateway.resources import CLIENT, EXPORTER, NAMESPACE, POLICY
from lessor.app.install import install
from lessor.jumpstarter.settings import require_extra
from lessor.tools.bench import grpc_hostile
from lessor.tools.bench.common import (is_leader, machine, metrics_text, percentile, say, start_operator, stop_operator,
                                       wait_http)
from lessor.tools.controlplane import ControlPlane, ensure_binaries
from lessor.tools.controlplane.processes import free_port

API = "lessor.dev/v1alpha1"
NS = "bench"
SECRET = Resource("", "v1", "Secret", "secrets")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--leases", type=int, default=30, help="leases asked for one after another (default: %(default)s)")
    parser.add_argument("--megabytes", type=int, default=64, help="bytes sent one way through the router (default: %(default)s)")
    parser.add_argument("--frame-kib", type=int, default=32, help="payload per frame (default: %(default)s)")
    parser.add_argument("--pings", type=int, default=500, help="round trips of a small frame (default: %(default)s)")
    parser.add_argument("--no-policy", action="store_true",
                        help="no ExporterAccessPolicy in the lab's namespace (open access) instead of one for all")
    parser.add_argument("--through", choices=("leader", "follower"), default="leader",
                        help="send every call to the leader (one replica, no election) or to a follower of two "
                             "replicas, which relays it to the leader (default: %(default)s)")
    grpc_hostile.add_arguments(parser)


async def run(args: argparse.Namespace) -> dict[str, Any]:
    require_extra()
    with tempfile.TemporaryDirectory(prefix="lessor-bench-") as folder:
        tmp = Path(folder)
        async with ControlPlane(tmp / "cp", ensure_binaries(say), controller_manager=False, progress=say) as cp:
            async with await Gateway.connect(str(cp.kubeconfig)) as kube:
                await install(kube, "lessor-system", progress=say)
                await _lab(kube, policy=not args.no_policy)
                certs = _certificates(tmp / "certs")
                replicas: list[_Replica] = []
                try:
                    replicas.append(await _Replica.start(cp.kubeconfig, tmp / "first", certs,
                                                         elect=args.through == "follower"))
                    if args.through == "follower":
                        await replicas[0].until_leading()
                        replicas.append(await _Replica.start(cp.kubeconfig, tmp / "second", certs, elect=True))
                        say("two replicas: calls go to the follower, which relays them to the leader")
                    client, agent = await _token(kube, CLIENT, "c", "client"), await _token(kube, EXPORTER, "e",
                                                                                            "exporter")
                    ca = (certs / "ca.crt").read_bytes()
                    if args.hostile:
                        operator = grpc_hostile.Operator(replicas[-1].proc.pid, replicas[-1].log)
                        result = await grpc_hostile.hostile(args, replicas[-1].endpoint, ca, client, agent, operator)
                    else:
                        result = await _measure(args, replicas[-1].endpoint, ca, client, agent, kube)
                    if args.through == "follower":
                        if await asyncio.to_thread(replicas[-1].leading):
                            raise RuntimeError("the follower became the leader during the run: its figures are "
                                               "the leader's; run again on a quieter machine")
                        result["relayed_calls"] = await asyncio.to_thread(replicas[-1].relayed)
                finally:
                    for replica in replicas:
                        await stop_operator(replica.proc)
    if args.hostile:
        return {"benchmark": "grpc", "mode": "hostile", "machine": machine(),
                "setup": {"bad_calls": args.bad_calls, "bad_tokens": args.bad_tokens, "streams": args.streams,
                          "router_mib": args.router_mib, "through": args.through}, **result}
    return {"benchmark": "grpc", "machine": machine(),
            "setup": {"leases": args.leases, "megabytes": args.megabytes, "frame_kib": args.frame_kib,
                      "pings": args.pings, "through": args.through,
                      "policy": not args.no_policy}, **result}


def _certificates(folder: Path) -> Path:
    """One server certificate for localhost and its CA, which every replica serves and a follower trusts."""
    folder.mkdir()
    ca = CertificateAuthority("lessor-bench-ca")
    ca.issue("lessor-grpc", hosts=("localhost",), server=True).write(folder, "tls")
    (folder / "ca.crt").write_bytes(ca.cert_pem)
    return folder


@dataclass
class _Replica:
    """`lessor run --grpc-port` in a process of its own, advertising its own port to a follower."""

    proc: subprocess.Popen[bytes]
    endpoint: str
    metrics: int
    log: Path

    @classmethod
    async def start(cls, kubeconfig: Path, folder: Path, certs: Path, *, elect: bool) -> _Replica:
        await asyncio.to_thread(folder.mkdir)
        port, health, metrics = free_port(), free_port(), free_port()
        endpoint = f"localhost:{port}"
        proc = start_operator(kubeconfig, folder, health, metrics, *(() if elect else ("--no-leader-elect",)),
                              "--grpc-port", str(port), "--grpc-advertise", endpoint, "--grpc-cert-dir", str(certs))
        await wait_http(f"http://127.0.0.1:{health}/readyz", proc)
        return cls(proc, endpoint, metrics, folder / "operator.log")

    def leading(self) -> bool:
        return is_leader(self.metrics)

    def relayed(self) -> int:
        """Calls this replica relayed to the leader (its `lessor_grpc_forwarded_calls_total`, every method)."""
        return round(sum(float(v) for v in re.findall(r"^lessor_grpc_forwarded_calls_total\{[^}]*\} (\S+)$",
                                                      metrics_text(self.metrics), re.MULTILINE)))

    async def until_leading(self) -> None:
        while not await asyncio.to_thread(self.leading):
            if self.proc.poll() is not None:
                raise RuntimeError("the first replica exited before it led")
            await asyncio.sleep(0.2)


async def _lab(kube: Gateway, *, policy: bool) -> None:
    await kube.create(NAMESPACE, None, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
    if policy:
        await kube.create(POLICY, NS, {"apiVersion": API, "kind": "ExporterAccessPolicy", "metadata": {"name": "all"},
                                       "spec": {"exporterSelector": {}, "policies": [{"from": [{"clientSelector": {}}]}]}})
    await kube.create(CLIENT, NS, {"apiVersion": API, "kind": "Client", "metadata": {"name": "c"}})
    await kube.create(EXPORTER, NS, {"apiVersion": API, "kind": "Exporter",
                                     "metadata": {"name": "e", "labels": {"board": "bench"}}})


async def _token(kube: Gateway, resource: Resource, name: str, word: str) -> str:
    """The token of the object's credential, once the operator wrote it."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        try:
            secret = await kube.get(SECRET, NS, f"{name}-{word}")
            return base64.b64decode(secret["data"]["token"]).decode()
        except ApiError as err:
            if not err.not_found:
                raise
        await asyncio.sleep(0.2)
    raise TimeoutError(f"the operator wrote no credential for {resource.kind} {name}")


async def _measure(args: argparse.Namespace, endpoint: str, ca: bytes, client_token: str, agent_token: str,
                   kube: Gateway) -> dict[str, Any]:
    import grpc
    from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
    from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc, router_pb2_grpc

    client = (("authorization", f"Bearer {client_token}"), ("jumpstarter-kind", "Client"),
              ("jumpstarter-namespace", NS), ("jumpstarter-name", "c"))
    agent = (("authorization", f"Bearer {agent_token}"), ("jumpstarter-kind", "Exporter"),
             ("jumpstarter-namespace", NS), ("jumpstarter-name", "e"))
    async with grpc.aio.secure_channel(endpoint, grpc.ssl_channel_credentials(ca)) as channel:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
        clients = client_pb2_grpc.ClientServiceStub(channel)
        available = jumpstarter_pb2.ReportStatusRequest(status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE"))

        async def granted() -> str:
            """A new lease, Ready: its name, and the seconds from CreateLease to a GetLease that says Ready."""
            lease = client_pb2.Lease(selector="board=bench")
            lease.duration.FromTimedelta(timedelta(minutes=10))
            made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease),
                                             metadata=client)
            while True:
                got = await clients.GetLease(client_pb2.GetLeaseRequest(name=made.name), metadata=client)
                if any(c.type == "Ready" and c.status == "True" for c in got.conditions):
                    return str(made.name)
                await asyncio.sleep(0.005)

        async def released(name: str) -> None:
            await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=name), metadata=client)
            while ((await kube.get(EXPORTER, NS, "e")) or {}).get("status", {}).get("leaseRef"):
                await asyncio.sleep(0.01)

        say(f"{args.leases} leases over gRPC, one after another")
        ready_ms = []
        for i in range(args.leases):
            if i % 10 == 0:
                await controller.ReportStatus(available, metadata=agent)  # a heartbeat: the exporter stays Online
            start = time.perf_counter()
            name = await granted()
            ready_ms.append((time.perf_counter() - start) * 1000)
            await released(name)

        say("the router: a Dial, the exporter's Listen, two streams")
        await controller.ReportStatus(available, metadata=agent)
        name = await granted()
        listen = controller.Listen(jumpstarter_pb2.ListenRequest(lease_name=name.rsplit("/", 1)[-1]), metadata=agent)
        while True:
            try:
                dialled = await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name.rsplit("/", 1)[-1]),
                                                metadata=client)
                break
            except grpc.aio.AioRpcError as err:
                if err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                await asyncio.sleep(0.05)
        announced = await listen.read()
        router = router_pb2_grpc.RouterServiceStub(channel)
        near = router.Stream(metadata=(("authorization", f"Bearer {dialled.router_token}"),))
        far = router.Stream(metadata=(("authorization", f"Bearer {announced.router_token}"),))
        routed = await _router_figures(near, far, args)
        listen.cancel()
        await released(name)
    direct = await _tcp_figures(args)
    return {
        "create_to_ready_ms": {"p50": round(percentile(ready_ms, 50), 1), "p99": round(percentile(ready_ms, 99), 1),
                               "mean": round(statistics.fmean(ready_ms), 1)},
        "router": routed,
        "direct_tcp": direct,
        "router_to_tcp_throughput": round(routed["megabytes_per_second"] / max(direct["megabytes_per_second"], 1e-9), 4),
        "added_latency_per_frame_us": round((routed["round_trip_us"]["p50"] - direct["round_trip_us"]["p50"]) / 2, 1),
        "explained": "create_to_ready_ms: CreateLease to the first GetLease that says Ready (polled every 5 ms), one "
                     "lease at a time; router: one way in frames of frame_kib, then round trips of a 16-byte frame "
                     "(client → router → exporter → router → client); direct_tcp: the same over one loopback TCP "
                     "connection; added_latency_per_frame_us: half the difference of the round trips' medians",
    }


async def _router_figures(near: Any, far: Any, args: argparse.Namespace) -> dict[str, Any]:
    from jumpstarter_protocol.jumpstarter.v1 import router_pb2

    frame = b"x" * (args.frame_kib * 1024)
    frames = max(1, args.megabytes * 1024 // args.frame_kib)

    async def send() -> None:
        for _ in range(frames):
            await near.write(router_pb2.StreamRequest(payload=frame))

    async def receive() -> None:
        got = 0
        while got < frames * len(frame):
            got += len((await far.read()).payload)

    start = time.perf_counter()
    await asyncio.gather(send(), receive())
    seconds = time.perf_counter() - start
    trips = []
    for _ in range(args.pings):
        start = time.perf_counter()
        await near.write(router_pb2.StreamRequest(payload=b"p" * 16))
        await far.read()
        await far.write(router_pb2.StreamRequest(payload=b"q" * 16))
        await near.read()
        trips.append((time.perf_counter() - start) * 1e6)
    near.cancel()
    far.cancel()
    return {"megabytes_per_second": round(frames * len(frame) / seconds / 1e6, 1), "round_trip_us": _spread(trips)}


async def _tcp_figures(args: argparse.Namespace) -> dict[str, Any]:
    """The same bytes and round trips over one loopback TCP connection, for comparison."""
    frame = b"x" * (args.frame_kib * 1024)
    frames = max(1, args.megabytes * 1024 // args.frame_kib)
    accepted: asyncio.Queue[tuple[asyncio.StreamReader, asyncio.StreamWriter]] = asyncio.Queue()
    server = await asyncio.start_server(lambda r, w: accepted.put_nowait((r, w)), "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    far_reader, far_writer = await accepted.get()

    async def send() -> None:
        for _ in range(frames):
            writer.write(frame)
            await writer.drain()

    start = time.perf_counter()
    await asyncio.gather(send(), far_reader.readexactly(frames * len(frame)))
    seconds = time.perf_counter() - start
    trips = []
    for _ in range(args.pings):
        start = time.perf_counter()
        writer.write(b"p" * 16)
        await writer.drain()
        await far_reader.readexactly(16)
        far_writer.write(b"q" * 16)
        await far_writer.drain()
        await reader.readexactly(16)
        trips.append((time.perf_counter() - start) * 1e6)
    writer.close()
    far_writer.close()
    server.close()
    return {"megabytes_per_second": round(frames * len(frame) / seconds / 1e6, 1), "round_trip_us": _spread(trips)}


def _spread(samples: list[float]) -> dict[str, float]:
    return {"p50": round(percentile(samples, 50), 1), "p99": round(percentile(samples, 99), 1)}
