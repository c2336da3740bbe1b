"""The judge with its work recorded in the metrics, without touching the judge or the engine.

Its engine is a ``MeteredEngine`` that sees every engine request (tokens and outputs by stage),
and its ``on_run`` sees every judgment run (stage durations, early exits, parse failures, vote
margins), whoever starts it: a request, its check_swap twin, or a sampled background swap check.
"""

from __future__ import annotations

from reflectrm.engines.base import Engine, GenerationResult, MeteredEngine
from reflectrm.engines.request_ids import stage_of
from reflectrm.judging.judge import Judge, JudgeConfig
from reflectrm.metrics import Metrics


def metered_judge(engine: Engine, config: JudgeConfig, metrics: Metrics) -> Judge:
    """A Judge on ``engine`` whose engine requests and judgments are recorded in ``metrics``."""

    def observe(request_id: str, result: GenerationResult) -> None:
        metrics.observe_engine_request(stage_of(request_id), result)

    return Judge(MeteredEngine(engine, observe), config, on_run=metrics.observe_run)
