"""UpdateLease's times, reconciled as the controller of the pinned version does, and tokens' expiry (no API server
needed)."""

from __future__ import annotations

import datetime as dt
import time

import grpc
import pytest
from jumpstarter_protocol.jumpstarter.client.v1 import client_pb2

from lessor.jumpstarter.guard import Refusal
from lessor.jumpstarter.messages import time_update as _time_update
from lessor.model.views.leasing import LeaseView

WAITING = {"metadata": {"namespace": "lab", "name": "l"}, "spec": {"duration": "10m"}, "status": {}}
BEGIN = dt.datetime(2030, 1, 1, 12, 0, tzinfo=dt.UTC)


def test_begin_and_end_give_the_duration_and_end_and_duration_give_the_begin() -> None:
    both = client_pb2.Lease()
    both.begin_time.FromDatetime(BEGIN)
    both.end_time.FromDatetime(BEGIN + dt.timedelta(hours=2))
    assert _time_update(LeaseView.of({**WAITING, "spec": {}}), both) == {
        "duration": "2h", "beginTime": "2030-01-01T12:00:00Z", "endTime": "2030-01-01T14:00:00Z"}
    end_only = client_pb2.Lease()
    end_only.end_time.FromDatetime(BEGIN)
    assert _time_update(LeaseView.of(WAITING), end_only) == {
        "duration": "10m", "beginTime": "2030-01-01T11:50:00Z", "endTime": "2030-01-01T12:00:00Z"}
    assert _time_update(LeaseView.of(WAITING), client_pb2.Lease()) == {}  # nothing about times: the spec's stay


def test_conflicting_times_and_a_begin_after_the_start_are_refused_with_their_reason() -> None:
    conflicting = client_pb2.Lease()
    conflicting.begin_time.FromDatetime(BEGIN)
    conflicting.end_time.FromDatetime(BEGIN + dt.timedelta(hours=2))
    conflicting.duration.FromTimedelta(dt.timedelta(hours=1))
    with pytest.raises(Refusal) as caught:
        _time_update(LeaseView.of(WAITING), conflicting)
    assert caught.value.code == grpc.StatusCode.INVALID_ARGUMENT and "conflicts" in caught.value.message
    started = {**WAITING, "status": {"exporterRef": {"name": "board"}}}
    moved = client_pb2.Lease()
    moved.begin_time.FromDatetime(BEGIN)
    with pytest.raises(Refusal) as caught:
        _time_update(LeaseView.of(started), moved)
    assert caught.value.code == grpc.StatusCode.FAILED_PRECONDITION
    assert caught.value.message == "cannot update begin_time: lease lab/l has already started"


def test_a_token_minted_with_a_lifetime_carries_its_expiry() -> None:
    from cryptography.hazmat.primitives.asymmetric import ec

    from lessor.jumpstarter.tokens import Subject, mint, token_expiry, verify

    key = ec.generate_private_key(ec.SECP256R1())
    subject = Subject("client", "lab", "a", "u-1")
    now = int(time.time())
    token = mint(key, subject, now=now, lifetime=3600)
    assert token_expiry(token) == dt.datetime.fromtimestamp(now + 3600, dt.UTC)
    assert verify(key.public_key(), token) == subject
    assert token_expiry(mint(key, subject)) is None  # no lifetime: no exp, as before
