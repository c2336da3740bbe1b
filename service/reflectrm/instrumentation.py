"""The engine and the judge with their work recorded in the metrics, without touching either.

``MeteredEngine`` sees every engine request (tokens and outputs by stage); ``MeteredJudge`` sees
every judgment run (stage durations, early exits, parse failures, vote margins), whoever starts
it: a request, its check_swap twin, or a sampled background swap check.
"""

from __future__ import annotations

from reflectrm.engines.base import Engine, GenerationResult, Prompt, SamplingSpec, WrappedEngine
from reflectrm.engines.request_ids import stage_of
from reflectrm.judging.judge import Judge, JudgeConfig, PreparedJudgment
from reflectrm.judging.types import Judgment
from reflectrm.metrics import Metrics


class MeteredEngine(WrappedEngine):
    """An Engine that records each completed request in the metrics."""

    def __init__(self, inner: Engine, metrics: Metrics) -> None:
        super().__init__(inner)
        self._metrics = metrics

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        result = await self.inner.generate(prompt, spec, request_id)
        self._metrics.observe_engine_request(stage_of(request_id), result)
        return result


class MeteredJudge(Judge):
    """A Judge on a MeteredEngine that records every run it completes."""

    def __init__(self, engine: Engine, config: JudgeConfig, metrics: Metrics) -> None:
        super().__init__(MeteredEngine(engine, metrics), config)
        self.metrics = metrics

    async def run(self, prepared: PreparedJudgment, request_id: str) -> Judgment:
        judgment = await super().run(prepared, request_id)
        self.metrics.observe_run(judgment)
        return judgment
