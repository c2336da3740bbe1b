"""What the routes reach through dependencies: the judge, once the engine is up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from reflectrm.serving.admission import DEFAULT_RETRY_AFTER_S, Admission
from reflectrm.serving.swap_checks import SwapCheckConfig, SwapChecker
from reflectrm.judging.judge import Judge
from reflectrm.metrics import Metrics
from reflectrm.settings import Settings


@dataclass
class ServiceState:
    settings: Settings
    judge: Judge | None = None
    # Why the engine is not serving (still loading, failed to load); None once ready.
    unavailable: str | None = "the engine is loading; retry when GET /ready answers 200"
    metrics: Metrics = field(default_factory=Metrics)
    admission: Admission = field(init=False)
    swap_checks: SwapChecker = field(init=False)

    def __post_init__(self) -> None:
        s = self.settings
        self.admission = Admission(
            s.max_concurrent_judgments, s.max_queued_judgments, s.queue_timeout_s
        )
        self.admission.on_wait = self.metrics.observe_queue_wait
        self.metrics.track_admission(
            lambda: self.admission.in_flight, lambda: self.admission.queued
        )
        config = SwapCheckConfig(
            fraction=self.settings.swap_check_fraction,
            max_pending=self.settings.swap_check_max_pending,
            concurrency=self.settings.swap_check_concurrency,
            busy_in_flight=self.settings.swap_check_busy_in_flight,
            timeout_s=self.settings.request_timeout_s,
        )
        self.swap_checks = SwapChecker(config, self.metrics, live_load=self.live_load)

    def live_load(self) -> int:
        """Live judgments running or waiting for a slot."""
        return self.admission.in_flight + self.admission.queued


def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.reflectrm
    return state


def get_judge(request: Request) -> Judge:
    state = get_state(request)
    if state.judge is None:
        raise HTTPException(
            503,
            detail=state.unavailable or "the engine is not ready",
            headers={"Retry-After": str(DEFAULT_RETRY_AFTER_S)},
        )
    return state.judge


StateDep = Annotated[ServiceState, Depends(get_state)]
JudgeDep = Annotated[Judge, Depends(get_judge)]
