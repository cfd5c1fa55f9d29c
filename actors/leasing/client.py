"""The Client's actor: its `Valid` condition (validity.py), and its credential when lessor serves gRPC."""

from __future__ import annotations

from typing import Any

from .credentials import RotateCredential, ensure_credential, rotate_credential
from ..validity import ValidActor


class ClientActor(ValidActor):
    __slots__ = ()

    async def receive(self, message: Any) -> Any:
        if isinstance(message, RotateCredential):  # Jumpstarter's RotateToken, asked by the gRPC service
            return await rotate_credential(self, "client")
        return await super().receive(message)

    async def _judge(self) -> None:
        await super()._judge()
        await ensure_credential(self, "client")
