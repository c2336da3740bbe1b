"""Retries that cost nothing: a call identical to one in flight joins it (single flight), and a
call identical to one answered recently gets the same answer (a bounded, time-limited cache).

Trainers retry: OpenRLHF after 180 s, five times; verl sixteen; slime ten. A retry of a call
still being judged would otherwise be judged again, multiplying the work that made the first
try slow. Here the work of a call runs as a task of its own that every identical caller awaits;
a caller that goes away leaves it to the others, and when the last one has gone the work goes on
for ``grace_s`` (a retry arriving then joins it) before it is cancelled, which aborts its engine
requests. Only successful answers are kept; a failure is answered to those waiting and the next
identical call tries again.

What "identical" means is the caller's key (``JudgingService`` builds it from the tenant, the
content and every setting that changes the answer, the seed included; an unseeded call matches
an unseeded one, so its repeat within the cache's lifetime gets the first answer, seed and all).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, Literal, TypeVar

from reflectrm.serving.errors import ClosedError

T = TypeVar("T")
How = Literal["judged", "joined", "cached"]


@dataclass
class _Flight(Generic[T]):
    task: asyncio.Task[T]
    waiters: int = 0
    cancel_later: asyncio.TimerHandle | None = field(default=None, repr=False)


class Reuse:
    def __init__(
        self,
        size: int,
        ttl_s: float,
        grace_s: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.size = size
        self.ttl_s = ttl_s
        self.grace_s = grace_s
        self._clock = clock
        self._flights: dict[Hashable, _Flight[Any]] = {}
        self._answers: OrderedDict[Hashable, tuple[float, Any]] = OrderedDict()

    @property
    def in_flight(self) -> int:
        return len(self._flights)

    @property
    def cached(self) -> int:
        return len(self._answers)

    def _cached(self, key: Hashable) -> tuple[bool, Any]:
        entry = self._answers.get(key)
        if entry is None:
            return False, None
        expires, answer = entry
        if self._clock() >= expires:
            del self._answers[key]
            return False, None
        self._answers.move_to_end(key)
        return True, answer

    def _keep(self, key: Hashable, task: asyncio.Task[Any]) -> None:
        if self._flights.get(key) is not None and self._flights[key].task is task:
            del self._flights[key]
        if task.cancelled() or task.exception() is not None:
            return
        if self.size <= 0 or self.ttl_s <= 0:
            return
        self._answers[key] = (self._clock() + self.ttl_s, task.result())
        self._answers.move_to_end(key)
        while len(self._answers) > self.size:
            self._answers.popitem(last=False)

    async def run(self, key: Hashable, work: Callable[[], Coroutine[Any, Any, T]]) -> tuple[T, How]:
        """The answer for ``key``: cached, joined from the identical call in flight, or judged
        by ``work()``; and which of the three it was."""
        hit, answer = self._cached(key)
        if hit:
            return answer, "cached"
        flight: _Flight[T] | None = self._flights.get(key)
        how: How = "joined"
        if flight is None:
            task = asyncio.ensure_future(work())
            flight = self._flights[key] = _Flight(task)
            task.add_done_callback(lambda t: self._keep(key, t))
            how = "judged"
        if flight.cancel_later is not None:  # a retry within the grace period: it goes on
            flight.cancel_later.cancel()
            flight.cancel_later = None
        flight.waiters += 1
        try:
            return await asyncio.shield(flight.task), how
        except asyncio.CancelledError:
            current = asyncio.current_task()
            if flight.task.cancelled() and not (current and current.cancelling()):
                # The work was cancelled under this caller (shutdown), not the caller itself.
                raise ClosedError(
                    "the service is shutting down; retry on another replica"
                ) from None
            raise
        finally:
            flight.waiters -= 1
            if flight.waiters == 0 and not flight.task.done():
                self._abandoned(flight)

    def _abandoned(self, flight: _Flight[Any]) -> None:
        """Nobody waits for the work any more: cancel it after the grace period."""
        if self.grace_s <= 0:
            self._cancel(flight)
            return
        loop = asyncio.get_running_loop()
        flight.cancel_later = loop.call_later(self.grace_s, self._cancel, flight)

    def _cancel(self, flight: _Flight[Any]) -> None:
        """Cancel the work and forget it at once, so that no later call joins work that is
        being aborted."""
        for key, held in list(self._flights.items()):
            if held is flight:
                del self._flights[key]
        flight.task.cancel()

    async def close(self) -> None:
        """Cancel the work still running (shutdown)."""
        flights = list(self._flights.values())
        for flight in flights:
            if flight.cancel_later is not None:
                flight.cancel_later.cancel()
            flight.task.cancel()
        for flight in flights:
            with contextlib.suppress(BaseException):
                await flight.task
        self._answers.clear()
