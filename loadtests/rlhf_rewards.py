"""Measure the RLHF reward endpoints against a running service (real engine):

1. reward accuracy and position bias, debias none vs swap, on RewardBench pairs: each pair is one
   `/v1/rewards` call (strategy reference, the chosen response as the completion, the rejected
   one as the reference, debias swap), so both orders are judged with one seed. "none" is read
   from the single orders (what a debias-none call shows: one of the two, by a coin), "swap"
   from their average. The other presentation (rejected as the completion) is the mirror image
   under the same seed: the same two judgments, so the same figures.
2. group ranking on RM-Bench: per item a group of two chosen and two rejected responses, the
   third chosen response as the reference; how often each strategy ranks both chosen above both
   rejected (random rewards: 1 in 6), and its cost; for round_robin the mean score against a
   Bradley-Terry fit of the same comparisons.
3. throughput: the same pair judgments (same seeds) sent as one group, as one batch, all at
   once as single calls, and one by one.

    flock /tmp/reflectrm-engine.lock env REFLECTRM_MAX_TOKENS=48 ... reflectrm serve &
    python loadtests/rlhf_rewards.py --url http://127.0.0.1:8000 --pairs 24 --groups 8 \
        --out runs/rlhf_rewards.json
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import math
import random
import statistics
import time
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

BENCH = Path(__file__).resolve().parents[2] / "shared" / "data" / "benchmarks"


def read(name: str) -> list[dict[str, Any]]:
    with gzip.open(BENCH / name, "rt") as f:
        return [json.loads(line) for line in f]


def conversation(row: dict[str, Any]) -> dict[str, Any]:
    if row.get("messages"):
        return {"messages": row["messages"]}
    return {"prompt": row["prompt"]}


def size(row: dict[str, Any], *texts: str) -> int:
    conv = row.get("prompt") or json.dumps(row.get("messages"))
    return len(conv) + sum(len(t) for t in texts)


async def post(http: httpx.AsyncClient, path: str, body: dict[str, Any]) -> dict[str, Any]:
    r = await http.post(path, json=body)
    r.raise_for_status()
    out: dict[str, Any] = r.json()
    return out


# --- 1. accuracy and position bias ----------------------------------------------------------


async def accuracy(http: httpx.AsyncClient, n: int, seed: int, max_chars: int) -> dict[str, Any]:
    rows = [
        r for r in read("rewardbench.jsonl.gz") if size(r, r["chosen"], r["rejected"]) <= max_chars
    ]
    sample = random.Random(seed).sample(rows, n)
    started = time.monotonic()
    bodies = [
        {
            **conversation(r),
            "completions": [r["chosen"]],
            "reference": r["rejected"],
            "strategy": "reference",
            "debias": "swap",
            "seed": seed + i,
        }
        for i, r in enumerate(sample)
    ]
    results = await asyncio.gather(*[post(http, "/v1/rewards", b) for b in bodies])
    seconds = time.monotonic() - started
    orders = []  # per single order: (chosen shown first, verdict for chosen / None)
    swap = []  # per pair: the averaged reward of the chosen response
    for res in results:
        comp = res["comparisons"][0]
        swap.append(res["rewards"][0])
        for order in comp["orders"]:
            w = order["winner"]
            orders.append((order["first"] == 0, None if w is None else w == 0))
    verdicts = [(first, v) for first, v in orders if v is not None]
    first_picks = sum(first == v for first, v in verdicts)  # the chosen won iff shown first
    swap_decided = [r for r in swap if r is not None and abs(r - 0.5) > 1e-9]
    consistent = [res["comparisons"][0]["consistent"] for res in results]
    tokens = sum(res["usage"]["generated_tokens"] for res in results)
    return {
        "pairs": n,
        "none": {
            "judgments": len(orders),
            "accuracy": sum(bool(v) for _, v in orders) / len(orders),
            "no_verdict": sum(v is None for _, v in orders) / len(orders),
            "first_shown_share": first_picks / len(verdicts) if verdicts else None,
        },
        "swap": {
            "accuracy": sum(r is not None and r > 0.5 + 1e-9 for r in swap) / n,
            "ties_or_no_verdict": (n - len(swap_decided)) / n,
            "accuracy_when_decided": (
                sum(r > 0.5 for r in swap_decided) / len(swap_decided) if swap_decided else None
            ),
            "consistent": sum(c is True for c in consistent) / n,
            "mean_reward_chosen": statistics.mean(r if r is not None else 0.5 for r in swap),
        },
        "seconds": round(seconds, 1),
        "generated_tokens": tokens,
    }


# --- 2. group ranking ------------------------------------------------------------------------


def rmbench_groups(n: int, seed: int, max_chars: int) -> list[dict[str, Any]]:
    items: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for row in read("rm-bench.jsonl.gz"):
        items[row["item_id"]].append(row)
    groups = []
    for item_id, rows in sorted(items.items()):
        chosen = {r["chosen_style"]: r["chosen"] for r in rows}
        rejected = {r["rejected_style"]: r["rejected"] for r in rows}
        keep = ("concise", "detailed_plain")
        if (
            not all(s in chosen and s in rejected for s in keep)
            or "detailed_markdown" not in chosen
        ):
            continue
        texts = [chosen[s] for s in keep] + [rejected[s] for s in keep]
        if len(set(texts)) < 4:
            continue
        row = rows[0]
        if size(row, *texts, chosen["detailed_markdown"]) > max_chars:
            continue
        groups.append(
            {
                "item_id": item_id,
                "subset": row["subset"],
                "conversation": conversation(row),
                "texts": texts,
                "chosen": [True, True, False, False],
                "reference": chosen["detailed_markdown"],
            }
        )
    rng = random.Random(seed)
    picked = rng.sample(groups, n)
    for g in picked:  # a seeded order per group, so position in the group means nothing
        order = list(range(4))
        rng.shuffle(order)
        g["texts"] = [g["texts"][i] for i in order]
        g["chosen"] = [g["chosen"][i] for i in order]
    return picked


def ranks_every_chosen_first(rewards: Sequence[float | None], chosen: list[bool]) -> bool:
    known = [r for r in rewards if r is not None]
    if len(known) < len(rewards):
        return False
    good = [r for r, c in zip(known, chosen, strict=True) if c]
    bad = [r for r, c in zip(known, chosen, strict=True) if not c]
    return min(good) > max(bad)


def _ranking(scores: Sequence[float]) -> list[int]:
    """Indices from the highest score to the lowest (ties in index order)."""
    return sorted(range(len(scores)), key=lambda i: -scores[i])


def bradley_terry(n: int, comparisons: list[dict[str, Any]], iters: int = 200) -> list[float]:
    """Bradley-Terry strengths from soft wins (each comparison's debiased scores), fitted by the
    MM algorithm (Hunter 2004) with a tiny prior (half a win and a loss against an average
    opponent); returned as each completion's mean win probability against the others."""
    wins = [0.5] * n
    games: list[list[tuple[int, float]]] = [[] for _ in range(n)]
    for c in comparisons:
        if all(o["winner"] is None for o in c["orders"]):
            continue  # no verdict in any order: no information
        a, b = c["pair"]
        wins[a] += c["scores"][0]
        wins[b] += c["scores"][1]
        games[a].append((b, 1.0))
        games[b].append((a, 1.0))
    p = [1.0] * n
    for _ in range(iters):
        new = []
        for i in range(n):
            denom = 1.0 / (p[i] + 1.0) + sum(w / (p[i] + p[j]) for j, w in games[i])
            new.append(wins[i] / denom)
        scale = math.exp(statistics.mean(math.log(x) for x in new))
        p = [x / scale for x in new]
    return [statistics.mean(p[i] / (p[i] + p[j]) for j in range(n) if j != i) for i in range(n)]


async def group_ranking(http: httpx.AsyncClient, groups: list[dict[str, Any]], seed: int) -> dict:
    out: dict[str, Any] = {"groups": len(groups)}
    for strategy in ("reference", "pivot", "round_robin"):
        started = time.monotonic()
        bodies = []
        for k, g in enumerate(groups):
            body = {**g["conversation"], "completions": g["texts"], "strategy": strategy}
            if strategy == "reference":
                body["reference"] = g["reference"]
            bodies.append({**body, "debias": "swap", "seed": seed + k})
        results = await asyncio.gather(*[post(http, "/v1/rewards", b) for b in bodies])
        seconds = time.monotonic() - started
        success = [
            ranks_every_chosen_first(r["rewards"], g["chosen"])
            for r, g in zip(results, groups, strict=True)
        ]
        row: dict[str, Any] = {
            "success": sum(success) / len(groups),
            "judgments_per_group": statistics.mean(r["judgments"] for r in results),
            "generated_tokens_per_group": statistics.mean(
                r["usage"]["generated_tokens"] for r in results
            ),
            "prompt_tokens_per_group": statistics.mean(
                r["usage"]["prompt_tokens"] for r in results
            ),
            "seconds": round(seconds, 1),
        }
        if strategy == "round_robin":
            bt = [
                ranks_every_chosen_first(bradley_terry(4, r["comparisons"]), g["chosen"])
                for r, g in zip(results, groups, strict=True)
            ]
            row["success_bradley_terry"] = sum(bt) / len(groups)
            row["bt_same_order_as_mean"] = sum(
                _ranking([r or 0 for r in res["rewards"]])
                == _ranking(bradley_terry(4, res["comparisons"]))
                for res in results
            ) / len(groups)
            out["round_robin_results"] = results
        out[strategy] = row
    return out


# --- 3. throughput ---------------------------------------------------------------------------


async def throughput(http: httpx.AsyncClient, groups: list[dict[str, Any]], seed: int) -> dict:
    """The round-robin comparisons of ``groups`` (both orders each), four ways."""
    group_bodies = [
        {
            **g["conversation"],
            "completions": g["texts"],
            "strategy": "round_robin",
            "debias": "swap",
            "seed": seed + k,
        }
        for k, g in enumerate(groups)
    ]
    out: dict[str, Any] = {}
    started = time.monotonic()
    group_results = await asyncio.gather(*[post(http, "/v1/rewards", b) for b in group_bodies])
    out["group"] = time.monotonic() - started
    judgments = sum(r["judgments"] for r in group_results)
    pairs = []  # the same judgments as /v1/judge bodies (the seeds each comparison used)
    for g, r in zip(groups, group_results, strict=True):
        for c in r["comparisons"]:
            a, b = c["pair"]
            pairs.append(
                {
                    **g["conversation"],
                    "responses": [g["texts"][a], g["texts"][b]],
                    "debias": "swap",
                    "seed": c["seed"],
                    "_scores": c["scores"],
                }
            )
    bodies = [{k: v for k, v in p.items() if k != "_scores"} for p in pairs]
    started = time.monotonic()
    batch = await post(http, "/v1/judge/batch", {"items": bodies})
    out["batch"] = time.monotonic() - started
    started = time.monotonic()
    await asyncio.gather(*[post(http, "/v1/judge", b) for b in bodies])
    out["concurrent_singles"] = time.monotonic() - started
    started = time.monotonic()
    singles = [await post(http, "/v1/judge", b) for b in bodies]
    out["one_by_one"] = time.monotonic() - started
    same = sum(
        s["scores"] == p["_scores"] == item["result"]["scores"]
        for s, p, item in zip(singles, pairs, batch["results"], strict=True)
    )
    return {
        "judgments": judgments,
        "seconds": {k: round(v, 1) for k, v in out.items()},
        "judgments_per_s": {k: round(judgments / v, 3) for k, v in out.items()},
        "same_scores_all_four_ways": f"{same}/{len(pairs)}",
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=256)
    async with httpx.AsyncClient(base_url=args.url, timeout=3600, limits=limits) as http:
        info = (await http.get("/ready")).json()
        report: dict[str, Any] = {"model": info.get("model"), "args": vars(args)}
        if args.pairs:
            report["accuracy"] = await accuracy(http, args.pairs, args.seed, args.max_chars)
            print(json.dumps(report["accuracy"], indent=1), flush=True)
        groups = rmbench_groups(args.groups, args.seed, args.group_max_chars) if args.groups else []
        if groups:
            report["groups"] = await group_ranking(http, groups, args.seed)
            print(
                json.dumps(
                    {k: v for k, v in report["groups"].items() if k != "round_robin_results"},
                    indent=1,
                ),
                flush=True,
            )
        if args.throughput_groups:
            tg = rmbench_groups(args.throughput_groups, args.seed + 1, args.group_max_chars)
            report["throughput"] = await throughput(http, tg, args.seed + 1000)
            print(json.dumps(report["throughput"], indent=1), flush=True)
    return report


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8000")
    parser.add_argument("--pairs", type=int, default=24)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--throughput-groups", type=int, default=2)
    parser.add_argument("--max-chars", type=int, default=1500, help="shorter pairs only")
    parser.add_argument("--group-max-chars", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    result = asyncio.run(main(args))
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, default=str))
