"""Admission, written once around any judging work: a limit on judgments in flight, a bounded
queue in front of it, a deadline, and cancellation when the client goes away.

RLHF trainers send bursts of hundreds of per-sample calls with few retries, so a call over the
limit waits its turn (first come, first served) instead of being refused. The wait is bounded
twice: by the queue's length (``max_queued``) and by time (``queue_timeout_s``); past either the
call ends in ``OverloadedError`` (429) with a Retry-After estimated from the measured service rate.

When the service stops (shutdown, or its engine failed) admission is closed: waiting and new
calls end in ``ClosedError`` (503) at once, and ``abort`` ends the admitted ones the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from typing import Any, TypeVar

from reflectrm.aio import StoppedError, run_until
from reflectrm.serving.errors import (
    DEFAULT_RETRY_AFTER_S,
    ClientGoneError,
    ClosedError,
    DeadlineExceededError,
    OverloadedError,
)

T = TypeVar("T")

# Retry-After bounds (seconds); before any judgment has completed it is DEFAULT_RETRY_AFTER_S.
MIN_RETRY_AFTER_S = 1
MAX_RETRY_AFTER_S = 120
# Completions remembered for the service-rate estimate.
RATE_WINDOW = 64


class Admission:
    """Slots for judgments in flight, with a bounded first-come-first-served queue."""

    def __init__(
        self,
        max_in_flight: int,
        max_queued: int,
        queue_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self._clock = clock
        self._in_flight = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._completions: deque[float] = deque(maxlen=RATE_WINDOW)
        # The admitted work, as tasks, so that ``abort`` can end it.
        self._running: set[asyncio.Task[Any]] = set()
        self.closed: str | None = None
        self._aborted: str | None = None
        # Called with each admitted judgment's queue wait in seconds (the metrics).
        self.on_wait: Callable[[float], None] | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return len(self._waiters)

    def service_rate(self) -> float | None:
        """Judgments completed per second over the recent window, or None before two exist."""
        if len(self._completions) < 2:
            return None
        span = self._completions[-1] - self._completions[0]
        if span <= 0:
            return None
        return (len(self._completions) - 1) / span

    def retry_after_s(self) -> int:
        """Seconds until the queue ahead of a new caller likely drains, at the measured rate."""
        rate = self.service_rate()
        if rate is None:
            return DEFAULT_RETRY_AFTER_S
        ahead = self.queued + max(0, self._in_flight - self.max_in_flight + 1)
        return max(MIN_RETRY_AFTER_S, min(MAX_RETRY_AFTER_S, math.ceil((ahead + 1) / rate)))

    def close(self, reason: str) -> None:
        """Admit nothing more (shutdown, engine failure): queued callers are told at once."""
        if self.closed is None:
            self.closed = reason
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_exception(ClosedError(self.closed))

    def abort(self, reason: str) -> int:
        """Close, and end every admitted judgment now (its engine requests are aborted); each
        caller gets ``ClosedError(reason)``. Returns how many were running."""
        self.close(reason)
        self._aborted = reason
        running = [task for task in self._running if not task.done()]
        for task in running:
            task.cancel()
        return len(running)

    @contextlib.asynccontextmanager
    async def slot(self) -> AsyncIterator[float]:
        """Hold one judgment slot; yields the seconds spent waiting for it."""
        waited = await self._acquire()
        try:
            yield waited
        finally:
            self._release()

    async def _acquire(self) -> float:
        if self.closed is not None:
            raise ClosedError(self.closed)
        if self._in_flight < self.max_in_flight and not self._waiters:
            self._in_flight += 1
            return 0.0
        if len(self._waiters) >= self.max_queued:
            raise OverloadedError(
                f"{self._in_flight} judgments in flight and {len(self._waiters)} queued, the "
                "limits (REFLECTRM_MAX_CONCURRENT_JUDGMENTS, REFLECTRM_MAX_QUEUED_JUDGMENTS); "
                "retry after the Retry-After seconds",
                self.retry_after_s(),
            )
        started = self._clock()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(waiter)
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                await waiter
        except BaseException as exc:
            handed = waiter.done() and not waiter.cancelled() and waiter.exception() is None
            if handed and isinstance(exc, TimeoutError):
                return self._clock() - started  # the slot came at the last moment: keep it
            if handed:
                self._release()  # handed a slot at the moment of cancellation: pass it on
            with contextlib.suppress(ValueError):
                self._waiters.remove(waiter)
            if isinstance(exc, TimeoutError):
                raise OverloadedError(
                    f"no judgment slot within {self.queue_timeout_s:g} s "
                    "(REFLECTRM_QUEUE_TIMEOUT_S); retry after the Retry-After seconds",
                    self.retry_after_s(),
                ) from None
            raise
        # The releasing caller handed its slot over without decrementing in_flight.
        return self._clock() - started

    def _release(self) -> None:
        self._completions.append(self._clock())
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)  # the slot passes to the next caller in line
                return
        self._in_flight -= 1

    async def admitted(self, work: Coroutine[Any, Any, T], deadline_s: float) -> T:
        """Run one judgment in a slot (waiting in the queue for one), with a deadline that
        counts from admission. Past the deadline the work is cancelled (its engine requests are
        aborted) and DeadlineExceededError is raised."""
        try:
            waited = await self._acquire()
        except BaseException:
            work.close()  # never started: no engine request was made
            raise
        # A task of its own, so that ``abort`` can cancel the work and nothing else; cancelling
        # the caller (deadline, disconnect) cancels it too, as awaiting a task does.
        task = asyncio.ensure_future(work)
        self._running.add(task)
        try:
            if self.on_wait is not None:
                self.on_wait(waited)
            async with asyncio.timeout(deadline_s):
                return await task
        except TimeoutError:
            raise DeadlineExceededError(
                f"the judgment did not finish within {deadline_s:g} s of admission "
                "(REFLECTRM_REQUEST_TIMEOUT_S); its engine requests were aborted"
            ) from None
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if (
                self._aborted is not None
                and task.cancelled()
                and not (current and current.cancelling())
            ):
                raise ClosedError(self._aborted) from None
            raise
        finally:
            self._running.discard(task)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
            self._release()


async def until_disconnected(
    work: Coroutine[Any, Any, T],
    is_disconnected: Callable[[], Awaitable[bool]],
    poll_s: float = 1.0,
) -> T:
    """Run ``work``; if the client goes away first, cancel it (which aborts its engine requests
    and leaves the queue) and raise ClientGoneError."""
    try:
        return await run_until(work, is_disconnected, poll_s)
    except StoppedError:
        raise ClientGoneError from None
