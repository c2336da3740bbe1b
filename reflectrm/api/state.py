"""What the routes reach through dependencies: the judge, once the engine is up."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, HTTPException, Request

from reflectrm.engines.base import Engine
from reflectrm.judging.judge import Judge
from reflectrm.settings import Settings


@dataclass
class ServiceState:
    settings: Settings
    judge: Judge | None = None
    # Why the engine is not serving (still loading, failed to load); None once ready.
    unavailable: str | None = "the engine is loading; retry when GET /ready answers 200"
    in_flight: int = 0
    background: set[object] = field(default_factory=set)

    @property
    def engine(self) -> Engine | None:
        return self.judge.engine if self.judge else None


def get_state(request: Request) -> ServiceState:
    state: ServiceState = request.app.state.reflectrm
    return state


def get_judge(request: Request) -> Judge:
    state = get_state(request)
    if state.judge is None:
        raise HTTPException(503, detail=state.unavailable or "the engine is not ready")
    return state.judge


StateDep = Annotated[ServiceState, Depends(get_state)]
JudgeDep = Annotated[Judge, Depends(get_judge)]
