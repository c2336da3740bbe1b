"""The reward benchmark's tables (``python -m loadtests.bench rewards``), rendered from its
summary: the run's own report.md, and docs/performance.md's section between its ``rewards-bench``
markers (``scripts/rewards_bench_results.py``, from the copy under docs/records/bench-rewards/)."""

from __future__ import annotations

import statistics
from collections.abc import Mapping, Sequence
from typing import Any


def table_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


WHAT = {
    "floor": "raw engine, the minimal requests",
    "margin": "`/v1/judge`, margin, swap",
    "single": "`/v1/judge`, single, swap",
}


def ratio_by_round(pairs: Mapping[str, Any], a: str, b: str) -> list[float]:
    """``a``'s pairs per second over ``b``'s, round by round (the same spell of the machine)."""
    ra, rb = pairs[a]["pairs_per_s_by_round"], pairs[b]["pairs_per_s_by_round"]
    return [ra[r] / rb[r] for r in sorted(ra) if rb.get(r)]


def render(result: Mapping[str, Any]) -> str:
    run, pairs, steps = result["run"], result["summary"]["pairs"], result["summary"]["steps"]
    lines = [
        f"`{run['model']}`, {run['cpus']} CPUs, `VLLM_CPU_OMP_THREADS_BIND={run['omp_bind']}`; "
        f"`python -m loadtests.bench {' '.join(run['argv'])}`.",
        "",
        f"**Pooled pairs** (each pair in both orders, {run['concurrency']} pairs in flight, "
        f"{run['rounds']} rounds of {run['pairs_per_round']} pairs per contender; `floor` and "
        "`margin` judge the same pairs, each on its own engine, `single` others):",
        "",
        table_row(
            [
                "Contender",
                "pairs",
                "pooled pairs/s",
                "engine requests / pair",
                "prompt tokens / pair",
                "computed",
                "two verdict prompts",
                "computed / verdict prompts",
            ]
        ),
        table_row(["---"] + ["---:"] * 7),
    ]
    for name, p in pairs.items():
        failed = f" ({p['failed']} failed)" if p["failed"] else ""
        lines.append(
            table_row(
                [
                    f"`{name}`: {WHAT.get(name, name)}",
                    f"{p['pairs']}{failed}",
                    f"{p['pairs_per_s']:.3f}",
                    f"{p['engine_requests']:.2f}",
                    f"{p['prompt_tokens']:,.0f}",
                    f"{p['computed_prompt_tokens']:,.0f}",
                    f"{p['verdict_prompt_tokens']:,.0f}",
                    f"{p['computed_prompt_tokens'] / p['verdict_prompt_tokens']:.2f}",
                ]
            )
        )
    lines.append("")
    for a, b in (("margin", "floor"), ("single", "margin")):
        if a in pairs and b in pairs and pairs[b]["pairs_per_s"]:
            by_round = ratio_by_round(pairs, a, b)
            lines.append(
                f"- `{a}` / `{b}`, pooled pairs per second: "
                f"{pairs[a]['pairs_per_s'] / pairs[b]['pairs_per_s']:.2f} over the run; "
                f"round by round {', '.join(f'{x:.2f}' for x in by_round)} "
                f"(median {statistics.median(by_round):.2f})."
            )
    lines += [
        "",
        f"**GRPO steps** (each step: {run['prompts']} prompts x {run['group']} of the base "
        "policy's sampled completions, every step its own prompts; engine work read from "
        "`/metrics` before and after each step):",
        "",
        table_row(
            [
                "Path",
                "strategy",
                "steps",
                "rewards",
                "rewards/s",
                "engine requests / reward",
                "computed prompt tokens / reward",
            ]
        ),
        table_row(["---", "---"] + ["---:"] * 5),
    ]
    for key, s in steps.items():
        path, strategy = key.split("/")
        failed = f" ({s['failed']} failed)" if s["failed"] else ""
        lines.append(
            table_row(
                [
                    "`/v1/rewards`" if path == "api" else "TRL adapter",
                    f"`{strategy}`",
                    f"{s['steps']}{failed}",
                    f"{s['rewards']} of {s['completions']}",
                    f"{s['rewards_per_s']:.2f}",
                    f"{s['requests_per_reward']:.2f}",
                    f"{s['computed_prompt_tokens_per_reward']:,.0f}",
                ]
            )
        )
    return "\n".join(lines) + "\n"
