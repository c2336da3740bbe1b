"""One judging request's context, given to every judging route: its id and clock, the judge,
admission (slot, queue, deadline, disconnect) and how it is recorded (metrics, one log line).

A route builds its engine work and hands it here; everything else it gets by construction.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Callable, Coroutine, Iterator
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from reflectrm.api.access import count, note, request_id_of
from reflectrm.api.admission import until_disconnected
from reflectrm.api.errors import status_of
from reflectrm.api.state import JudgeDep, ServiceState, StateDep
from reflectrm.consistency import swap_result
from reflectrm.judging.judge import Judge, consistent
from reflectrm.judging.types import JudgeRequest, Judgment
from reflectrm.metrics import outcome_of_status
from reflectrm.settings import Settings

T = TypeVar("T")


@dataclass
class Call:
    state: ServiceState
    judge: Judge
    http: Request
    request_id: str
    started: float = field(default_factory=time.monotonic)
    # The engine requests' ids: the request id made unique, since clients choose request ids
    # (X-Request-ID) and two requests in flight may carry the same one.
    engine_id: str = ""

    def __post_init__(self) -> None:
        if not self.engine_id:
            self.engine_id = f"{self.request_id}-{secrets.token_hex(4)}"

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
        work = self.judge.judge(request, self.engine_id + suffix)
        return await self.state.admission.admitted(work, self.settings.request_timeout_s)

    @contextlib.contextmanager
    def observed(self, mode: str) -> Iterator[Callable[[Judgment, Judgment | None], None]]:
        """Record how the request ends: yields ``record(judgment, swapped_or_None)`` for success;
        a failure is counted under the status it will be answered with."""
        metrics = self.state.metrics
        try:
            yield lambda judgment, swap: self._record(mode, judgment, swap)
        except BaseException as exc:
            outcome = outcome_of_status(status_of(exc))
            metrics.observe_request(mode, outcome)
            note(self.http, mode=mode, outcome=outcome)
            raise

    def _record(self, mode: str, judgment: Judgment, swap: Judgment | None) -> None:
        metrics = self.state.metrics
        metrics.observe_request(mode, judgment.outcome, time.monotonic() - self.started)
        if swap is not None:
            metrics.observe_swap_check("requested", swap_result(consistent(judgment, swap)))
        usage = judgment.usage + swap.usage if swap else judgment.usage
        note(self.http, mode=mode, outcome=judgment.outcome, winner=judgment.winner)
        count(
            self.http,
            engine_requests=usage.engine_requests,
            prompt_tokens=usage.prompt_tokens,
            generated_tokens=usage.generated_tokens,
        )


def get_call(request: Request, state: StateDep, judge: JudgeDep) -> Call:
    return Call(state=state, judge=judge, http=request, request_id=request_id_of(request))


CallDep = Annotated[Call, Depends(get_call)]
