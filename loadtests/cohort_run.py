"""Cohorts as OpenRLHF makes them, measured on the real service (its vLLM engine, the default
model).

OpenRLHF posts each sample to ``--reward.remote_url`` alone, right after it is generated; the N
samples of a prompt finish at different times. This run starts ``reflectrm serve`` on a free
loopback port (or uses ``--url``), and for ``--prompts`` prompts at once sends each prompt's
``--group-size`` samples as separate ``POST /get_reward?group_size=N`` calls, each after a seeded
random delay of up to ``--spread`` seconds (its generation ending), in OpenRLHF's body
(``query`` = the chat-formatted prompt + the response, ``prompts``, ``labels`` null). With
``--missing`` k, k prompts lose one sample (a generation that failed): their cohorts are cut by
``--cohort-timeout``. It counts every call's status, checks every answer carries a group reward
of a whole (or flagged cut) cohort, and reads the cohort metrics from ``/metrics`` (cohort wait,
cohorts closed, judgments per reward, engine tokens). Writes ``cohort_run.json`` and
``cohort_run.md`` to ``--out`` and stops the service (SIGINT first, by its pid).

    flock /tmp/reflectrm-engine.lock env PYTHONPATH=service .venv/bin/python \
        -m loadtests.cohort_run --out docs/records/cohort-load-openrlhf
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.metrics import by_label, parse_metrics
from loadtests.common.process import RunError, served
from loadtests.summary import latency_summary

ROOT = Path(__file__).resolve().parents[1]
# Short questions with rollouts of mixed quality (one repeated, as GRPO groups repeat short
# answers), so the engine time goes to judging, not to long prompts.
PROMPTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("What is the capital of France?", ("Paris.", "Lyon.", "The capital is Paris.", "Paris.")),
    ("What is 7 times 8?", ("56", "54", "7 x 8 = 56.", "It is 48.")),
    ("Name a primary colour.", ("Red.", "Green.", "Blue is one.", "Purple.")),
    ("Who wrote Hamlet?", ("Shakespeare.", "Dickens.", "William Shakespeare.", "Marlowe.")),
    ("What gas do plants take in?", ("Carbon dioxide.", "Oxygen.", "CO2.", "Helium.")),
    ("How many legs does a spider have?", ("Eight.", "Six.", "8", "Ten.")),
    ("What is the largest planet?", ("Jupiter.", "Mars.", "Jupiter, by far.", "Saturn.")),
    ("What is H2O?", ("Water.", "Salt.", "It is water.", "Hydrogen.")),
)
COUNTERS = (
    "reflectrm_cohorts_closed_total",
    "reflectrm_cohort_wait_seconds_count",
    "reflectrm_cohort_wait_seconds_sum",
    "reflectrm_judgments_per_reward_ratio_count",
    "reflectrm_judgments_per_reward_ratio_sum",
    "reflectrm_engine_requests_total",
    "reflectrm_generated_tokens_total",
    "reflectrm_prompt_tokens_total",
    "reflectrm_merged_duplicates_total",
)


def chat_prompt(question: str) -> str:
    """The prompt as OpenRLHF decodes it after applying the policy's chat template."""
    return f"<|im_start|>user\n{question}<|im_end|>\n<|im_start|>assistant\n"


def openrlhf_body(prompt: str, text: str) -> dict[str, Any]:
    """One sample's ``/get_reward`` body as OpenRLHF posts it (``labels`` null)."""
    return {"query": [prompt + text], "prompts": [prompt], "labels": [None]}


def reward_fields(out: Mapping[str, Any]) -> dict[str, Any]:
    """A 200 reply's reward and the cohort figures of its ``extra_logs``."""
    logs = out["extra_logs"]
    return {
        "reward": out["rewards"][0],
        "no_verdict": logs["judge_no_verdict"][0],
        "arrived": logs["judge_cohort_arrived"][0],
        "cut": logs["judge_cohort_cut"][0],
        "cohort_wait_s": logs["judge_cohort_wait_s"][0],
        "judgments_per_reward": logs["judge_judgments_per_reward"][0],
        "generated_tokens_per_reward": logs["judge_generated_tokens_per_reward"][0],
    }


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--out", type=Path, default=ROOT / "docs" / "cohort-run")
    p.add_argument("--url", help="a running service (default: start one)")
    p.add_argument("--prompts", type=int, default=6, help="prompts at once (at most 8)")
    p.add_argument("--group-size", type=int, default=4, help="samples per prompt (at most 4)")
    p.add_argument("--strategy", default="knockout")
    p.add_argument("--mode", default="reflect")
    p.add_argument("--debias", default="swap")
    p.add_argument("--num-candidates", type=int, default=4)
    p.add_argument("--max-tokens", type=int, default=96)
    p.add_argument("--spread", type=float, default=10.0, help="arrival spread per prompt (s)")
    p.add_argument("--missing", type=int, default=1, help="prompts that lose one sample")
    p.add_argument("--cohort-timeout", type=float, default=30.0)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--max-concurrent", type=int, default=16)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    args = p.parse_args(argv)
    if not 1 <= args.prompts <= len(PROMPTS):
        p.error(f"--prompts must be 1 to {len(PROMPTS)}")
    if not 2 <= args.group_size <= 4:
        p.error("--group-size must be 2 to 4")
    if not 0 <= args.missing <= args.prompts:
        p.error("--missing must be 0 to --prompts")
    return args


def service_settings(args: argparse.Namespace) -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "service"),
        "REFLECTRM_KV_CACHE_GIB": "2",
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_MAX_CONCURRENT_JUDGMENTS": str(args.max_concurrent),
        "REFLECTRM_SWAP_CHECK_FRACTION": "0",  # no background engine work in the counts
    }


def counters(metrics: Mapping[str, float]) -> dict[str, float]:
    return {k: v for k, v in metrics.items() if k.partition("{")[0] in COUNTERS}


def change(after: Mapping[str, float], before: Mapping[str, float]) -> dict[str, float]:
    return {k: round(v - before.get(k, 0.0), 3) for k, v in after.items()}


def wait_quantiles(metrics: Mapping[str, float]) -> dict[str, float | None]:
    """The cohort-wait histogram's p50 and p95 (upper bucket bounds), from /metrics."""
    buckets = sorted(
        (float(series.split('le="')[1].split('"')[0]), value)
        for series, value in metrics.items()
        if series.startswith("reflectrm_cohort_wait_seconds_bucket")
    )
    total = buckets[-1][1] if buckets else 0.0
    out: dict[str, float | None] = {}
    for q in (0.5, 0.95):
        out[f"p{round(q * 100)}_s_at_most"] = next(
            (le for le, count in buckets if total and count >= q * total), None
        )
    return out


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    rng = random.Random(args.seed)
    params = {
        "group_size": args.group_size,
        "strategy": args.strategy,
        "mode": args.mode,
        "debias": args.debias,
        "num_candidates": args.num_candidates,
        "max_tokens": args.max_tokens,
        "cohort_timeout_s": args.cohort_timeout,
        "seed": args.seed,
    }
    plan = []
    for k, (question, rollouts) in enumerate(PROMPTS[: args.prompts]):
        texts = list(rollouts[: args.group_size])
        if k < args.missing:
            texts = texts[:-1]  # one generation failed: its cohort is cut by the timeout
        for text in texts:
            plan.append((k, chat_prompt(question), text, rng.uniform(0, args.spread)))
    limits = httpx.Limits(max_connections=len(plan) + 4)
    async with httpx.AsyncClient(base_url=url, timeout=600, limits=limits) as http:
        before = parse_metrics((await http.get("/metrics")).text, "reflectrm_")

        async def one(k: int, prompt: str, text: str, delay: float) -> dict[str, Any]:
            await asyncio.sleep(delay)
            started = time.monotonic()
            r = await http.post("/get_reward", params=params, json=openrlhf_body(prompt, text))
            call: dict[str, Any] = {
                "prompt": k,
                "response": text,
                "sent_after_s": round(delay, 2),
                "status": r.status_code,
                "seconds": round(time.monotonic() - started, 2),
            }
            if r.status_code == 200:
                call.update(reward_fields(r.json()))
            else:
                call["detail"] = r.text[:300]
            return call

        wall = time.monotonic()
        calls = list(await asyncio.gather(*(one(*p) for p in plan)))
        wall_s = time.monotonic() - wall
        after = parse_metrics((await http.get("/metrics")).text, "reflectrm_")
    diff = change(counters(after), counters(before))
    whole = [c for c in calls if c["status"] == 200 and not c["cut"]]
    cut = [c for c in calls if c["status"] == 200 and c["cut"]]
    expected_cut = sum(1 for k, *_ in plan if k < args.missing)
    rewards_for = len(whole) + len(cut)
    generated = sum(by_label(diff, "reflectrm_generated_tokens_total", "stage").values())
    prompt_tokens = sum(by_label(diff, "reflectrm_prompt_tokens_total", "stage").values())
    return {
        "params": params,
        "calls": calls,
        "statuses": dict(Counter(str(c["status"]) for c in calls)),
        "wall_s": round(wall_s, 1),
        "checks": {
            "all_200": all(c["status"] == 200 for c in calls),
            "whole_cohort_answers": len(whole),
            "expected_whole": len(plan) - expected_cut,
            "cut_answers": len(cut),
            "expected_cut": expected_cut,
            "every_answer_has_a_reward": all(
                0.0 <= c.get("reward", -1.0) <= 1.0 for c in calls if c["status"] == 200
            ),
        },
        "metrics_change": diff,
        "cohorts_closed": by_label(diff, "reflectrm_cohorts_closed_total", "how"),
        "cohort_wait_from_metrics": {
            "count": diff.get("reflectrm_cohort_wait_seconds_count", 0.0),
            "mean_s": round(
                diff.get("reflectrm_cohort_wait_seconds_sum", 0.0)
                / max(1.0, diff.get("reflectrm_cohort_wait_seconds_count", 0.0)),
                2,
            ),
            **wait_quantiles(after),
        },
        "cohort_wait_from_replies": latency_summary(c["cohort_wait_s"] for c in whole + cut),
        "call_seconds": latency_summary(c["seconds"] for c in calls if c["status"] == 200),
        "per_reward": {
            "judgments": round(
                sum(by_label(diff, "reflectrm_judgments_per_reward_ratio_sum", "").values())
                / max(
                    1.0,
                    sum(by_label(diff, "reflectrm_judgments_per_reward_ratio_count", "").values()),
                ),
                3,
            ),
            "engine_requests": round(
                sum(by_label(diff, "reflectrm_engine_requests_total", "stage").values())
                / max(1, rewards_for),
                2,
            ),
            "generated_tokens": round(generated / max(1, rewards_for), 1),
            "prompt_tokens": round(prompt_tokens / max(1, rewards_for), 1),
        },
    }


def markdown(report: Mapping[str, Any]) -> str:
    checks, per = report["checks"], report["per_reward"]
    wait, replies = report["cohort_wait_from_metrics"], report["cohort_wait_from_replies"]
    p = report["params"]
    lines = [
        "# Cohorts as OpenRLHF makes them",
        "",
        f"`{report['command']}`",
        "",
        f"{report['sizes']['prompts']} prompts at once, {p['group_size']} per-sample "
        f"`/get_reward` calls each (arrivals spread over {report['sizes']['spread_s']:g} s), "
        f"{report['sizes']['missing']} prompt(s) missing one sample; strategy {p['strategy']}, "
        f"mode {p['mode']}, debias {p['debias']}, num_candidates {p['num_candidates']}, "
        f"max_tokens {p['max_tokens']}, cohort timeout {p['cohort_timeout_s']:g} s.",
        "",
        "| figure | value |",
        "|---|---:|",
        f"| calls | {len(report['calls'])} |",
        f"| statuses | {report['statuses']} |",
        f"| answers from whole cohorts (expected) | {checks['whole_cohort_answers']} "
        f"({checks['expected_whole']}) |",
        f"| answers from cut cohorts, flagged (expected) | {checks['cut_answers']} "
        f"({checks['expected_cut']}) |",
        f"| cohorts closed | {report['cohorts_closed']} |",
        f"| cohort wait, mean (metrics) | {wait['mean_s']} s |",
        f"| cohort wait, p50 / p95 bucket (metrics) | {wait['p50_s_at_most']} / "
        f"{wait['p95_s_at_most']} s |",
        f"| cohort wait, median / max (replies) | {replies['p50_s']} / {replies['max_s']} s |",
        f"| call time, median / max | {report['call_seconds']['p50_s']} / "
        f"{report['call_seconds']['max_s']} s |",
        f"| judgments per reward | {per['judgments']} |",
        f"| engine requests per reward | {per['engine_requests']} |",
        f"| generated tokens per reward | {per['generated_tokens']} |",
        f"| prompt tokens per reward | {per['prompt_tokens']} |",
        f"| wall time | {report['wall_s']} s |",
        "",
    ]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join(["python -m loadtests.cohort_run", *(argv or sys.argv[1:])]),
        "machine": {"cpus": os.cpu_count(), "load_average_at_start": os.getloadavg()},
        "sizes": {"prompts": args.prompts, "spread_s": args.spread, "missing": args.missing},
    }
    log = args.out / "service.log"
    try:
        with served(args.url, log, service_settings(args), args.ready_timeout, report) as url:
            report.update(asyncio.run(measure(url, args)))
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    (args.out / "cohort_run.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "cohort_run.md").write_text(markdown(report))
    print(markdown(report))
    checks = report["checks"]
    good = (
        checks["all_200"]
        and checks["whole_cohort_answers"] == checks["expected_whole"]
        and checks["cut_answers"] == checks["expected_cut"]
        and checks["every_answer_has_a_reward"]
    )
    return 0 if good else 1


if __name__ == "__main__":
    raise SystemExit(main())
