"""Measure what judgment affinity buys on a real fleet: two ``vllm serve`` replicas behind
``vllm-router --policy consistent_hash``, the judge's remote engine sending each judgment's id in
X-Session-ID (affinity on) or not (off: the router then hashes each engine request's own
X-Request-Id, so a judgment's requests spread over the replicas).

Paired: each round's RewardBench pairs (same seeds) are judged twice, once with affinity and once
without (the order alternates between rounds), each time from empty prefix caches (the replicas'
/reset_prefix_cache, a development endpoint enabled here by VLLM_SERVER_DEV_MODE=1), with the
same concurrency. Per phase: judgments/s, the replicas' prefix-cache hit rate (their own
vllm:prefix_cache_hits / queries counters), the requests each replica finished, and the
judgments' own cached-prompt-token share.

    flock /tmp/reflectrm-engine.lock .venv/bin/python -m loadtests.affinity \
        --judgments 8 --rounds 2 --concurrency 4 --out runs/affinity.json
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.fleet import Fleet, local_fleet
from reflectrm.engines import open_engine
from reflectrm.engines.config import EngineConfig, RemoteConfig
from reflectrm.judging.judge import Judge, JudgeConfig, PromptTooLongError
from reflectrm.judging.types import JudgmentSpec, Message

DATA = (
    Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks" / "rewardbench.jsonl.gz"
)


def load_requests(count: int, seed: int, max_chars: int, max_tokens: int) -> list[JudgmentSpec]:
    """Seeded RewardBench pairs short enough for two CPU replicas, as reflect-mode requests."""
    with gzip.open(DATA, "rt") as f:
        rows = [json.loads(line) for line in f]
    random.Random(seed).shuffle(rows)
    out: list[JudgmentSpec] = []
    for row in rows:
        conv = (
            tuple(Message(m["role"], m["content"]) for m in row["messages"])
            if row.get("messages")
            else (Message("user", row["prompt"]),)
        )
        size = sum(len(m.content) for m in conv) + len(row["chosen"]) + len(row["rejected"])
        if size > max_chars:
            continue
        out.append(
            JudgmentSpec(
                conversation=conv,
                responses=(row["chosen"], row["rejected"]),
                mode="reflect",
                num_candidates=8,
                seed=len(out),
                max_tokens=max_tokens,
            )
        )
        if len(out) == count:
            return out
    raise ValueError(f"only {len(out)} pairs are under {max_chars} characters")


def delta(after: dict[str, dict[str, float]], before: dict[str, dict[str, float]]) -> dict:
    return {name: {k: after[name][k] - before[name][k] for k in after[name]} for name in after}


async def phase(
    fleet: Fleet, requests: list[JudgmentSpec], affinity: bool, concurrency: int, tag: str
) -> dict[str, Any]:
    config = EngineConfig(
        kind="remote", remote=RemoteConfig(url=fleet.router_url, affinity=affinity)
    )
    async with open_engine(config) as engine:
        judge = Judge(engine, JudgeConfig(early_exit=False))
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int, request: JudgmentSpec) -> Any:
            async with slots:
                try:
                    return await judge.judge(request, f"{tag}-{i}")
                except PromptTooLongError:
                    return None

        before = await asyncio.to_thread(fleet.counters)
        started, cpu_started = time.monotonic(), time.process_time()
        results = await asyncio.gather(*[one(i, r) for i, r in enumerate(requests)])
        wall, cpu = time.monotonic() - started, time.process_time() - cpu_started
        await asyncio.sleep(1.0)  # the replicas record a request just after answering it
        after = await asyncio.to_thread(fleet.counters)
    done = [j for j in results if j is not None]
    moved = delta(after, before)
    queries = sum(m["vllm:prefix_cache_queries_total"] for m in moved.values())
    hits = sum(m["vllm:prefix_cache_hits_total"] for m in moved.values())
    prompt = sum(j.usage.prompt_tokens for j in done)
    cached = sum(j.usage.cached_prompt_tokens for j in done)
    return {
        "affinity": affinity,
        "judgments": len(done),
        "engine_requests": sum(j.usage.engine_requests for j in done),
        "wall_s": round(wall, 1),
        "judgments_per_s": round(len(done) / wall, 4),
        # The judge's own CPU time (this process: judging code, HTTP client, JSON).
        "judge_cpu_s_per_judgment": round(cpu / len(done), 4) if done else None,
        "prefix_cache_hit_rate": round(hits / queries, 4) if queries else None,
        "prefix_cache_queries": int(queries),
        "prefix_cache_hits": int(hits),
        "cached_prompt_share": round(cached / prompt, 4) if prompt else None,
        "prompt_tokens": prompt,
        "generated_tokens": sum(j.usage.generated_tokens for j in done),
        "requests_by_replica": {
            name: int(m["vllm:request_success_total"]) for name, m in moved.items()
        },
    }


def reset_caches(fleet: Fleet) -> None:
    for replica in fleet.replicas:
        answer = httpx.post(f"{replica.url}/reset_prefix_cache", timeout=30)
        answer.raise_for_status()
        if not answer.json().get("success"):
            raise RuntimeError(f"{replica.name} did not reset its prefix cache: {answer.text}")


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    requests = load_requests(
        args.judgments * args.rounds + 2, args.sample_seed, args.max_chars, args.max_tokens
    )
    phases = []
    dev = {"VLLM_SERVER_DEV_MODE": "1"}
    with local_fleet(replicas=2, log_dir=Path(args.log_dir), extra_env=dev) as fleet:
        # One warm-up pass, so no phase pays the first-request costs.
        await phase(fleet, requests[:2], True, 2, "warmup")
        for r in range(args.rounds):
            chunk = requests[2 + r * args.judgments : 2 + (r + 1) * args.judgments]
            for affinity in (True, False) if r % 2 == 0 else (False, True):
                await asyncio.to_thread(reset_caches, fleet)
                tag = f"r{r}-{'on' if affinity else 'off'}"
                result = await phase(fleet, chunk, affinity, args.concurrency, tag)
                result["round"] = r
                print(json.dumps(result), flush=True)
                phases.append(result)

    def summary(on: bool) -> dict[str, Any]:
        rows = [p for p in phases if p["affinity"] is on]
        return {
            "judgments_per_s": [p["judgments_per_s"] for p in rows],
            "judgments_per_s_mean": round(statistics.mean(p["judgments_per_s"] for p in rows), 4),
            "prefix_cache_hit_rate": [p["prefix_cache_hit_rate"] for p in rows],
            "cached_prompt_share": [p["cached_prompt_share"] for p in rows],
            "judge_cpu_s_per_judgment": [p["judge_cpu_s_per_judgment"] for p in rows],
            "prompt_tokens_per_judgment": round(
                sum(p["prompt_tokens"] for p in rows) / sum(p["judgments"] for p in rows), 1
            ),
            "generated_tokens_per_judgment": round(
                sum(p["generated_tokens"] for p in rows) / sum(p["judgments"] for p in rows), 1
            ),
        }

    return {
        "args": vars(args),
        "phases": phases,
        "affinity_on": summary(True),
        "affinity_off": summary(False),
    }


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--judgments", type=int, default=8, help="judgments per phase")
    p.add_argument("--rounds", type=int, default=2, help="pair sets, each judged on and off")
    p.add_argument("--concurrency", type=int, default=4, help="judgments in flight at once")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--max-chars", type=int, default=3000, help="longest pair (characters)")
    p.add_argument("--sample-seed", type=int, default=0)
    p.add_argument("--log-dir", default="runs/affinity-logs")
    p.add_argument("--out", default="runs/affinity.json")
    args = p.parse_args()
    report = asyncio.run(measure(args))
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(report, indent=2))
    print(json.dumps({k: report[k] for k in ("affinity_on", "affinity_off")}, indent=2))


if __name__ == "__main__":
    main()
