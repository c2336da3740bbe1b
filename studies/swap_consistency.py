"""Online positional consistency against the offline figure, on the real engine.

Starts ``reflectrm serve`` (harness) with every answered judgment sampled for a background swap
check (``REFLECTRM_SWAP_CHECK_FRACTION=1``), posts pairs of a shared-schema file to ``/v1/judge``
(each in the order the file gives, chosen response first for half of them by a seeded draw),
waits until no check is pending or running, and reads ``reflectrm_swap_checks_total`` from
``/metrics``: the online rate is consistent / (consistent + inconsistent). The offline figure is
the same pairs judged in both orders by ``reflectrm eval`` (its ``results.jsonl``, same mode):
the share of pairs whose two orders name the same response, among those with a verdict in both.
Both with a Wilson 95% interval; the JSON output holds both and every check's result.

    env PYTHONPATH=service .venv/bin/python -m studies.swap_consistency \\
        --pairs runs/heldout.jsonl.gz --limit 100 --model service/reflectrm/artifacts/smollm2 \\
        --offline runs/judge-eval/heldout/results.jsonl \\
        --out docs/records/online-vs-offline-consistency
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import random
import sys
import time
from pathlib import Path
from typing import Any

import httpx

from loadtests.common.metrics import parse_metrics
from loadtests.common.process import launch_service, stop_process, wait_ready
from reflectrm_harness.datasets import read_pairs
from reflectrm_harness.training.judge.figures import wilson


def offline_consistency(results: Path, ids: set[str], mode: str) -> dict[str, Any]:
    """Pairs of ``ids`` whose two orders in an eval's results name the same response."""
    verdicts: dict[str, dict[int, str | None]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("mode") != mode or row.get("pair_id") not in ids:
            continue
        # A verdict in the numbering of the file's responses: which one won, chosen or rejected.
        winner = row.get("winner")
        chosen_at = row.get("chosen_position")
        named = None if winner not in (1, 2) else ("chosen" if winner == chosen_at else "rejected")
        verdicts.setdefault(row["pair_id"], {})[chosen_at] = named
    both = [v for v in verdicts.values() if len(v) == 2 and None not in v.values()]
    same = sum(1 for v in both if v[1] == v[2])
    return {
        "pairs": len(verdicts),
        "with_verdicts_in_both_orders": len(both),
        "consistent": same,
        "rate": same / len(both) if both else math.nan,
        "rate_95": wilson(same, len(both)),
    }


async def post_all(
    url: str, pairs: list[Any], mode: str, max_tokens: int, concurrency: int, seed: int
) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    orders = [1 if rng.random() < 0.5 else 2 for _ in pairs]
    gate = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=600.0) as client:

        async def one(pair: Any, chosen_at: int) -> dict[str, Any]:
            responses, _ = pair.present(chosen_at)
            body = {
                "messages": [{"role": m.role, "content": m.content} for m in pair.conversation],
                "responses": list(responses),
                "mode": mode,
                "max_tokens": max_tokens,
                "seed": seed,
            }
            async with gate:
                r = await client.post("/v1/judge", json=body)
            return {
                "pair_id": pair.id,
                "chosen_position": chosen_at,
                "status": r.status_code,
                "winner": r.json().get("winner") if r.status_code == 200 else None,
            }

        return list(await asyncio.gather(*(one(p, o) for p, o in zip(pairs, orders, strict=True))))


def checks(url: str) -> dict[str, float]:
    text = httpx.get(url + "/metrics", timeout=30.0).text
    values = parse_metrics(text, by="labels", prefix="reflectrm_swap_checks")
    out: dict[str, float] = {}
    for (name, labels), value in values.items():
        if name == "reflectrm_swap_checks_total":
            result = dict(labels)["result"]
            out[result] = out.get(result, 0.0) + value
        elif name in ("reflectrm_swap_checks_pending", "reflectrm_swap_checks_running"):
            out[name.removeprefix("reflectrm_swap_checks_")] = value
        elif name == "reflectrm_swap_checks_dropped_total":
            out["dropped"] = out.get("dropped", 0.0) + value
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", required=True, type=Path)
    p.add_argument(
        "--limit",
        type=int,
        default=100,
        help="the first N pairs of the file (with --offline: of those the offline run judged)",
    )
    p.add_argument("--model", required=True)
    p.add_argument("--mode", default="single")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--offline", type=Path, help="an eval's results.jsonl on the same pairs")
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    args = p.parse_args(argv)

    pairs = list(read_pairs(args.pairs))
    if args.offline is not None:
        judged = {json.loads(line).get("pair_id") for line in args.offline.read_text().splitlines()}
        pairs = [p for p in pairs if p.id in judged]
    pairs = pairs[: args.limit]
    args.out.mkdir(parents=True, exist_ok=True)
    settings = {
        "REFLECTRM_MODEL": args.model,
        "REFLECTRM_ENFORCE_FORMAT": "false",
        "REFLECTRM_SWAP_CHECK_FRACTION": "1",
        "REFLECTRM_SWAP_CHECK_MAX_PENDING": str(len(pairs)),
        "REFLECTRM_SWAP_CHECK_CONCURRENCY": str(args.concurrency),
        # Live traffic never cancels a check here: every check must be counted.
        "REFLECTRM_SWAP_CHECK_BUSY_IN_FLIGHT": str(4 * args.concurrency + 64),
        "REFLECTRM_KV_CACHE_GIB": "2",
    }
    service = launch_service(args.out / "serve.log", settings)
    started = time.monotonic()
    try:
        wait_ready(service.url, args.ready_timeout, service)
        answers = asyncio.run(
            post_all(service.url, pairs, args.mode, args.max_tokens, args.concurrency, args.seed)
        )
        deadline = time.monotonic() + 1800
        while True:
            seen = checks(service.url)
            if seen.get("pending", 0) == 0 and seen.get("running", 0) == 0:
                break
            if time.monotonic() > deadline:
                print("swap checks still pending after 30 min", file=sys.stderr)
                break
            time.sleep(2.0)
    finally:
        stop_process(service.proc)
    ok = sum(1 for a in answers if a["status"] == 200)
    same, differ = int(seen.get("consistent", 0)), int(seen.get("inconsistent", 0))
    online = {
        "judgments_posted": len(answers),
        "answered_200": ok,
        "checks": {k: seen.get(k, 0) for k in ("consistent", "inconsistent", "no_verdict")},
        "dropped": seen.get("dropped", 0),
        "rate": same / (same + differ) if same + differ else math.nan,
        "rate_95": wilson(same, same + differ),
    }
    report: dict[str, Any] = {
        "pairs_file": args.pairs.name,
        "pairs": len(pairs),
        "model": args.model,
        "mode": args.mode,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "seconds": round(time.monotonic() - started, 1),
        "online": online,
        "answers": answers,
    }
    if args.offline is not None:
        report["offline"] = offline_consistency(args.offline, {p.id for p in pairs}, args.mode)
    (args.out / "swap-consistency.json").write_text(json.dumps(report, indent=1) + "\n")
    print(json.dumps({k: v for k, v in report.items() if k != "answers"}, indent=1))
    return 0 if ok == len(answers) else 1


if __name__ == "__main__":
    raise SystemExit(main())
