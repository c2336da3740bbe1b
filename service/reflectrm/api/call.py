"""One judging request's context, given to every judging route: its id and clock, the judge,
admission (slot, queue, deadline, disconnect) and how it is recorded (metrics, one log line).

A route builds its engine work and hands it here; everything else it gets by construction.
"""

from __future__ import annotations

import contextlib
import secrets
import time
from collections.abc import Coroutine, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, TypeVar

from fastapi import Depends, Request

from reflectrm.api.access import count, note, request_id_of
from reflectrm.serving.admission import until_disconnected
from reflectrm.api.errors import status_of
from reflectrm.api.state import JudgeDep, ServiceState, StateDep
from reflectrm.serving.swap_checks import swap_result
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
    def observed(self, mode: str) -> Iterator[Recorder]:
        """Record how the request ends: yields a Recorder for success (one pair, or many); a
        failure is counted once, under the status it will be answered with."""
        metrics = self.state.metrics
        try:
            yield Recorder(self, mode)
        except BaseException as exc:
            outcome = outcome_of_status(status_of(exc))
            metrics.observe_request(mode, outcome)
            note(self.http, mode=mode, outcome=outcome)
            raise


@dataclass
class Recorder:
    """Counts a request's pair judgments in the metrics and writes its log line."""

    call: Call
    mode: str

    def __call__(
        self, judgment: Judgment, swap: Judgment | None, outcome: str | None = None
    ) -> None:
        """One pair: its judgment, the swapped-order one if it ran, and the answer's outcome
        when it is not the first order's (debias swap)."""
        self.count_swap(judgment, swap)
        self.call.state.metrics.observe_request(
            self.mode, outcome or judgment.outcome, time.monotonic() - self.call.started
        )
        usage = judgment.usage + swap.usage if swap else judgment.usage
        note(self.call.http, mode=self.mode, outcome=outcome or judgment.outcome)
        note(self.call.http, winner=judgment.winner)
        count(
            self.call.http,
            engine_requests=usage.engine_requests,
            prompt_tokens=usage.prompt_tokens,
            generated_tokens=usage.generated_tokens,
        )

    def count_swap(self, judgment: Judgment, swap: Judgment | None) -> None:
        if swap is not None:
            result = swap_result(consistent(judgment, swap))
            self.call.state.metrics.observe_swap_check("requested", result)

    def many(self, what: str, outcomes: Sequence[tuple[str, str]], generated_tokens: int) -> None:
        """Several pairs answered in one request (a batch, a group): each is counted as a pair
        judgment by (mode, outcome), the outcome an answer's or an item's error status's."""
        seconds = time.monotonic() - self.call.started
        for mode, outcome in outcomes:
            self.call.state.metrics.observe_request(mode, outcome, seconds)
        note(self.call.http, mode=self.mode, pairs=len(outcomes), what=what)
        count(self.call.http, generated_tokens=generated_tokens)


def get_call(request: Request, state: StateDep, judge: JudgeDep) -> Call:
    return Call(state=state, judge=judge, http=request, request_id=request_id_of(request))


CallDep = Annotated[Call, Depends(get_call)]
