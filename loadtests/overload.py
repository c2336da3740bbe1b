"""A bounded burst past the service's limits, on loopback: every request must be answered (200,
or 429 with Retry-After), none lost or hung. Reports what was sent, answered and lost, the
statuses, the Retry-After values, latencies, and the queue wait the service recorded on /metrics.

With ``--retries N`` each client behaves like a trainer that honours Retry-After: on 429 it
waits that long and tries again, up to N more times.

Against a running service, or (``--serve``) a `reflectrm serve` of its own, with settings given
as ``--set NAME=VALUE`` (REFLECTRM_NAME), stopped by SIGTERM at the end:

    flock /tmp/reflectrm-engine.lock env PYTHONPATH=service .venv/bin/python loadtests/overload.py \
        --serve --set max_concurrent_judgments=4 --set max_queued_judgments=8 \
        --requests 40 --retries 5 --out runs/overload.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import signal
import statistics
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

import httpx

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.metrics import parse_metrics
from loadtests.common.process import RunError, served, stop_process

ROOT = Path(__file__).resolve().parents[1]
PAIR = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}


async def one(client: httpx.AsyncClient, body: dict, retries: int) -> dict[str, Any]:
    started = time.monotonic()
    attempts: list[int] = []
    retry_after: list[int] = []
    while True:
        try:
            r = await client.post("/v1/judge", json=body)
        except httpx.HTTPError as exc:
            # Which attempt got no answer, and why.
            lost = f"attempt {len(attempts) + 1}: {type(exc).__name__}: {exc}"
            return {"lost": lost, "attempts": attempts, "retry_after": retry_after}
        attempts.append(r.status_code)
        if r.status_code != 429:
            break
        retry_after.append(int(r.headers["retry-after"]))
        if len(attempts) > retries:
            break
        await asyncio.sleep(retry_after[-1])
    return {
        "status": r.status_code,
        "attempts": attempts,
        "retry_after": retry_after,
        "seconds": time.monotonic() - started,
    }


async def burst(url: str, n: int, retries: int, body: dict, timeout: float) -> dict[str, Any]:
    limits = httpx.Limits(max_connections=n + 4)
    async with httpx.AsyncClient(base_url=url, timeout=timeout, limits=limits) as client:
        before = parse_metrics((await client.get("/metrics")).text, "reflectrm_queue_wait_seconds")
        started = time.monotonic()
        results = await asyncio.gather(
            *[one(client, {**body, "seed": i}, retries) for i in range(n)]
        )
        seconds = time.monotonic() - started
        after = parse_metrics((await client.get("/metrics")).text, "reflectrm_queue_wait_seconds")
    answered = [r for r in results if "status" in r]
    latencies = sorted(r["seconds"] for r in answered if r["status"] == 200)
    waits = {k: after[k] - before.get(k, 0.0) for k in after}
    count = waits.get("reflectrm_queue_wait_seconds_count", 0.0)
    return {
        "sent": n,
        "answered": len(answered),
        "lost": len(results) - len(answered),
        "lost_reasons": dict(Counter(r["lost"] for r in results if "lost" in r)),
        "final_statuses": dict(Counter(r["status"] for r in answered)),
        "first_attempt_statuses": dict(Counter(r["attempts"][0] for r in results if r["attempts"])),
        "attempts": sum(len(r["attempts"]) for r in results),
        "retry_after_seen": dict(Counter(v for r in results for v in r["retry_after"])),
        "seconds": round(seconds, 1),
        "latency_200_s": {
            "p50": round(statistics.median(latencies), 1) if latencies else None,
            "max": round(latencies[-1], 1) if latencies else None,
        },
        "queue_wait": {
            "admitted": int(count),
            "mean_s": round(waits.get("reflectrm_queue_wait_seconds_sum", 0.0) / count, 2)
            if count
            else None,
            "waited_0s": int(waits.get('reflectrm_queue_wait_seconds_bucket{le="0.0"}', 0.0)),
        },
    }


def service_settings(items: list[str]) -> dict[str, str]:
    """The service's settings: small defaults over the environment's, then ``--set`` items
    (``name=value`` for REFLECTRM_NAME)."""
    settings = {
        "PYTHONPATH": str(ROOT / "service"),
        "REFLECTRM_KV_CACHE_GIB": "2",
        "REFLECTRM_MAX_MODEL_LEN": "4096",
        "REFLECTRM_SWAP_CHECK_FRACTION": "0",
    }
    for item in items:
        name, _, value = item.partition("=")
        settings[f"REFLECTRM_{name.upper()}"] = value
    return settings


def drain(proc: subprocess.Popen[Any]) -> None:
    """SIGTERM: the service drains; SIGKILL to its group past 120 s."""
    stop_process(proc, grace_s=(120.0,), signals=(signal.SIGTERM,))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", help="a running service (default: --serve one)")
    parser.add_argument("--serve", action="store_true", help="start `reflectrm serve` for the run")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--requests", type=int, default=40)
    parser.add_argument("--retries", type=int, default=0)
    parser.add_argument("--mode", default="single")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--timeout", type=float, default=900, help="per request, seconds")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if not args.url and not args.serve:
        parser.error("give --url or --serve")
    log = (args.out or Path("overload.json")).with_suffix(".serve.log")
    started: dict[str, Any] = {}
    url = None if args.serve else args.url
    try:
        with served(url, log, service_settings(args.set), 900, started, stop=drain) as url:
            body = {**PAIR, "mode": args.mode, "max_tokens": args.max_tokens}
            report = asyncio.run(burst(url, args.requests, args.retries, body, args.timeout))
    except RunError as exc:
        raise SystemExit(str(exc)) from None
    report = {
        "settings": args.set,
        "mode": args.mode,
        "max_tokens": args.max_tokens,
        "retries": args.retries,
        **report,
    }
    if "service_exit_code" in started:
        report["service_exit_status"] = started["service_exit_code"]
    text = json.dumps(report, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
