"""What a starting lease asks of `InFlight` (actors/inflight.py): whether a commit naming it may still land
unseen. It must say yes for as long as one can (else a new incarnation takes a second exporter), and no once
none can (else every new lease of a storm asks every candidate where it stands)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest

from lessor.actors.inflight import InFlight

KEY = ("Exporter", "lab", "e1")
LEASE = ("Lease", "lab", "l1")


async def _answer(gate: asyncio.Event, result: Any) -> Any:
    await gate.wait()
    if isinstance(result, Exception):
        raise result
    return result


async def test_a_commit_names_its_lease_until_its_sender_has_the_answer() -> None:
    inflight, gate = InFlight(), asyncio.Event()
    sender = asyncio.ensure_future(inflight.run(KEY, lambda: _answer(gate, {"status": {}}), naming=LEASE))
    await asyncio.sleep(0)
    assert inflight.may_name(LEASE)
    assert not inflight.may_name(("Lease", "lab", "l2"))  # another lease's commit is not this one's
    gate.set()
    assert await sender == {"status": {}}
    assert not inflight.may_name(LEASE)


async def test_a_commit_whose_sender_was_killed_names_its_lease_until_the_next_incarnation_reads_it() -> None:
    inflight, gate = InFlight(), asyncio.Event()
    sender = asyncio.ensure_future(inflight.run(KEY, lambda: _answer(gate, {"landed": True}), naming=LEASE))
    await asyncio.sleep(0)
    sender.cancel()  # the exporter actor killed mid-commit: the write goes on
    with pytest.raises(asyncio.CancelledError):
        await sender
    assert inflight.may_name(LEASE)
    gate.set()
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    assert inflight.may_name(LEASE)  # landed, but no incarnation of the exporter has seen it yet
    written: Mapping[str, Any] | None = await inflight.settled(KEY)
    assert written == {"landed": True}
    assert not inflight.may_name(LEASE)


async def test_a_commit_that_failed_names_nothing() -> None:
    inflight, gate = InFlight(), asyncio.Event()
    sender = asyncio.ensure_future(inflight.run(KEY, lambda: _answer(gate, RuntimeError("409")), naming=LEASE))
    await asyncio.sleep(0)
    gate.set()
    with pytest.raises(RuntimeError):
        await sender
    assert not inflight.may_name(LEASE)
    assert await inflight.settled(KEY) is None


async def test_an_unread_answer_superseded_by_a_newer_one_names_only_the_newer_lease() -> None:
    inflight = InFlight()
    for lease in (LEASE, ("Lease", "lab", "l2")):
        gate = asyncio.Event()
        sender = asyncio.ensure_future(inflight.run(KEY, lambda gate=gate, lease=lease: _answer(gate, {"n": lease}),
                                                    naming=lease))
        await asyncio.sleep(0)
        sender.cancel()
        gate.set()
        with pytest.raises(asyncio.CancelledError):
            await sender
        await asyncio.sleep(0)
    assert not inflight.may_name(LEASE)
    assert inflight.may_name(("Lease", "lab", "l2"))
    assert await inflight.settled(KEY) == {"n": ("Lease", "lab", "l2")}
    assert not inflight.may_name(("Lease", "lab", "l2"))
