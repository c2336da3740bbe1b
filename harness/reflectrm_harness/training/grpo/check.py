"""A quick before/after measurement of a judge on pairs it never trained on.

Not the benchmark harness (reflectrm_harness.evaluation): one greedy judgment per pair and order
through the service's ``Judge``, with the output format *not* enforced, so it measures what
training is meant to teach a small model: writing a parseable verdict, and the right one.
"""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from reflectrm.engines import EngineConfig, open_engine
from reflectrm.engines.base import Engine
from reflectrm.judging.judge import Judge, JudgeConfig, PromptTooLongError
from reflectrm.judging.types import JudgmentSpec
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.grpo.export import add_evaluation


@dataclass(frozen=True)
class CheckConfig:
    max_tokens: int = 256
    enforce_format: bool = False
    template_version: str = "v1"
    concurrency: int = 16


@dataclass(frozen=True)
class CheckResult:
    pairs: int
    judgments: int  # two per pair: chosen shown first, then second
    parsed: int
    correct: int
    consistent_pairs: int  # right in both orders
    correct_by_order: dict[str, int]  # right verdicts with the chosen response shown first, second
    first_position_picks: int
    parse_errors: dict[str, int]
    skipped_too_long: int
    config: dict[str, object]
    # every judgment: the pair's id, where the chosen response was shown, the verdict read (None
    # when malformed) and why not
    verdicts: list[dict[str, object]]

    @property
    def parse_rate(self) -> float:
        return self.parsed / self.judgments if self.judgments else 0.0

    @property
    def accuracy(self) -> float:
        """Right verdicts over all judgments: a malformed output counts as wrong."""
        return self.correct / self.judgments if self.judgments else 0.0

    def summary(self) -> dict[str, object]:
        return {
            **asdict(self),
            "parse_rate": round(self.parse_rate, 4),
            "accuracy": round(self.accuracy, 4),
            "accuracy_of_parsed": round(self.correct / self.parsed, 4) if self.parsed else None,
            "consistency": round(self.consistent_pairs / self.pairs, 4) if self.pairs else 0.0,
            "accuracy_by_order": {
                k: round(v / self.pairs, 4) if self.pairs else 0.0
                for k, v in self.correct_by_order.items()
            },
        }


async def check(engine: Engine, pairs: Sequence[Pair], config: CheckConfig) -> CheckResult:
    judge = Judge(
        engine,
        JudgeConfig(template_version=config.template_version, enforce_format=config.enforce_format),
    )
    gate = asyncio.Semaphore(config.concurrency)

    async def one(i: int, pair: Pair, chosen_at: int) -> tuple[int, int, int | None, str | None]:
        shown = pair.present(chosen_at).responses
        request = JudgmentSpec(
            pair.conversation, shown, mode="single", max_tokens=config.max_tokens
        )
        async with gate:
            judgment = await judge.judge(request, f"check-{i}-{chosen_at}")
        candidate = judgment.trace.candidates[0]
        return i, chosen_at, candidate.verdict, candidate.parse_error

    fitting, skipped = [], 0
    for pair in pairs:
        try:
            judge.prepare(
                JudgmentSpec(
                    pair.conversation,
                    (pair.chosen, pair.rejected),
                    mode="single",
                    max_tokens=config.max_tokens,
                )
            )
            fitting.append(pair)
        except PromptTooLongError:
            skipped += 1
    results = await asyncio.gather(*(one(i, p, at) for i, p in enumerate(fitting) for at in (1, 2)))
    right = {(i, at) for i, at, verdict, _ in results if verdict == at}
    return CheckResult(
        pairs=len(fitting),
        judgments=len(results),
        parsed=sum(v is not None for _, _, v, _ in results),
        correct=len(right),
        consistent_pairs=sum((i, 1) in right and (i, 2) in right for i in range(len(fitting))),
        correct_by_order={
            "chosen_first": sum(at == 1 for _, at in right),
            "chosen_second": sum(at == 2 for _, at in right),
        },
        first_position_picks=sum(v == 1 for _, _, v, _ in results),
        parse_errors=dict(Counter(e for _, _, _, e in results if e is not None)),
        skipped_too_long=skipped,
        config=asdict(config),
        verdicts=[
            {"id": fitting[i].id, "chosen_at": at, "verdict": v, "parse_error": e}
            for i, at, v, e in results
        ],
    )


async def check_model(
    engine_config: EngineConfig, model: str, pairs: Sequence[Pair], config: CheckConfig
) -> dict[str, object]:
    """``check`` on an engine opened for ``model``: its summary, the model named."""
    async with open_engine(engine_config) as engine:
        result = await check(engine, pairs, config)
    return {"model": model, **result.summary()}


def save_check(
    summary: dict[str, object], out: Path | None, checkpoint: Path, record: str | None
) -> None:
    """The summary written to ``out`` as JSON and, under ``record``, into the checkpoint's
    manifest (the figures only: the per-judgment verdicts stay in ``out``)."""
    if out:
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps(summary, indent=2) + "\n")
    if record:
        add_evaluation(checkpoint, record, {k: v for k, v in summary.items() if k != "verdicts"})
