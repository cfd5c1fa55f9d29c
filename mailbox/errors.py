"""Errors a sender can see: every failed delivery or reply surfaces as one of these."""

from __future__ import annotations


class MailboxError(Exception):
    """Base of the runtime's own errors, so callers can catch them apart from the app's."""

    def __init__(self, address: str, detail: str) -> None:
        super().__init__(f"{address}: {detail}")
        self.address = address


class MailboxFull(MailboxError):
    """The addressed actor's bounded mailbox is full; the message was not queued."""

    def __init__(self, address: str, capacity: int) -> None:
        super().__init__(address, f"mailbox full ({capacity} messages waiting)")
        self.capacity = capacity


class Undeliverable(MailboxError):
    """An ask's message went to dead letters, so no reply will ever come."""

    def __init__(self, address: str, reason: str) -> None:
        super().__init__(address, f"undeliverable ({reason})")
        self.reason = reason


class ActorKilled(MailboxError):
    """The actor was killed while handling the message; it is restarted, the message is not replayed."""

    def __init__(self, address: str) -> None:
        super().__init__(address, "killed while handling the message")


class AskTimeout(MailboxError, TimeoutError):
    """No reply within the ask's timeout; the message may still be handled later."""

    def __init__(self, address: str, timeout: float) -> None:
        super().__init__(address, f"no reply within {timeout:g}s")
        self.timeout = timeout


class Expected(Exception):
    """A failure that is part of how the system runs, not a fault (a write refused because this replica is no
    longer the leader): the actor restarts as after any failure, but the log says so in one line, without a
    traceback, at INFO: a step-down's dozens of refused writes read as a routine event, not a crash."""
