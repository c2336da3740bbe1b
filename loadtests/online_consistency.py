"""The online positional-consistency rate against the offline one, on the real service.

Starts ``reflectrm serve`` (the default judge, unless REFLECTRM_MODEL says otherwise) on a free
loopback port with every answered judgment sampled for a background swap check
(``REFLECTRM_SWAP_CHECK_FRACTION=1``), sends ``--pairs`` pairs of a shared-schema file to
``/v1/judge`` (``--mode``, in each pair's seeded random order, ``--concurrency`` at once), waits
until every sampled check has run, and reads ``reflectrm_swap_checks_total{source="sampled"}``
from ``/metrics``: the dashboard's "positional consistency rate" is consistent / (consistent +
inconsistent). Beside it, the offline figure on the same pairs from an evaluation's
``results.jsonl`` (``--offline``): the share of pairs whose two orders' verdicts name the same
response, with a 95% bootstrap interval. Writes ``online_consistency.json`` and ``.md`` to
``--out`` and stops the service (SIGINT first, by its pid).

    env PYTHONPATH=service .venv/bin/python -m loadtests.online_consistency \\
        --pairs runs/heldout.jsonl.gz --offline docs/judge-eval/heldout-trained/results.jsonl \\
        --out docs/judge-eval/online-consistency
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.fairness import parse_metrics
from loadtests.run import RunError, Service, launch_service, stop_process, wait_ready
from reflectrm.pairs import read_pairs

ROOT = Path(__file__).resolve().parents[1]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--pairs", required=True, type=Path)
    p.add_argument("--offline", required=True, type=Path, help="an evaluation's results.jsonl")
    p.add_argument("--limit", type=int, default=200, help="pairs to send (the file's first N)")
    p.add_argument("--mode", default="single")
    p.add_argument("--max-tokens", type=int, default=64)
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", required=True, type=Path)
    p.add_argument("--ready-timeout", type=float, default=900.0)
    p.add_argument("--drain-timeout", type=float, default=1800.0)
    return p.parse_args(argv)


def service_settings() -> dict[str, str]:
    return {
        "PYTHONPATH": str(ROOT / "service"),
        "REFLECTRM_KV_CACHE_GIB": "2",
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_SWAP_CHECK_FRACTION": "1",
        "REFLECTRM_SWAP_CHECK_MAX_PENDING": "100000",
        "REFLECTRM_SWAP_CHECK_CONCURRENCY": "4",
        "REFLECTRM_SWAP_CHECK_BUSY_IN_FLIGHT": "1000",
    }


def swap_counts(text: str) -> dict[str, float]:
    metrics = parse_metrics(text)
    out: dict[str, float] = {}
    for series, value in metrics.items():
        if series.startswith("reflectrm_swap_checks_total") and 'source="sampled"' in series:
            result = series.split('result="')[1].split('"')[0]
            out[result] = out.get(result, 0.0) + value
    return out


def offline_agreement(results: Path, ids: set[str], mode: str, seed: int) -> dict[str, Any]:
    """Share of pairs whose two orders name the same response (offline), with a bootstrap CI."""
    verdicts: dict[str, dict[int, int | None]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") != "result" or row.get("mode") != mode or row["pair_id"] not in ids:
            continue
        winner = row.get("winner")
        # The response named, in the pair's own terms: 1 = the chosen one.
        named = None if winner is None else int(winner == row["chosen_position"])
        verdicts.setdefault(row["pair_id"], {})[row["chosen_position"]] = named
    agree = [
        float(v[1] is not None and v[1] == v[2]) for v in verdicts.values() if set(v) == {1, 2}
    ]
    rng = random.Random(seed)
    boot = sorted(
        sum(agree[rng.randrange(len(agree))] for _ in agree) / len(agree) for _ in range(2000)
    )
    return {
        "pairs": len(agree),
        "rate": round(100 * sum(agree) / len(agree), 1),
        "ci": [round(100 * boot[49], 1), round(100 * boot[1949], 1)],
    }


async def measure(url: str, args: argparse.Namespace) -> dict[str, Any]:
    pairs = list(read_pairs(args.pairs))[: args.limit]
    rng = random.Random(args.seed)
    statuses: dict[int, int] = {}
    async with httpx.AsyncClient(base_url=url, timeout=900) as http:
        before = swap_counts((await http.get("/metrics")).text)
        gate = asyncio.Semaphore(args.concurrency)

        async def one(k: int) -> None:
            pair = pairs[k]
            first = rng.random() < 0.5
            responses = [pair.chosen, pair.rejected] if first else [pair.rejected, pair.chosen]
            body = {
                "messages": [{"role": m.role, "content": m.content} for m in pair.conversation],
                "responses": responses,
                "mode": args.mode,
                "max_tokens": args.max_tokens,
                "seed": args.seed + k,
            }
            async with gate:
                r = await http.post("/v1/judge", json=body)
            statuses[r.status_code] = statuses.get(r.status_code, 0) + 1

        started = time.monotonic()
        await asyncio.gather(*(one(k) for k in range(len(pairs))))
        answered_s = time.monotonic() - started
        # The checks run in the background after the answers: wait until all have run.
        deadline = time.monotonic() + args.drain_timeout
        while True:
            counts = swap_counts((await http.get("/metrics")).text)
            done = sum(counts.get(r, 0) - before.get(r, 0) for r in counts)
            if done >= statuses.get(200, 0) or time.monotonic() > deadline:
                break
            await asyncio.sleep(2.0)
    checks = {r: counts.get(r, 0) - before.get(r, 0) for r in counts}
    judged = checks.get("consistent", 0) + checks.get("inconsistent", 0)
    return {
        "sent": len(pairs),
        "statuses": statuses,
        "answered_s": round(answered_s, 1),
        "sampled_checks": checks,
        "online_rate": round(100 * checks.get("consistent", 0) / judged, 1) if judged else None,
        "offline": offline_agreement(args.offline, {p.id for p in pairs}, args.mode, args.seed),
    }


def markdown(report: dict[str, Any]) -> str:
    off = report["offline"]
    return (
        f"Online positional consistency (sampled swap checks, `{report['mode']}` mode): "
        f"{report['online_rate']}% of {sum(report['sampled_checks'].values()):.0f} checks "
        f"({report['sampled_checks']}); offline on the same {off['pairs']} pairs: "
        f"{off['rate']}% [{off['ci'][0]}, {off['ci'][1]}]. Answers: {report['statuses']}.\n\n"
        f"Command: `{report['command']}`\n"
    )


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {
        "command": " ".join(["python -m loadtests.online_consistency", *(argv or sys.argv[1:])]),
        "mode": args.mode,
        "machine": {"cpus": os.cpu_count()},
    }
    service: Service | None = None
    try:
        service = launch_service(args.out / "service.log", service_settings())
        print(f"starting the service (log: {service.log}) ...", flush=True)
        report["ready_after_s"] = round(wait_ready(service.url, args.ready_timeout, service), 1)
        report.update(asyncio.run(measure(service.url, args)))
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if service is not None:
            stop_process(service.proc)
            report["service_exit_code"] = service.proc.returncode
    (args.out / "online_consistency.json").write_text(json.dumps(report, indent=2) + "\n")
    (args.out / "online_consistency.md").write_text(markdown(report))
    print(markdown(report))
    return 0 if report["statuses"].get(200, 0) == report["sent"] else 1


if __name__ == "__main__":
    raise SystemExit(main())
