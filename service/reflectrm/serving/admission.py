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
come, first served. A tenant may be a job within a share, named ``share/job`` (an API key and
the job its caller names): the share takes the tenant's place above, with its weight and bounds,
and its turns go to its jobs by the same fair queuing among them, so a key's jobs split the
key's share instead of adding to it, and a light job of a key is not stuck behind a flooding
job of the same key. The wait is bounded three ways: by the queue's length in all
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
# A tenant "share/job" is a job within a share (an API key's tenant and the job its caller
# names): the share is what fair queuing, weights and the per-tenant bounds count.
JOB_SEPARATOR = "/"


def share_of(tenant: str) -> str:
    """The share a tenant's judgments count against: the part before the first "/" (the API
    key's tenant of "key-.../job-a"), or the tenant itself."""
    return tenant.split(JOB_SEPARATOR, 1)[0]


@dataclass
class TenantStats:
    """One active tenant's judgments, now."""

    queued: int = 0
    in_flight: int = 0


@dataclass
class _Waiter:
    seq: int  # arrival order, for equal tags
    future: asyncio.Future[None]


@dataclass
class _Flow:
    """Start-time fair queuing state of a share among the shares, or of a job within its share.
    Tags are given lazily: ``head`` is the virtual start time of the flow's next judgment while
    it has one waiting (None otherwise), ``max(virtual time, next_tag)`` when it starts to wait,
    then ``next_tag`` for as long as it keeps waiting; each judgment served moves ``next_tag`` on
    by 1/weight."""

    weight: int = 1
    next_tag: float = 0.0
    head: float | None = None

    def wait(self, virtual: float) -> None:
        if self.head is None:
            self.head = max(virtual, self.next_tag)

    def serve(self, virtual: float) -> float:
        """One judgment of the flow goes (waiting, or admitted at once): its tag."""
        tag = self.head if self.head is not None else max(virtual, self.next_tag)
        self.next_tag = tag + 1.0 / self.weight
        self.head = None
        return tag


@dataclass
class _Tenant:
    """A job: its own queue, first come, first served."""

    name: str
    flow: _Flow = field(default_factory=_Flow)
    waiters: deque[_Waiter] = field(default_factory=deque)
    in_flight: int = 0

    def queued(self) -> int:
        return sum(not w.future.done() for w in self.waiters)

    def head(self) -> _Waiter | None:
        """The first waiter still waiting (those that left are dropped)."""
        while self.waiters and self.waiters[0].future.done():
            self.waiters.popleft()
        if not self.waiters:
            self.flow.head = None
            return None
        return self.waiters[0]


@dataclass
class _Share:
    """A share (an API key, or a tenant named without a job): its weight, bounds and place in
    the round robin, and its jobs, served fairly among themselves."""

    name: str
    flow: _Flow
    jobs: dict[str, _Tenant] = field(default_factory=dict)
    in_flight: int = 0
    # Virtual time among the share's jobs: the tag of the job's judgment served last.
    virtual: float = 0.0

    def queued(self) -> int:
        return sum(job.queued() for job in self.jobs.values())

    def next_job(self) -> tuple[_Tenant, _Waiter] | None:
        """The job whose head waiter goes next within the share (smallest tag, then arrival)."""
        best: tuple[_Tenant, _Waiter] | None = None
        best_key = (0.0, 0)
        for job in self.jobs.values():
            head = job.head()
            if head is None:
                continue
            job.flow.wait(self.virtual)
            key = (job.flow.head or 0.0, head.seq)
            if best is None or key < best_key:
                best, best_key = (job, head), key
        if best is None:
            self.flow.head = None
        return best


class Admission:
    """Slots for judgments in flight, with bounded per-tenant queues served in weighted round
    robin (first come, first served within a tenant); a tenant "share/job" is a job served in
    its share's turn, in round robin with the share's other jobs."""

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
        self._shares: dict[str, _Share] = {}
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
        return {
            name: TenantStats(job.queued(), job.in_flight)
            for share in self._shares.values()
            for name, job in share.jobs.items()
        }

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
        for tenant in [job for share in self._shares.values() for job in share.jobs.values()]:
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

    def _job(self, name: str) -> tuple[_Share, _Tenant]:
        """The tenant's job, and the share it counts against (a new share is refused past
        ``max_tenants``)."""
        share_name = share_of(name)
        share = self._shares.get(share_name)
        if share is None:
            if len(self._shares) >= self.max_tenants:
                raise OverloadedError(
                    f"{len(self._shares)} tenants have judgments queued or in flight, the "
                    f"limit (REFLECTRM_MAX_TENANTS={self.max_tenants}); retry after the "
                    "Retry-After seconds",
                    self.retry_after_s(),
                    "tenants",
                )
            weight = max(1, self.weights.get(share_name, 1))
            share = self._shares[share_name] = _Share(share_name, _Flow(weight))
        job = share.jobs.get(name)
        if job is None:
            job = share.jobs[name] = _Tenant(name)
        return share, job

    def _forget_if_idle(self, share: _Share, job: _Tenant) -> None:
        """A job, and a share, with nothing queued or in flight is dropped (its counts live on
        in the metrics), so the tenants held stay bounded by those active."""
        if job.in_flight == 0 and job.queued() == 0 and share.jobs.get(job.name) is job:
            del share.jobs[job.name]
        if not share.jobs and self._shares.get(share.name) is share:
            del self._shares[share.name]

    def _refuse(self, detail: str, bound: str) -> OverloadedError:
        return OverloadedError(detail, self.retry_after_s(), bound)

    async def _acquire(self, name: str) -> float:
        if self.closed is not None:
            raise ClosedError(self.closed)
        share, job = self._job(name)
        if (
            self._in_flight < self.max_in_flight
            and share.in_flight < self.max_in_flight_per_tenant
            and self._next() is None  # nobody waiting could take the free slot
        ):
            self._virtual = share.flow.serve(self._virtual)
            share.virtual = job.flow.serve(share.virtual)
            self._take(share, job)
            return 0.0
        if self._queued >= self.max_queued:
            self._forget_if_idle(share, job)
            raise self._refuse(
                f"{self._in_flight} judgments in flight and {self._queued} queued, the "
                "limits (REFLECTRM_MAX_CONCURRENT_JUDGMENTS, REFLECTRM_MAX_QUEUED_JUDGMENTS); "
                "retry after the Retry-After seconds",
                "queue",
            )
        mine = share.queued()
        if mine >= self.max_queued_per_tenant:
            self._forget_if_idle(share, job)
            raise self._refuse(
                f"tenant {share.name!r} has {mine} judgments queued, its limit "
                f"(REFLECTRM_MAX_QUEUED_PER_TENANT={self.max_queued_per_tenant}), with "
                f"{share.in_flight} in flight; retry after the Retry-After seconds",
                "tenant_queue",
            )
        started = self._clock()
        waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._seq += 1
        entry = _Waiter(self._seq, waiter)
        job.waiters.append(entry)
        job.flow.wait(share.virtual)
        share.flow.wait(self._virtual)
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
                job.waiters.remove(entry)
            share.next_job()  # a job, or the share, left with nobody waiting loses its tag
            self._forget_if_idle(share, job)
            if isinstance(exc, TimeoutError):
                raise self._refuse(
                    f"no judgment slot within {self.queue_timeout_s:g} s "
                    "(REFLECTRM_QUEUE_TIMEOUT_S); retry after the Retry-After seconds",
                    "queue_timeout",
                ) from None
            raise
        return self._clock() - started

    def _take(self, share: _Share, job: _Tenant) -> None:
        self._in_flight += 1
        share.in_flight += 1
        job.in_flight += 1

    def _release(self, name: str) -> None:
        self._completions.append(self._clock())
        share = self._shares[share_of(name)]
        job = share.jobs[name]
        job.in_flight -= 1
        share.in_flight -= 1
        self._in_flight -= 1
        self._dispatch()
        self._forget_if_idle(share, job)

    def _dispatch(self) -> None:
        """Hand free slots to waiting callers: the share with the smallest tag among those
        below their own cap goes first, and within it the job with the smallest tag."""
        while self._in_flight < self.max_in_flight:
            picked = self._next()
            if picked is None:
                return
            share, job, entry = picked
            job.waiters.popleft()  # ``entry``, the job's head
            self._queued -= 1
            self._virtual = max(self._virtual, share.flow.serve(self._virtual))
            share.virtual = max(share.virtual, job.flow.serve(share.virtual))
            if job.head() is not None:  # still waiting: its next judgment's tag
                job.flow.wait(share.virtual)
            if share.next_job() is not None:
                share.flow.wait(self._virtual)
            self._take(share, job)
            entry.future.set_result(None)  # the slot passes to this caller

    def _next(self) -> tuple[_Share, _Tenant, _Waiter] | None:
        best: tuple[_Share, _Tenant, _Waiter] | None = None
        best_key = (0.0, 0)
        for share in self._shares.values():
            picked = share.next_job()
            if picked is None or share.in_flight >= self.max_in_flight_per_tenant:
                continue
            share.flow.wait(self._virtual)
            job, head = picked
            key = (share.flow.head or 0.0, head.seq)
            if best is None or key < best_key:
                best, best_key = (share, job, head), key
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
