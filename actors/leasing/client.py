"""The Client's actor: its `Valid` condition (validity.py), and its credential when lessor serves gRPC."""

from __future__ import annotations

from typing import Any

from ..context import Context
from ..validity import Rule, ValidActor
from .credentials import CredentialState, RenewCredential, RotateCredential, ensure_credential, rotate_credential


class ClientActor(ValidActor):
    __slots__ = ("credential",)

    def __init__(self, address: str, ctx: Context, rule: Rule) -> None:
        super().__init__(address, ctx, rule)
        self.credential = CredentialState()

    async def receive(self, message: Any) -> Any:
        if isinstance(message, RotateCredential):  # Jumpstarter's RotateToken, asked by the gRPC service
            return await rotate_credential(self, "client")
        if isinstance(message, RenewCredential):
            return await ensure_credential(self, "client", self.credential, renew=True)
        return await super().receive(message)

    async def _judge(self) -> None:
        await super()._judge()
        await ensure_credential(self, "client", self.credential)
