"""Online positional consistency: a sample of answered judgments is judged again, in the
background, with the two responses swapped, and the result is counted in the metrics.

The caller already has its answer when a check is offered, so a check never delays a response.
It also never competes with live traffic for long: checks wait in a bounded queue (full: the new
one is dropped), run a few at a time, start only while live load is below a threshold, and are
cancelled (aborting their engine requests) as soon as live load reaches it. Every check given up
is counted in ``reflectrm_swap_checks_dropped_total``.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from reflectrm.aio import StoppedError, run_until
from reflectrm.judging.judge import Judge, consistent, swapped
from reflectrm.judging.types import Judgment, JudgmentSpec
from reflectrm.metrics import Metrics, SwapResult
from reflectrm.settings import SwapCheckConfig

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class _Check:
    judge: Judge
    request: JudgmentSpec
    original: Judgment
    request_id: str


def swap_result(agreed: bool | None) -> SwapResult:
    """How a swap check counts: None means one of the two orders had no verdict."""
    if agreed is None:
        return "no_verdict"
    return "consistent" if agreed else "inconsistent"


def result_of(original: Judgment, swap: Judgment) -> SwapResult:
    return swap_result(consistent(original, swap))


class SwapChecker:
    """Samples answered judgments and runs their swapped-order judgments in the background."""

    def __init__(self, config: SwapCheckConfig, metrics: Metrics, live_load: Callable[[], int]):
        self.config = config
        self._metrics = metrics
        self._live_load = live_load
        self._credit = 0.0
        self._pending: deque[_Check] = deque()
        self._running: set[asyncio.Task[None]] = set()
        self._closed = False
        metrics.track_swap_checks(lambda: len(self._pending), lambda: len(self._running))

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def _busy(self) -> bool:
        """Live load at which a running check gives way (it is cancelled)."""
        return self._live_load() >= self.config.busy_in_flight

    @property
    def running(self) -> int:
        return len(self._running)

    def _sampled(self) -> bool:
        # Systematic sampling (every 1/fraction-th judgment): the exact fraction, no randomness,
        # and a handful of requests (as in tests) never triggers a 5% check by chance.
        self._credit += self.config.fraction
        if self._credit >= 1.0:
            self._credit -= 1.0
            return True
        return False

    def offer(
        self, judge: Judge, request: JudgmentSpec, judgment: Judgment, request_id: str
    ) -> bool:
        """Consider an answered judgment for a check; never blocks. True if it was queued."""
        if judgment.winner is None or not self._sampled():
            return False
        if self._closed:
            self._metrics.swap_check_dropped("shutdown")
            return False
        if len(self._pending) >= self.config.max_pending:
            self._metrics.swap_check_dropped("queue_full")
            return False
        self._pending.append(_Check(judge, request, judgment, request_id))
        self._start_next()
        return True

    def _start_next(self) -> None:
        while self._pending and len(self._running) < self.config.concurrency and not self._closed:
            check = self._pending.popleft()
            if self._live_load() >= self.config.busy_in_flight:
                self._metrics.swap_check_dropped("busy")
                continue
            task = asyncio.get_running_loop().create_task(self._run(check))
            self._running.add(task)
            task.add_done_callback(self._finished)

    def _finished(self, task: asyncio.Task[None]) -> None:
        self._running.discard(task)
        self._start_next()

    async def _run(self, check: _Check) -> None:
        work = check.judge.judge(swapped(check.request), f"{check.request_id}-swapcheck")
        try:
            async with asyncio.timeout(self.config.timeout_s):
                swap = await run_until(work, self._busy, self.config.poll_s)
        except StoppedError:
            self._metrics.swap_check_dropped("preempted")
        except asyncio.CancelledError:
            self._metrics.swap_check_dropped("shutdown")
            raise
        except TimeoutError:
            log.warning("background swap check of %s timed out", check.request_id)
            self._metrics.observe_swap_check("sampled", "error")
        except Exception:  # a failed check must not take anything else down; it is counted
            log.exception("background swap check of %s failed", check.request_id)
            self._metrics.observe_swap_check("sampled", "error")
        else:
            result = result_of(check.original, swap)
            self._metrics.observe_swap_check("sampled", result)
            log.info("swap check of %s: %s", check.request_id, result)

    async def close(self) -> None:
        """Drop what is queued and cancel what runs (before the engine shuts down)."""
        self._closed = True
        for _ in self._pending:
            self._metrics.swap_check_dropped("shutdown")
        self._pending.clear()
        running = list(self._running)
        for task in running:
            task.cancel()
        for task in running:
            with contextlib.suppress(asyncio.CancelledError):
                await task
