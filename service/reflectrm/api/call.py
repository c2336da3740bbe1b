"""One judging request's context, given to every judging route: its id and clock, the judge,
admission (slot, queue, deadline, disconnect) and how it is recorded (metrics, one log line).

A route builds its engine work and hands it here; everything else it gets by construction.
"""

from __future__ import annotations

import contextlib
import logging
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from reflectrm.api.admission import until_disconnected
from reflectrm.api.errors import status_of
from reflectrm.api.state import JudgeDep, ServiceState, StateDep
from reflectrm.consistency import swap_result
from reflectrm.judging.judge import Judge, consistent
from reflectrm.judging.types import JudgeRequest, Judgment
from reflectrm.metrics import outcome_of_status
from reflectrm.settings import Settings

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass
class Call:
    state: ServiceState
    judge: Judge
    http: Request
    request_id: str
    started: float = field(default_factory=time.monotonic)

    @property
    def settings(self) -> Settings:
        return self.state.settings

    @property
    def latency_ms(self) -> float:
        return round((time.monotonic() - self.started) * 1000, 1)

    async def run(self, work: Coroutine[Any, Any, T]) -> T:
        """Run the request's work; a client that disconnects has it cancelled."""
        return await until_disconnected(work, self.http.is_disconnected)

    async def judgment(self, request: JudgeRequest, suffix: str = "") -> Judgment:
        """One judgment, admitted: it waits for a slot and runs under the deadline."""
        work = self.judge.judge(request, self.request_id + suffix)
        return await self.state.admission.admitted(work, self.settings.request_timeout_s)

    @contextlib.contextmanager
    def observed(self, mode: str) -> Iterator[Callable[[Judgment, Judgment | None], None]]:
        """Record how the request ends: yields ``record(judgment, swapped_or_None)`` for success;
        a failure is counted under the status it will be answered with."""
        metrics = self.state.metrics
        try:
            yield lambda judgment, swap: self._record(mode, judgment, swap)
        except BaseException as exc:
            metrics.observe_request(mode, outcome_of_status(status_of(exc)))
            log.info("request %s ended with %d", self.request_id, status_of(exc))
            raise

    def _record(self, mode: str, judgment: Judgment, swap: Judgment | None) -> None:
        metrics = self.state.metrics
        metrics.observe_request(mode, judgment.outcome, time.monotonic() - self.started)
        if swap is not None:
            metrics.observe_swap_check("requested", swap_result(consistent(judgment, swap)))
        log.info(
            "judged %s mode=%s winner=%s outcome=%s early_exit=%s tokens=%d in %.0f ms",
            self.request_id,
            judgment.mode,
            judgment.winner,
            judgment.outcome,
            judgment.early_exit,
            judgment.usage.generated_tokens + (swap.usage.generated_tokens if swap else 0),
            self.latency_ms,
        )


def get_call(request: Request, state: StateDep, judge: JudgeDep) -> Call:
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    return Call(state=state, judge=judge, http=request, request_id=request_id)


CallDep = Annotated[Call, Depends(get_call)]
