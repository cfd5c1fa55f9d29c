"""Ending the tasks a test started: one copy of cancel-and-wait."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any


async def cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended: its clean-up ran before the test goes on."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
