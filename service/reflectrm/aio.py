"""Concurrency plumbing shared by the judging code and the service: run together, stop early."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Coroutine, Sequence
from typing import Any, TypeVar

T = TypeVar("T")


async def gather_all(awaitables: Sequence[Coroutine[Any, Any, T]]) -> list[T]:
    """Run concurrently. The first failure cancels the others and is raised as itself, not
    wrapped in an ExceptionGroup, so callers can map it (e.g. a dead engine to 503)."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(a) for a in awaitables]
    except BaseExceptionGroup as group_error:
        raise group_error.exceptions[0] from None
    return [t.result() for t in tasks]


class StoppedError(Exception):
    """``run_until`` stopped the work because its condition came true first."""


async def run_until(
    work: Coroutine[Any, Any, T], stop: Callable[[], Awaitable[bool]], poll_s: float
) -> T:
    """Run ``work``, checking ``stop`` every ``poll_s`` seconds; when it is true, cancel the work
    (which aborts its engine requests) and raise StoppedError. Cancelled from outside (a
    deadline), the work is cancelled too."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            if await stop():
                raise StoppedError
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
