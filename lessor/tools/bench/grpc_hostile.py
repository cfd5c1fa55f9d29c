"""`lessor bench grpc --hostile`: what any caller of the gRPC port can send, against a running lessor.

Probes, one after another, each while a legitimate client keeps calling CreateLease (and DeleteLease): bodies
that do not decode, crafted tokens (and forged router tokens), a flood of long-lived streams from one
Exporter's token and from callers without one, and a router pair whose reader never reads while its writer
sends 3.5 MiB frames. Per probe: the status codes answered, the operator's log lines and tracebacks per bad
call, its RSS before, during and after, and the legitimate client's CreateLease latency, against a quiet
phase before the first probe.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import collections
import contextlib
import time
from collections.abc import Awaitable, Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

from lessor.tools.bench.common import percentile, process_stats, say

NS = "bench"
FRAME = 3_500 * 1024
"""A router frame the size the issue's probe sent (frames may be 4 MiB)."""

UNARY = ("/jumpstarter.v1.ControllerService/Register", "/jumpstarter.v1.ControllerService/Dial",
         "/jumpstarter.client.v1.ClientService/ListLeases", "/jumpstarter.client.v1.ClientService/CreateLease")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--hostile", action="store_true",
                        help="instead of the figures above, the hostile probes: malformed bodies, crafted tokens, "
                             "stream floods, a router reader that never reads (see docs/benchmarks.md)")
    parser.add_argument("--bad-calls", type=int, default=1000, help="with --hostile: undecodable bodies sent "
                        "(default: %(default)s)")
    parser.add_argument("--bad-tokens", type=int, default=100, help="with --hostile: calls with crafted tokens "
                        "(default: %(default)s)")
    parser.add_argument("--streams", type=int, default=200, help="with --hostile: Status streams one exporter "
                        "opens, and as many without a token (default: %(default)s)")
    parser.add_argument("--router-mib", type=int, default=256, help="with --hostile: MiB the router's writer "
                        "tries to send to a reader that never reads (default: %(default)s)")


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _garbage(i: int) -> bytes:
    """Bodies that do not decode: an unending varint, truncated fields, wrong wire types, bad UTF-8, a 2 GiB
    length (none may happen to decode, as random bytes can, so that every answer is INVALID_ARGUMENT)."""
    return (b"\xff" * (1 + i % 64), b"\x0a\xff\xff\xff\xff\x07", b"\x12\x05ab", b"\x0a\x02\xc3\x28",
            b"\x0f" * 9, bytes(range(256)))[i % 6]


def _crafted(token: str) -> list[tuple[str, str]]:
    """(kind, token) pairs no call may accept, built from a real one."""
    nested = _b64(b"[" * 1500)
    head, body, _ = token.split(".")
    return [("Client", f"{nested}.{_b64(b'{}')}.{_b64(bytes(64))}"), ("Client", f"{head}.{nested}.{_b64(bytes(64))}"),
            ("Client", f"{head}.{body}.{_b64(bytes(64))}"), ("Client", "x" * 6_000), ("Client", "a.b"),
            ("Exporter", token), ("Client", "")]


class Operator:
    """The operator process's RSS and log, read between probes."""

    def __init__(self, pid: int, log: Path) -> None:
        self.pid, self.log = pid, log

    def rss_mb(self) -> float:
        return round(process_stats(self.pid)[0] / 1e6, 1)

    def lines(self) -> tuple[int, int]:
        text = self.log.read_text(errors="replace")
        return text.count("\n"), text.count("Traceback")


class _Legit:
    """A legitimate client calling CreateLease then DeleteLease in a loop; its CreateLease latencies."""

    def __init__(self, clients: Any, md: Any) -> None:
        self.clients, self.md = clients, md
        self.samples: list[float] = []

    async def loop(self) -> None:
        from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2

        lease = client_pb2.Lease(selector="board=nowhere")
        lease.duration.FromTimedelta(timedelta(minutes=5))
        while True:
            start = time.perf_counter()
            made = await self.clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}",
                                                                               lease=lease), metadata=self.md)
            self.samples.append((time.perf_counter() - start) * 1000)
            await self.clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=made.name), metadata=self.md)
            await asyncio.sleep(0.05)

    @contextlib.asynccontextmanager
    async def running(self) -> Any:
        self.samples = []
        task = asyncio.create_task(self.loop())
        try:
            yield
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if task.done() and not task.cancelled() and task.exception() is not None:
                raise task.exception()  # type: ignore[misc]

    def figures(self) -> dict[str, float]:
        samples = self.samples or [0.0]
        return {"p50": round(percentile(samples, 50), 1), "p99": round(percentile(samples, 99), 1),
                "calls": len(self.samples)}


def _code(err: BaseException) -> str:
    import grpc

    return err.code().name if isinstance(err, grpc.aio.AioRpcError) else type(err).__name__


async def hostile(args: argparse.Namespace, endpoint: str, ca: bytes, client_token: str, agent_token: str,
                  operator: Operator) -> dict[str, Any]:
    import grpc
    from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
    from jumpstarter_protocol.jumpstarter.v1 import jumpstarter_pb2, jumpstarter_pb2_grpc

    def md(kind: str, name: str, token: str) -> tuple[tuple[str, str], ...]:
        return (("authorization", f"Bearer {token}"), ("jumpstarter-kind", kind), ("jumpstarter-namespace", NS),
                ("jumpstarter-name", name))

    client, agent = md("Client", "c", client_token), md("Exporter", "e", agent_token)
    async with grpc.aio.secure_channel(endpoint, grpc.ssl_channel_credentials(ca)) as channel, \
            grpc.aio.secure_channel(endpoint, grpc.ssl_channel_credentials(ca)) as quiet_channel:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(channel)
        legit = _Legit(client_pb2_grpc.ClientServiceStub(quiet_channel), client)
        probes: dict[str, Any] = {}

        async def probe(name: str, bad_calls: int, work: Callable[[], Awaitable[tuple[collections.Counter[str],
                                                                                        dict[str, Any]]]]) -> None:
            say(f"probe {name}")
            lines, tracebacks = await asyncio.to_thread(operator.lines)
            before = await asyncio.to_thread(operator.rss_mb)
            async with legit.running():
                started = time.monotonic()
                codes, extra = await work()
                await asyncio.sleep(max(0.0, 2.0 - (time.monotonic() - started)))  # a few legitimate calls at least
            await asyncio.sleep(1)
            after_lines, after_tracebacks = await asyncio.to_thread(operator.lines)
            probes[name] = {"bad_calls": bad_calls, "codes": dict(sorted(codes.items())),
                            "log_lines_per_bad_call": round((after_lines - lines) / max(bad_calls, 1), 4),
                            "tracebacks": after_tracebacks - tracebacks,
                            "rss_mb": {"before": before, **extra.pop("rss_mb", {}),
                                       "after": await asyncio.to_thread(operator.rss_mb)},
                            "legit_create_lease_ms": legit.figures(), **extra}

        async def bodies() -> tuple[collections.Counter[str], dict[str, Any]]:
            codes: collections.Counter[str] = collections.Counter()

            async def one(i: int) -> None:
                call = channel.unary_unary(UNARY[i % len(UNARY)], request_serializer=None, response_deserializer=None)
                try:
                    await call(_garbage(i), metadata=client if i % 2 else ())
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as err:
                    codes[_code(err)] += 1

            for start in range(0, args.bad_calls, 50):
                await asyncio.gather(*(one(i) for i in range(start, min(start + 50, args.bad_calls))))
            return codes, {}

        async def tokens() -> tuple[collections.Counter[str], dict[str, Any]]:
            codes: collections.Counter[str] = collections.Counter()
            crafted = _crafted(client_token)
            clients = client_pb2_grpc.ClientServiceStub(channel)
            for i in range(args.bad_tokens):
                kind, token = crafted[i % len(crafted)]
                try:
                    await clients.ListLeases(client_pb2.ListLeasesRequest(parent=f"namespaces/{NS}"),
                                             metadata=md(kind, "c", token))
                    codes["OK"] += 1
                except grpc.aio.AioRpcError as err:
                    codes[_code(err)] += 1
            return codes, {}

        async def streams() -> tuple[collections.Counter[str], dict[str, Any]]:
            codes: collections.Counter[str] = collections.Counter()
            opened: list[Any] = []

            async def one(metadata: Any) -> None:
                call = controller.Status(jumpstarter_pb2.StatusRequest(), metadata=metadata)
                opened.append(call)
                try:
                    await call.read()
                    codes["OK (held)"] += 1
                except grpc.aio.AioRpcError as err:
                    codes[_code(err)] += 1

            await asyncio.gather(*(one(agent) for _ in range(args.streams)),
                                 *(one(md("Exporter", "e", "forged.token.x")) for _ in range(args.streams)))
            during = await asyncio.to_thread(operator.rss_mb)
            for call in opened:
                call.cancel()
            return codes, {"rss_mb": {"during": during}}

        async def router() -> tuple[collections.Counter[str], dict[str, Any]]:
            return await _router_probe(args, channel, controller, client, agent, operator)

        async with legit.running():
            await asyncio.sleep(3)
        quiet = legit.figures()
        await probe("malformed_bodies", args.bad_calls, bodies)
        await probe("crafted_tokens", args.bad_tokens, tokens)
        await probe("stream_flood", 2 * args.streams, streams)
        await probe("router_never_reads", 1, router)
    bad = sum(n for p in probes.values() for code, n in p["codes"].items() if code in ("UNKNOWN", "INTERNAL"))
    return {"quiet": {"legit_create_lease_ms": quiet}, "probes": probes, "unknown_or_internal": bad,
            "explained": "per probe: codes answered (a stream held open counts as 'OK (held)'); the operator's log "
                         "lines and tracebacks during the probe per bad call (the legitimate client's own lines "
                         "included); RSS of the operator before, during and about 1 s after; the legitimate "
                         "client's CreateLease latency meanwhile, against quiet (before any probe)"}


async def _router_probe(args: argparse.Namespace, channel: Any, controller: Any, client: Any, agent: Any,
                        operator: Operator) -> tuple[collections.Counter[str], dict[str, Any]]:
    """A granted lease's pair whose exporter side never reads, while the client side sends 3.5 MiB frames."""
    import grpc
    from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc
    from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, router_pb2, router_pb2_grpc

    clients = client_pb2_grpc.ClientServiceStub(channel)
    await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
        status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)
    lease = client_pb2.Lease(selector="board=bench")
    lease.duration.FromTimedelta(timedelta(minutes=10))
    made = await clients.CreateLease(client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease),
                                     metadata=client)
    name = made.name.rsplit("/", 1)[-1]
    deadline = time.monotonic() + 120
    while not any(c.type == "Ready" and c.status == "True" for c in
                  (await clients.GetLease(client_pb2.GetLeaseRequest(name=made.name), metadata=client)).conditions):
        if time.monotonic() > deadline:
            raise TimeoutError(f"lease {name} was never Ready")
        await asyncio.sleep(0.1)
    listen = controller.Listen(jumpstarter_pb2.ListenRequest(lease_name=name), metadata=agent)
    while True:  # until the exporter's Listen is open
        try:
            dialled = await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=client)
            break
        except grpc.aio.AioRpcError as err:
            if err.code() != grpc.StatusCode.UNAVAILABLE or time.monotonic() > deadline:
                raise
            await asyncio.sleep(0.1)
    announced = await listen.read()
    stub = router_pb2_grpc.RouterServiceStub(channel)
    near = stub.Stream(metadata=(("authorization", f"Bearer {dialled.router_token}"),))
    far = stub.Stream(metadata=(("authorization", f"Bearer {announced.router_token}"),))  # never read
    frame = router_pb2.StreamRequest(payload=b"x" * FRAME)
    sent = 0

    async def write() -> None:
        nonlocal sent
        for _ in range(max(1, args.router_mib * 1024 * 1024 // FRAME)):
            await near.write(frame)
            sent += 1

    writer = asyncio.create_task(write())
    last, still = -1, 0.0
    while not writer.done() and still < 3.0:  # until the writer is held back (or has sent all)
        await asyncio.sleep(0.5)
        still = still + 0.5 if sent == last else 0.0
        last = sent
    during = await asyncio.to_thread(operator.rss_mb)
    writer.cancel()
    for call in (near, far, listen):
        call.cancel()
    with contextlib.suppress(asyncio.CancelledError, grpc.aio.AioRpcError):
        await writer
    await clients.DeleteLease(client_pb2.DeleteLeaseRequest(name=made.name), metadata=client)
    seen = [during]
    for _ in range(30):  # memory given back within 30 s of the pair's end: until it has not moved for 3 s
        await asyncio.sleep(1)
        seen.append(await asyncio.to_thread(operator.rss_mb))
        if len(seen) > 5 and max(seen[-4:]) - min(seen[-4:]) < 1:
            break
    return collections.Counter(), {"rss_mb": {"during": during, "settled": seen[-1]}, "settled_after_s": len(seen) - 1,
                                   "megabytes_tried": args.router_mib,
                                   "megabytes_accepted": round(sent * FRAME / 1e6, 1)}
