"""The Client's actor: its `Valid` condition (validity.py), and its credential when lessor serves gRPC."""

from __future__ import annotations

from .credentials import ensure_credential
from ..validity import ValidActor


class ClientActor(ValidActor):
    __slots__ = ()

    async def _judge(self) -> None:
        await super()._judge()
        await ensure_credential(self, "client")
