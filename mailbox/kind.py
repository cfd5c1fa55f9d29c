"""A registered kind: how to make its actors and the rules they live by."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .actor import DEFAULT_ASK_TIMEOUT
from .fair_inbox import FairKey
from .metrics import KindStats
from .start_slots import StartSlots
from .supervision import Supervision
from .turns import TenantOf

if TYPE_CHECKING:
    from .actor import Actor


@dataclass(frozen=True, slots=True)
class Kind:
    name: str
    factory: Callable[[str], Actor]
    capacity: int
    supervision: Supervision
    passivate_after: float | None
    stats: KindStats
    start_slots: StartSlots | None = None  # at most so many of the kind inside `started()` at once, the rest in line
    ask_timeout: float = DEFAULT_ASK_TIMEOUT  # an ask's deadline unless the asker gives one; inf: none
    fair_key: FairKey | None = None  # whose line a message waits in (`fair_inbox`); None: one FIFO queue
    tenant: TenantOf | None = None  # whose turns an actor's steps take (`turns`); None: they take none
