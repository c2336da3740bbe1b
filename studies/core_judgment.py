"""Measure the core judgment on the real engine: parseable stage-1 verdicts with and without
format enforcement, and the wall time of one ReflectRM judgment at the default settings.

    .venv/bin/python studies/core_judgment.py --pairs 20 --parse-max-tokens 256 \
        --timed-pairs 3 --out runs/core_judgment.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections import Counter
from pathlib import Path

from reflectrm.engines import open_engine
from reflectrm.judging.judge import Judge, JudgeConfig
from reflectrm.judging.types import JudgmentSpec
from reflectrm.settings import Settings, get_settings
from reflectrm_harness.datasets import read_pairs

DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks" / "rewardbench.jsonl.gz"
)


def load_pairs(n: int, seed: int) -> list[tuple[JudgmentSpec, int]]:
    """A seeded sample of RewardBench pairs in seeded random orders: (request, gold winner)."""
    rng = random.Random(seed)
    out = []
    for pair in rng.sample(list(read_pairs(DATA)), n):
        shown = pair.present(1 if rng.random() < 0.5 else 2)
        request = JudgmentSpec(conversation=pair.conversation, responses=shown.responses)
        out.append((request, shown.gold))
    return out


async def parse_rate(engine, pairs, enforce: bool, max_tokens: int) -> dict:
    judge = Judge(engine, JudgeConfig(enforce_format=enforce))
    started = time.monotonic()
    results = await asyncio.gather(
        *[
            judge.judge(
                JudgmentSpec(
                    conversation=r.conversation,
                    responses=r.responses,
                    mode="vote",
                    seed=i,
                    max_tokens=max_tokens,
                ),
                f"parse-{enforce}-{i}",
            )
            for i, (r, _) in enumerate(pairs)
        ]
    )
    wall = time.monotonic() - started
    cands = [c for j in results for c in j.trace.candidates]
    reasons = Counter(c.parse_error or "parsed" for c in cands)
    parsed = [c for c in cands if c.verdict is not None]
    return {
        "enforce_format": enforce,
        "max_tokens": max_tokens,
        "outputs": len(cands),
        "parsed": len(parsed),
        "parse_rate": len(parsed) / len(cands),
        "reasons": dict(reasons),
        "first_shown_share": (sum(c.verdict == 1 for c in parsed) / len(parsed))
        if parsed
        else None,
        "generated_tokens": sum(j.usage.generated_tokens for j in results),
        "wall_s": round(wall, 1),
    }


async def timed(engine, pairs, settings: Settings) -> dict:
    judge = Judge(engine, JudgeConfig())
    rows = []
    for i, (r, gold) in enumerate(pairs):
        req = JudgmentSpec(
            conversation=r.conversation,
            responses=r.responses,
            seed=i,
            max_tokens=settings.max_tokens,
        )
        started = time.monotonic()
        j = await judge.judge(req, f"timed-{i}")
        rows.append(
            {
                "wall_s": round(time.monotonic() - started, 1),
                "rollout_s": round(j.rollout_seconds, 1),
                "reflection_s": round(j.reflection_seconds, 1),
                "generated_tokens": j.usage.generated_tokens,
                "prompt_tokens": j.usage.prompt_tokens,
                "engine_requests": j.usage.engine_requests,
                "reflections": len(j.trace.reflections),
                "early_exit": j.early_exit,
                "correct": j.winner == gold,
            }
        )
    return {
        "max_tokens": settings.max_tokens,
        "judgments": rows,
        "median_wall_s": statistics.median(r["wall_s"] for r in rows),
    }


async def main(args: argparse.Namespace) -> None:
    settings = get_settings(early_exit=args.early_exit)
    pairs = load_pairs(args.pairs, args.sample_seed)
    report: dict = {"pairs": args.pairs, "sample_seed": args.sample_seed}
    async with open_engine(settings.engine_config()) as engine:
        report["parse"] = [
            await parse_rate(engine, pairs, enforce, args.parse_max_tokens)
            for enforce in (True, False)
        ]
        print(json.dumps(report["parse"], indent=2), flush=True)
        report["timed"] = await timed(engine, pairs[: args.timed_pairs], settings)
        print(json.dumps(report["timed"], indent=2), flush=True)
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=int, default=20)
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument("--parse-max-tokens", type=int, default=256)
    p.add_argument("--timed-pairs", type=int, default=3)
    p.add_argument("--early-exit", action=argparse.BooleanOptionalAction, default=True)
    p.add_argument("--out", default="runs/core_judgment.json")
    asyncio.run(main(p.parse_args()))
