"""Admission, written once around any judging work: a limit on judgments in flight, bounded
queues in front of it, served fairly across tenants, a deadline, and cancellation when the client
goes away.

RLHF trainers send bursts of hundreds of per-sample calls with few retries, so a call over the
limit waits its turn instead of being refused. Each tenant (an API key, or the job a header
names) has a queue of its own, and freed slots are shared between the tenants waiting by
start-time fair queuing (weighted round robin in effect): each judgment queued is tagged with
its tenant's virtual start time, max(now, the tenant's previous tag + 1/weight), and the smallest
tag goes first. A tenant with one judgment waiting is therefore served within one round however
much another tenant has queued (a light evaluation job is not stuck behind a flooding training
job), and a weight-2 tenant gets two slots to a weight-1 tenant's one. Within a tenant, first
come, first served. The wait is bounded three ways: by the queue's length in all
(``max_queued``), by each tenant's (``max_queued_per_tenant``), and by time
(``queue_timeout_s``); past any of them the call ends in ``OverloadedError`` (429) with a
Retry-After estimated from the measured service rate. ``max_in_flight_per_tenant`` caps the
slots one tenant may hold at once.

When the service stops (shutdown, or its engine failed) admission is closed: waiting and new
calls end in ``ClosedError`` (503) at once, and ``abort`` ends the admitted ones the same way.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Mapping
from dataclasses import dataclass, field
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


DEFAULT_TENANT = "default"


@dataclass
class TenantStats:
    """One active tenant's judgments, now."""

    queued: int = 0
    in_flight: int = 0


@dataclass
class _Waiter:
    tag: float  # virtual start time: the smallest goes first
    seq: int  # arrival order, for equal tags
    future: asyncio.Future[None]


@dataclass
class _Tenant:
    name: str
    weight: int
    waiters: deque[_Waiter] = field(default_factory=deque)
    in_flight: int = 0
    # Virtual time at which this tenant's next judgment may start (its last tag + 1/weight).
    next_tag: float = 0.0

    def queued(self) -> int:
        return sum(not w.future.done() for w in self.waiters)

    def tag(self, now: float) -> float:
        start = max(now, self.next_tag)
        self.next_tag = start + 1.0 / self.weight
        return start


class Admission:
    """Slots for judgments in flight, with bounded per-tenant queues served in weighted round
    robin (first come, first served within a tenant)."""

    def __init__(
        self,
        max_in_flight: int,
        max_queued: int,
        queue_timeout_s: float,
        clock: Callable[[], float] = time.monotonic,
        *,
        max_queued_per_tenant: int | None = None,
        max_in_flight_per_tenant: int | None = None,
        weights: Mapping[str, int] | None = None,
        max_tenants: int = 1024,
    ) -> None:
        self.max_in_flight = max_in_flight
        self.max_queued = max_queued
        self.queue_timeout_s = queue_timeout_s
        self.max_queued_per_tenant = (
            max_queued if max_queued_per_tenant is None else max_queued_per_tenant
        )
        self.max_in_flight_per_tenant = (
            max_in_flight if max_in_flight_per_tenant is None else max_in_flight_per_tenant
        )
        self.weights = dict(weights or {})
        self.max_tenants = max_tenants
        self._clock = clock
        self._in_flight = 0
        self._queued = 0
        self._tenants: dict[str, _Tenant] = {}
        # Virtual time: the tag of the judgment admitted last.
        self._virtual = 0.0
        self._seq = 0
        self._completions: deque[float] = deque(maxlen=RATE_WINDOW)
        # The admitted work, as tasks, so that ``abort`` can end it.
        self._running: set[asyncio.Task[Any]] = set()
        self.closed: str | None = None
        self._aborted: str | None = None
        # Called with each admitted judgment's queue wait in seconds, and its tenant (metrics).
        self.on_wait: Callable[[float, str], None] | None = None

    @property
    def in_flight(self) -> int:
        return self._in_flight

    @property
    def queued(self) -> int:
        return self._queued

    def tenant_stats(self) -> dict[str, TenantStats]:
        return {name: TenantStats(t.queued(), t.in_flight) for name, t in self._tenants.items()}

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
        for tenant in self._tenants.values():
            while tenant.waiters:
                waiter = tenant.waiters.popleft().future
                if not waiter.done():
                    self._queued -= 1
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
    async def slot(self, tenant: str = DEFAULT_TENANT) -> AsyncIterator[float]:
        """Hold one judgment slot; yields the seconds spent waiting for it."""
        waited = await self._acquire(tenant)
        try:
            yield waited
        finally:
            self._release(tenant)

    def _tenant(self, name: str) -> _Tenant:
        tenant = self._tenants.get(name)
        if tenant is None:
            if len(self._tenants) >= self.max_tenants:
                raise OverloadedError(
                    f"{len(self._tenants)} tenants have judgments queued or in flight, the "
                    f"limit (REFLECTRM_MAX_TENANTS={self.max_tenants}); retry after the "
                    "Retry-After seconds",
                    self.retry_after_s(),
                    "tenants",
                )
            tenant = self._tenants[name] = _Tenant(name, max(1, self.weights.get(name, 1)))
        return tenant

    def _forget_if_idle(self, tenant: _Tenant) -> None:
        """A tenant with nothing queued or in flight is dropped (its counts live on in the
        metrics), so the tenants held stay bounded by those active."""
        if (
            tenant.in_flight == 0
            and tenant.queued() == 0
            and self._tenants.get(tenant.name) is tenant
        ):
            del self._tenants[tenant.name]

    def _refuse(self, detail: str, bound: str) -> OverloadedError:
        return OverloadedError(detail, self.retry_after_s(), bound)

    async def _acquire(self, name: str) -> float:
        if self.closed is not None:
            raise ClosedError(self.closed)
        tenant = self._tenant(name)
        if (
            self._in_flight < self.max_in_flight
            and tenant.in_flight < self.max_in_flight_per_tenant
            and self._next_tenant() is None  # nobody waiting could take the free slot
        ):
            self._virtual = tenant.tag(self._virtual)
            self._take(tenant)
            return 0.0
        if self._queued >= self.max_queued:
            self._forget_if_idle(tenant)
            raise self._refuse(
                f"{self._in_flight} judgments in flight and {self._queued} queued, the "
                "limits (REFLECTRM_MAX_CONCURRENT_JUDGMENTS, REFLECTRM_MAX_QUEUED_JUDGMENTS); "
                "retry after the Retry-After seconds",
                "queue",
            )
        mine = tenant.queued()
        if mine >= self.max_queued_per_tenant:
            self._forget_if_idle(tenant)
            raise self._refuse(
                f"tenant {name!r} has {mine} judgments queued, its limit "
                f"(REFLECTRM_MAX_QUEUED_PER_TENANT={self.max_queued_per_tenant}), with "
                f"{tenant.in_flight} in flight; retry after the Retry-After seconds",
                "tenant_queue",
            )
        started = self._clock()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        entry = _Waiter(tenant.tag(self._virtual), self._seq, waiter)
        tenant.waiters.append(entry)
        self._queued += 1
        self._dispatch()  # a slot may be free while other tenants wait at their own caps
        try:
            async with asyncio.timeout(self.queue_timeout_s):
                await waiter
        except BaseException as exc:
            handed = waiter.done() and not waiter.cancelled() and waiter.exception() is None
            if handed and isinstance(exc, TimeoutError):
                return self._clock() - started  # the slot came at the last moment: keep it
            if handed:
                self._release(name)  # handed a slot at the moment of cancellation: pass it on
            elif not waiter.done() or waiter.cancelled():
                self._queued -= 1  # still in the queue: it leaves it
                waiter.cancel()
            with contextlib.suppress(ValueError):
                tenant.waiters.remove(entry)
            if tenant.queued() == 0:  # its place in the virtual time is given back
                tenant.next_tag = min(tenant.next_tag, self._virtual)
            self._forget_if_idle(tenant)
            if isinstance(exc, TimeoutError):
                raise self._refuse(
                    f"no judgment slot within {self.queue_timeout_s:g} s "
                    "(REFLECTRM_QUEUE_TIMEOUT_S); retry after the Retry-After seconds",
                    "queue_timeout",
                ) from None
            raise
        return self._clock() - started

    def _take(self, tenant: _Tenant) -> None:
        self._in_flight += 1
        tenant.in_flight += 1

    def _release(self, name: str) -> None:
        self._completions.append(self._clock())
        tenant = self._tenants[name]
        tenant.in_flight -= 1
        self._in_flight -= 1
        self._dispatch()
        self._forget_if_idle(tenant)

    def _dispatch(self) -> None:
        """Hand free slots to waiting callers: the smallest tag among the tenants below their
        own cap goes first."""
        while self._in_flight < self.max_in_flight:
            tenant = self._next_tenant()
            if tenant is None:
                return
            entry = tenant.waiters.popleft()
            self._queued -= 1
            self._virtual = max(self._virtual, entry.tag)
            self._take(tenant)
            entry.future.set_result(None)  # the slot passes to this caller

    def _next_tenant(self) -> _Tenant | None:
        best: _Tenant | None = None
        for tenant in self._tenants.values():
            while tenant.waiters and tenant.waiters[0].future.done():
                tenant.waiters.popleft()  # left the queue (cancelled, timed out)
            if not tenant.waiters or tenant.in_flight >= self.max_in_flight_per_tenant:
                continue
            head = tenant.waiters[0]
            if best is None or (head.tag, head.seq) < (best.waiters[0].tag, best.waiters[0].seq):
                best = tenant
        return best

    async def admitted(
        self, work: Coroutine[Any, Any, T], deadline_s: float, tenant: str = DEFAULT_TENANT
    ) -> T:
        """Run one judgment in a slot (waiting in the tenant's queue for one), with a deadline
        that counts from admission. Past the deadline the work is cancelled (its engine
        requests are aborted) and DeadlineExceededError is raised."""
        try:
            waited = await self._acquire(tenant)
        except BaseException:
            work.close()  # never started: no engine request was made
            raise
        if (
            self._aborted is not None and self.closed is not None
        ):  # slot handed just before an abort
            self._release(tenant)
            work.close()
            raise ClosedError(self._aborted)
        # A task of its own, so that ``abort`` can cancel the work and nothing else; cancelling
        # the caller (deadline, disconnect) cancels it too, as awaiting a task does.
        task = asyncio.ensure_future(work)
        self._running.add(task)
        try:
            if self.on_wait is not None:
                self.on_wait(waited, tenant)
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
            self._release(tenant)


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
