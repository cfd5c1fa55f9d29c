"""What any caller of the gRPC port can send, answered with the right code and no traceback (issue 43):
bodies that do not decode, crafted tokens, a request the API server will never take. Against a real API
server and an operator serving the port (the `lab` of test_grpc.py)."""

from __future__ import annotations

import asyncio
import base64
import logging
import re
from datetime import timedelta
from typing import Any

import grpc
import pytest
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2, client_pb2_grpc

from lessor.actors.api import ApiFailure
from lessor.gateway.resources import LEASE
from lessor.jumpstarter.guard import _api_code
from lessor.tools.bench.common import metrics_text
from tests.polling import get
from tests.jumpstarter.test_grpc import NS, Lab, a_client, channel, credentials, lab, metadata, token_of

__all__ = ["lab"]  # the module's fixture, shared

UNARY = ("/jumpstarter.v1.ControllerService/Register", "/jumpstarter.client.v1.ClientService/ListLeases",
         "/jumpstarter.client.v1.ClientService/CreateLease")
GARBAGE = (b"\xff" * 7, b"\x0a\xff\xff\xff\xff\x0f", b"\x12\x05ab", b"\x0a\x02\xc3\x28", bytes(range(256)))


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


async def _raw(ch: grpc.aio.Channel, method: str, body: bytes, md: Any = ()) -> tuple[grpc.StatusCode, str]:
    call = ch.unary_unary(method, request_serializer=None, response_deserializer=None)
    with pytest.raises(grpc.aio.AioRpcError) as caught:
        await call(body, metadata=md)
    return caught.value.code(), caught.value.details() or ""


def _tracebacks(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR or r.exc_info]


async def test_a_body_that_does_not_decode_is_invalid_argument_before_any_work(
        lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    async with channel(lab) as ch:
        for method in UNARY:
            for body in GARBAGE:
                code, details = await _raw(ch, method, body)  # no token at all: judged before authentication
                assert code == grpc.StatusCode.INVALID_ARGUMENT, (method, body, code, details)
                assert method in details and "is not a jumpstarter." in details, details
        # A server stream's request too (Status).
        status = ch.unary_stream("/jumpstarter.v1.ControllerService/Status", request_serializer=None,
                                 response_deserializer=None)(b"\xff\xff")
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await status.read()
        assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert _tracebacks(caplog) == []
    refused = await _refused(lab)
    assert all(refused.get((method, "INVALID_ARGUMENT"), 0) >= len(GARBAGE) for method in UNARY), refused


async def _refused(lab: Lab) -> dict[tuple[str, str], float]:
    """`lessor_grpc_refused_calls_total` by (method, code), from the operator's /metrics (this loop serves it)."""
    found = re.findall(r'lessor_grpc_refused_calls_total\{code="([^"]*)",method="([^"]*)"\} (\S+)',
                       await asyncio.to_thread(metrics_text, lab.metrics_port))
    return {(method, code): float(value) for code, method, value in found}


async def test_crafted_tokens_are_unauthenticated_with_the_reason_and_no_traceback(
        lab: Lab, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    await a_client(lab, "mallory")  # lessor has a signing key, so each token is checked against it
    parent = f"namespaces/{NS}"
    nested = _b64(b"[" * 1500)
    crafted = {
        f"{nested}.{_b64(b'{}')}.{_b64(bytes(64))}": "signature",  # nested JSON is never parsed unsigned
        f"{_b64(b'{}')}.{nested}.{_b64(bytes(64))}": "signature",
        f"{nested}.{nested}.sig": "64 bytes",
        "a.b": "not a JWT",
        "x" * 6_000: "more than",
    }
    async with channel(lab) as ch:
        clients = client_pb2_grpc.ClientServiceStub(ch)
        for token, reason in crafted.items():
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await clients.ListLeases(client_pb2.ListLeasesRequest(parent=parent),
                                         metadata=metadata("Client", "mallory", token))
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED, (token[:40], caught.value.details())
            assert reason in (caught.value.details() or ""), caught.value.details()
    assert _tracebacks(caplog) == []
    assert (await _refused(lab)).get(("/jumpstarter.client.v1.ClientService/ListLeases", "UNAUTHENTICATED"), 0) >= len(crafted)


async def test_a_request_the_api_server_will_never_take_is_invalid_argument_not_unavailable(lab: Lab) -> None:
    """413 (too large) is the caller's to change: UNAVAILABLE would have the tools retry it without end."""
    zed = token_of(await credentials(lab, "client", (await a_client(lab, "zed"))["metadata"]["name"]))
    lease = client_pb2.Lease(selector="board=x86", tags={f"t{i}": "v" * 1000 for i in range(3200)})
    lease.duration.FromTimedelta(timedelta(minutes=5))
    async with channel(lab) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client_pb2_grpc.ClientServiceStub(ch).CreateLease(
                client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease),
                metadata=metadata("Client", "zed", zed))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT, caught.value.details()
    assert "Kubernetes API refused" in (caught.value.details() or "")


def test_api_answers_map_to_the_codes_a_caller_can_act_on() -> None:
    for status, code in ((413, grpc.StatusCode.INVALID_ARGUMENT), (422, grpc.StatusCode.INVALID_ARGUMENT),
                         (403, grpc.StatusCode.PERMISSION_DENIED), (503, grpc.StatusCode.UNAVAILABLE)):
        assert _api_code(ApiFailure("refused", status=status)) == code, status


async def test_a_reader_that_never_reads_holds_the_router_to_its_byte_bound() -> None:
    """A side that sends 3.5 MiB frames to a side that never reads: the direction holds at most its byte
    bound (and one frame more), and its writer waits; the server held 245 MB before (64 frames)."""
    from jumpstarter_protocol.jumpstarter.v1 import router_pb2

    from lessor.jumpstarter.router import BYTES_IN_FLIGHT, _Frames

    frames = _Frames()
    frame = router_pb2.StreamRequest(payload=b"x" * (3_500 * 1024))
    sent = 0

    async def writer() -> None:
        nonlocal sent
        while True:
            await frames.put(frame)
            sent += 1

    task = asyncio.create_task(writer())
    for _ in range(50):
        await asyncio.sleep(0)
    assert not task.done() and frames.held <= BYTES_IN_FLIGHT + len(frame.payload), frames.held
    held = sent
    await frames.get()  # the reader reads one: the writer may send one more, not the rest
    for _ in range(50):
        await asyncio.sleep(0)
    assert sent == held + 1 and frames.held <= BYTES_IN_FLIGHT + len(frame.payload)
    task.cancel()


async def test_a_lease_selector_past_the_limit_is_invalid_argument_naming_it_and_nothing_is_created(lab: Lab) -> None:
    """The webhook's and the operator's rule (lessor.model.selectors), the same over gRPC: a selector of
    10,000 labels (118 KB) was created and stored."""
    yan = token_of(await credentials(lab, "client", (await a_client(lab, "yan"))["metadata"]["name"]))
    lease = client_pb2.Lease(selector=",".join(f"k{i}=v" for i in range(10_000)), tags={})
    lease.duration.FromTimedelta(timedelta(minutes=5))
    async with channel(lab) as ch:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await client_pb2_grpc.ClientServiceStub(ch).CreateLease(
                client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease, lease_id="huge"),
                metadata=metadata("Client", "yan", yan))
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert "lease.selector" in (caught.value.details() or "") and "limit of 32" in (caught.value.details() or "")
    assert await get(lab.kube, LEASE, NS, "huge") is None


async def test_a_client_holds_at_most_its_pairs_and_gets_them_back_when_their_streams_end(lab: Lab) -> None:
    from jumpstarter_protocol.jumpstarter.v1 import common_pb2, jumpstarter_pb2, jumpstarter_pb2_grpc, router_pb2_grpc

    from lessor.jumpstarter.router import PAIRS_PER_CLIENT
    from tests.jumpstarter.test_grpc import an_exporter, ready
    from tests.polling import until

    await an_exporter(lab, "board-h", {"board": "hostile"})
    agent = metadata("Exporter", "board-h", token_of(await credentials(lab, "exporter", "board-h")))
    await a_client(lab, "hoarder")
    hoarder = metadata("Client", "hoarder", token_of(await credentials(lab, "client", "hoarder")))
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        await controller.ReportStatus(jumpstarter_pb2.ReportStatusRequest(
            status=common_pb2.ExporterStatus.Value("EXPORTER_STATUS_AVAILABLE")), metadata=agent)
        lease = client_pb2.Lease(selector="board=hostile")
        lease.duration.FromTimedelta(timedelta(minutes=5))
        made = await client_pb2_grpc.ClientServiceStub(ch).CreateLease(
            client_pb2.CreateLeaseRequest(parent=f"namespaces/{NS}", lease=lease), metadata=hoarder)
        name = made.name.split("/")[-1]
        await until(lab.kube, LEASE, NS, name, ready)
        listen = controller.Listen(jumpstarter_pb2.ListenRequest(lease_name=name), metadata=agent)
        dials = []
        while len(dials) < PAIRS_PER_CLIENT:
            try:
                dials.append(await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=hoarder))
            except grpc.aio.AioRpcError as err:  # until the exporter's Listen is open
                assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
                await asyncio.sleep(0.1)
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=hoarder)
        assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
        assert f"holds {PAIRS_PER_CLIENT} router connections" in (caught.value.details() or "")
        # One pair's two streams come and go: the client may dial again.
        announced = [await listen.read() for _ in dials]
        router = router_pb2_grpc.RouterServiceStub(ch)
        sides = [router.Stream(metadata=(("authorization", f"Bearer {dials[0].router_token}"),)),
                 router.Stream(metadata=(("authorization", f"Bearer {announced[0].router_token}"),))]
        for side in sides:
            await side.done_writing()
        for side in sides:
            while await side.read() != grpc.aio.EOF:
                pass
        again = await controller.Dial(jumpstarter_pb2.DialRequest(lease_name=name), metadata=hoarder)
        assert again.router_token
        listen.cancel()


async def test_a_caller_holds_at_most_its_streams_others_are_untouched_and_strangers_hold_none(lab: Lab) -> None:
    """One Exporter's token opening stream after stream: past its bound, RESOURCE_EXHAUSTED naming it, while
    another exporter still streams, a caller without a valid token holds none, and a stream closed is one
    the caller may open again."""
    from jumpstarter_protocol.jumpstarter.v1 import jumpstarter_pb2, jumpstarter_pb2_grpc

    from lessor.jumpstarter.quota import STREAMS_PER_CALLER
    from tests.jumpstarter.test_grpc import an_exporter
    from tests.slowness import scaled

    await an_exporter(lab, "flooder", {"board": "flood"})
    await an_exporter(lab, "bystander", {"board": "quiet"})
    flooder = metadata("Exporter", "flooder", token_of(await credentials(lab, "exporter", "flooder")))
    bystander = metadata("Exporter", "bystander", token_of(await credentials(lab, "exporter", "bystander")))
    async with channel(lab) as ch:
        controller = jumpstarter_pb2_grpc.ControllerServiceStub(ch)
        held = [controller.Status(jumpstarter_pb2.StatusRequest(), metadata=flooder) for _ in range(STREAMS_PER_CALLER)]
        for stream in held:
            assert not (await stream.read()).leased  # open and answered: held by the server
        for extra in (controller.Status(jumpstarter_pb2.StatusRequest(), metadata=flooder),
                      controller.Listen(jumpstarter_pb2.ListenRequest(), metadata=flooder)):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await extra.read()
            assert caught.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, caught.value.details()
            assert f"holds {STREAMS_PER_CALLER} open streams" in (caught.value.details() or "")
        other = controller.Status(jumpstarter_pb2.StatusRequest(), metadata=bystander)
        assert not (await other.read()).leased  # another caller is untouched
        for _ in range(3):  # without a valid token: refused at once, nothing held
            stranger = controller.Status(jumpstarter_pb2.StatusRequest(),
                                         metadata=metadata("Exporter", "flooder", "not.a.token"))
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stranger.read()
            assert caught.value.code() == grpc.StatusCode.UNAUTHENTICATED
        held.pop().cancel()
        deadline = asyncio.get_running_loop().time() + scaled(10)
        while True:  # the server sees the cancellation a moment later
            again = controller.Status(jumpstarter_pb2.StatusRequest(), metadata=flooder)
            try:
                assert not (await again.read()).leased
                break
            except grpc.aio.AioRpcError as err:
                assert err.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, err.details()
                assert asyncio.get_running_loop().time() < deadline, "the closed stream was never given back"
                await asyncio.sleep(0.1)
        for stream in (*held, other, again):
            stream.cancel()
