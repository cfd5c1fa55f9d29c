"""Ending the tasks a test started: one copy of cancel-and-wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


async def cancelled(task: asyncio.Future[Any]) -> None:
    """Cancel `task` and wait until it has ended: its clean-up ran before the test goes on."""
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


@contextlib.asynccontextmanager
async def running(work: Coroutine[Any, Any, T]) -> AsyncIterator[asyncio.Task[T]]:
    """`work` as a task for the block's length (an elector's `run()`, an informer's): cancelled and awaited after."""
    task = asyncio.create_task(work)
    try:
        yield task
    finally:
        await cancelled(task)
