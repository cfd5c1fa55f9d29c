"""A mailbox that takes its senders' tenants in turn, keeps each tenant's order, and treats a message of no
tenant as a barrier (handled after all before it, before all after it)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lessor.mailbox import Actor, ActorSystem
from lessor.mailbox.envelope import Envelope
from lessor.mailbox.fair_inbox import FairInbox


def tenant(message: Any) -> str | None:
    return message[0] if isinstance(message, tuple) else None


def drained(inbox: FairInbox) -> list[Any]:
    found = []
    while inbox:
        found.append(inbox.popleft().message)
    return found


def test_tenants_take_turns_and_each_keeps_its_order() -> None:
    inbox = FairInbox(tenant)
    for i in range(4):
        inbox.append(Envelope(("storm", i), None, None, None))
    inbox.append(Envelope(("canary", 0), None, None, None))
    assert len(inbox) == 5 and inbox[0].message == ("storm", 0)
    assert drained(inbox) == [("storm", 0), ("canary", 0), ("storm", 1), ("storm", 2), ("storm", 3)]


def test_a_message_of_no_tenant_waits_for_all_before_it_and_all_after_it_wait_for_it() -> None:
    inbox = FairInbox(tenant)
    for message in [("a", 0), ("a", 1), ("b", 0), "synced", ("b", 1), ("c", 0), ("a", 2)]:
        inbox.append(Envelope(message, None, None, None))
    assert [e.message for e in inbox] == [("a", 0), ("a", 1), ("b", 0), "synced", ("b", 1), ("c", 0), ("a", 2)]
    order = drained(inbox)
    assert set(order[:3]) == {("a", 0), ("a", 1), ("b", 0)} and order[3] == "synced"
    assert order.index(("a", 0)) < order.index(("a", 1))
    assert set(order[4:]) == {("b", 1), ("c", 0), ("a", 2)}
    with pytest.raises(IndexError):
        inbox.popleft()


async def test_an_actor_registered_with_a_fair_key_answers_a_quiet_tenant_before_a_busy_ones_backlog() -> None:
    handled: list[Any] = []

    class Serving(Actor):
        async def receive(self, message: Any) -> Any:
            handled.append(message)
            await asyncio.sleep(0)
            return message

    async with ActorSystem() as system:
        system.register("serve", lambda _: Serving(), capacity=10_000, fair_key=tenant)
        for i in range(200):
            system.tell("serve/x", ("storm", i))
        answer = await system.ask("serve/x", ("canary", 0))
        assert answer == ("canary", 0)
        assert handled.index(("canary", 0)) <= 2  # not behind the storm's 200
