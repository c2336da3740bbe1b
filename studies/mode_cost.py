"""Judgments per second and engine work per judgment of the judging modes, side by side on one
real engine: rounds in which each mode judges the same pairs (both orders) at the same
concurrency, the modes' order alternating between rounds, so that a slow spell of the machine
falls on every mode alike.

    python -m studies.mode_cost --model default --pairs heldout.jsonl --out mode-cost.json \
        --mode margin --mode single --mode reflect --pairs-per-round 16 --rounds 3

Writes per mode: judgments, seconds, judgments per second (median over rounds and overall),
generated and prompt tokens per judgment, engine requests per judgment.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from pathlib import Path
from typing import Any

from reflectrm.engines.factory import open_engine
from reflectrm.judging.judge import Judge
from reflectrm.judging.types import MODES, JudgmentSpec, Mode
from reflectrm.settings import Settings
from reflectrm_harness.datasets import pair_from_row, read_rows


async def one_round(
    judge: Judge, specs: list[JudgmentSpec], concurrency: int, tag: str
) -> dict[str, Any]:
    queue = list(enumerate(specs))
    usage: list[Any] = []

    async def worker() -> None:
        while queue:
            k, spec = queue.pop(0)
            j = await judge.judge(spec, f"{tag}-{k}")
            usage.append(j.usage)

    started = time.monotonic()
    await asyncio.gather(*(worker() for _ in range(concurrency)))
    seconds = time.monotonic() - started
    return {
        "judgments": len(specs),
        "seconds": seconds,
        "generated_tokens": sum(u.generated_tokens for u in usage),
        "prompt_tokens": sum(u.prompt_tokens for u in usage),
        "engine_requests": sum(u.engine_requests for u in usage),
    }


async def main_async(args: argparse.Namespace) -> dict[str, Any]:
    settings = Settings(model=args.model)
    rows = [row for _, row in read_rows(args.pairs)]
    pairs = [pair_from_row(r) for r in rows[: args.pairs_per_round * args.rounds]]
    modes: list[Mode] = list(args.mode)
    per_mode: dict[str, list[dict[str, Any]]] = {m: [] for m in modes}
    async with open_engine(settings.engine_config()) as engine:
        judge = Judge(engine, settings.judge_config())
        for r in range(args.rounds):
            chunk = pairs[r * args.pairs_per_round : (r + 1) * args.pairs_per_round]
            order = modes if r % 2 == 0 else list(reversed(modes))
            for mode in order:
                specs = [
                    JudgmentSpec(p.conversation, p.present(first).responses, mode=mode,
                                 max_tokens=args.max_tokens, seed=k)
                    for k, p in enumerate(chunk)
                    for first in (1, 2)
                ]  # fmt: skip
                result = await one_round(judge, specs, args.concurrency, f"r{r}-{mode}")
                per_mode[mode].append(result)
                print(mode, r, f"{result['judgments'] / result['seconds']:.2f}/s", flush=True)
    given = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    summary: dict[str, Any] = {"argv": given, "modes": {}}
    for name, results in per_mode.items():
        n = sum(x["judgments"] for x in results)
        summary["modes"][name] = {
            "judgments": n,
            "seconds": sum(x["seconds"] for x in results),
            "judgments_per_s": n / sum(x["seconds"] for x in results),
            "judgments_per_s_median_round": statistics.median(
                x["judgments"] / x["seconds"] for x in results
            ),
            "generated_tokens_per_judgment": sum(x["generated_tokens"] for x in results) / n,
            "prompt_tokens_per_judgment": sum(x["prompt_tokens"] for x in results) / n,
            "engine_requests_per_judgment": sum(x["engine_requests"] for x in results) / n,
            "rounds": results,
        }
    return summary


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="default")
    ap.add_argument("--pairs", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--mode", action="append", required=True, choices=MODES)
    ap.add_argument("--pairs-per-round", type=int, default=16)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--concurrency", type=int, default=16)
    ap.add_argument("--max-tokens", type=int, default=160)
    summary = asyncio.run(main_async(ap.parse_args()))
    out = ap.parse_args().out
    out.write_text(json.dumps(summary, indent=1))
    for mode, m in summary["modes"].items():
        print(
            f"{mode:8s} {m['judgments_per_s']:.3f} judgments/s, "
            f"{m['generated_tokens_per_judgment']:.1f} generated and "
            f"{m['prompt_tokens_per_judgment']:.0f} prompt tokens, "
            f"{m['engine_requests_per_judgment']:.2f} requests per judgment"
        )


if __name__ == "__main__":
    main()
