"""Run a load scenario against the judging service with locust, headless, and summarize it.

    python -m loadtests.run --scenario steady --users 4 --requests 16 --max-tokens 32
    python -m loadtests.run --scenario burst --url http://127.0.0.1:8000

Without --url the runner starts the service itself (``reflectrm serve`` on a free loopback port,
with a small KV cache and context), waits for GET /ready, runs locust, and stops the service with
SIGINT (SIGTERM, then SIGKILL, if it does not exit in time), also on errors and Ctrl-C.

Every run is bounded: no request starts after --requests requests or --duration seconds, each
request waits at most --request-timeout seconds, and locust itself stops at --duration plus
--request-timeout plus a margin. The output folder (default ``runs/load/<scenario>-<time>/``)
keeps locust's CSV files and log, the service's log, and ``summary.json``. The exit code is 0 when
every request was answered 200 or refused on purpose (429 or 503 with Retry-After), 1 when any was
lost, got another 5xx, a refusal without Retry-After or another status, and 2 when the run could
not be made.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.ports import is_loopback
from loadtests.common.process import RunError, launch, served, stop_process, tail
from loadtests.scenarios import DEFAULT_PAIRS, REPO, SCENARIOS, Scenario
from loadtests.summary import format_summary, read_failures, read_stats, summarize

LOCUSTFILE = Path(__file__).resolve().with_name("locustfile.py")
# The service the runner starts: small, so it fits beside other work on a 2-core machine.
# Variables already set in the environment win.
SERVICE_DEFAULTS = {"REFLECTRM_KV_CACHE_GIB": "2", "REFLECTRM_MAX_MODEL_LEN": "4096"}
RUN_TIME_MARGIN_S = 30.0


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m loadtests.run",
        description="Load-test POST /v1/judge with locust (headless) and summarize the outcome.",
    )
    p.add_argument("--scenario", choices=sorted(SCENARIOS), default="steady")
    p.add_argument("--users", type=int, help="concurrent users (default: the scenario's)")
    p.add_argument(
        "--spawn-rate", type=float, help="users started per second (default: all at once)"
    )
    p.add_argument("--requests", type=int, help="bound on requests sent (default: the scenario's)")
    p.add_argument(
        "--duration", type=float, default=300.0, help="no request starts after this many seconds"
    )
    p.add_argument("--max-tokens", type=int, default=32, help="max_tokens of each judgment")
    p.add_argument("--url", help="a running service; without it the runner starts one")
    p.add_argument(
        "--allow-remote", action="store_true", help="allow a --url that is not a loopback address"
    )
    p.add_argument(
        "--pairs",
        help=f"pairs JSONL(.gz) in the shared schema (default {DEFAULT_PAIRS}; built-in pairs "
        "where it is absent)",
    )
    p.add_argument(
        "--max-pair-chars",
        type=int,
        default=1500,
        help="use only pairs whose conversation and responses add up to at most this many "
        "characters",
    )
    p.add_argument("--seed", type=int, default=0, help="seeds the pair order and each request")
    p.add_argument("--request-timeout", type=float, default=600.0, help="seconds per request")
    p.add_argument(
        "--admission-limit",
        type=int,
        help="REFLECTRM_MAX_CONCURRENT_JUDGMENTS of the service the runner starts "
        "(default: 4 for burst, the service's default otherwise)",
    )
    p.add_argument(
        "--queue-limit",
        type=int,
        help="REFLECTRM_MAX_QUEUED_JUDGMENTS of the service the runner starts "
        "(default: 4 for burst, the service's default otherwise)",
    )
    p.add_argument(
        "--max-retry-wait",
        type=float,
        default=30.0,
        help="longest wait after a 429/503, whatever its Retry-After asks",
    )
    p.add_argument("--ready-timeout", type=float, default=600.0, help="seconds to wait for /ready")
    p.add_argument("--out", help="output folder (default runs/load/<scenario>-<time>/)")
    args = p.parse_args(argv)
    for name in ("users", "requests", "max_tokens"):
        value = getattr(args, name)
        if value is not None and value < 1:
            p.error(f"--{name.replace('_', '-')} must be at least 1")
    for name in ("duration", "request_timeout", "ready_timeout"):
        if getattr(args, name) <= 0:
            p.error(f"--{name.replace('_', '-')} must be positive")
    if args.url and not (args.allow_remote or is_loopback(args.url)):
        p.error(f"{args.url} is not a loopback address; pass --allow-remote to load-test it")
    return args


def service_settings(scenario: Scenario, args: argparse.Namespace) -> dict[str, str]:
    """The settings of the ``reflectrm serve`` a run starts. Admission limits given as options
    win over the environment, which wins over the runner's and the scenario's defaults."""
    defaults = {**SERVICE_DEFAULTS, **scenario.service_env}
    settings = {k: os.environ.get(k, v) for k, v in defaults.items()}
    if args.admission_limit is not None:
        settings["REFLECTRM_MAX_CONCURRENT_JUDGMENTS"] = str(args.admission_limit)
    if args.queue_limit is not None:
        settings["REFLECTRM_MAX_QUEUED_JUDGMENTS"] = str(args.queue_limit)
    return settings


def locust_command(args: argparse.Namespace, scenario: Scenario, url: str, out: Path) -> list[str]:
    users = args.users or scenario.users
    spawn_rate = args.spawn_rate or users
    run_time = args.duration + args.request_timeout + RUN_TIME_MARGIN_S
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--headless",
        "--only-summary",
        "--users",
        str(users),
        "--spawn-rate",
        f"{spawn_rate:g}",
        "--run-time",
        f"{run_time:.0f}s",
        "--stop-timeout",
        "10",
        "--host",
        url,
        "--csv",
        str(out / "locust"),
        "--json-file",
        str(out / "locust_stats"),
        "--exit-code-on-error",
        "0",
        "--pairs-file",
        args.pairs or "",
        "--max-pair-chars",
        str(args.max_pair_chars),
        "--judge-max-tokens",
        str(args.max_tokens),
        "--judge-seed",
        str(args.seed),
        "--request-limit",
        str(args.requests or scenario.requests),
        "--send-window",
        f"{args.duration:g}",
        "--request-timeout",
        f"{args.request_timeout:g}",
        "--max-retry-wait",
        f"{args.max_retry_wait:g}",
        "--counts-file",
        str(out / "counts.json"),
        scenario.user_class,
    ]


def run_locust(command: list[str], out: Path, timeout_s: float) -> int:
    """Run locust to its end (or ``timeout_s``); its output goes to locust.log. Its exit code."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH")) if p)
    proc = launch(command, out / "locust.log", env=env, cwd=REPO)
    try:
        return proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        raise RunError(f"locust did not stop within {timeout_s:.0f} s") from None
    finally:
        stop_process(proc, grace_s=(30.0, 10.0))


def collect(out: Path) -> dict[str, Any]:
    stats_file = out / "locust_stats.json"
    if not stats_file.is_file():
        raise RunError(
            f"locust wrote no stats; the end of {out / 'locust.log'}:\n{tail(out / 'locust.log')}"
        )
    counts_file = out / "counts.json"
    counts = json.loads(counts_file.read_text()) if counts_file.is_file() else None
    summary = summarize(read_stats(stats_file), read_failures(out / "locust_failures.csv"), counts)
    summary["pairs"] = (counts or {}).get("pairs")
    summary["pairs_used"] = (counts or {}).get("pairs_used")
    return summary


def _raise_interrupt(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def main(argv: Sequence[str] | None = None) -> int:
    args = parse_args(argv)
    scenario = SCENARIOS[args.scenario]
    stamp = time.strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else REPO / "runs" / "load" / f"{scenario.name}-{stamp}"
    out.mkdir(parents=True, exist_ok=True)
    if threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, _raise_interrupt)  # the same clean stop as Ctrl-C
    run: dict[str, Any] = {
        "scenario": scenario.name,
        "description": scenario.description,
        "users": args.users or scenario.users,
        "requests_bound": args.requests or scenario.requests,
        "duration_bound_s": args.duration,
        "max_tokens": args.max_tokens,
        "seed": args.seed,
        "request_timeout_s": args.request_timeout,
        "started_service": not args.url,
        "output": str(out),
    }
    runner_problems: list[str] = []
    interrupted = False
    settings = service_settings(scenario, args)
    if not args.url:
        run["service_settings"] = settings
    try:
        with served(args.url, out / "service.log", settings, args.ready_timeout, run) as url:
            run["url"] = url
            command = locust_command(args, scenario, url, out)
            run["locust_command"] = command
            print(
                f"running locust: scenario {scenario.name}, {run['users']} users, at most "
                f"{run['requests_bound']} requests / {args.duration:g} s ...",
                flush=True,
            )
            timeout = args.duration + args.request_timeout + 2 * RUN_TIME_MARGIN_S + 30
            code = run_locust(command, out, timeout)
            run["locust_exit_code"] = code
            if code != 0:
                runner_problems.append(f"locust exited with code {code}; see {out / 'locust.log'}")
    except KeyboardInterrupt:
        interrupted = True
        runner_problems.append("interrupted")
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    try:
        summary = collect(out)
    except RunError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 130 if interrupted else 2
    summary["problems"] += runner_problems
    summary["ok"] = not summary["problems"]
    (out / "summary.json").write_text(json.dumps({"run": run, **summary}, indent=2) + "\n")
    print(format_summary(summary, header=_header(run, summary)))
    print(f"summary: {out / 'summary.json'}")
    if interrupted:
        return 130
    return 0 if summary["ok"] else 1


def _header(run: dict[str, Any], summary: dict[str, Any]) -> list[str]:
    where = "started by the runner" if run["started_service"] else "given"
    settings = run.get("service_settings") or {}
    small = " ".join(
        f"{k}={v}" for k, v in settings.items() if k not in ("REFLECTRM_HOST", "REFLECTRM_PORT")
    )
    return [
        f"scenario:        {run['scenario']}: {run['description']}",
        f"bounds:          {run['users']} users, {run['requests_bound']} requests, "
        f"{run['duration_bound_s']:g} s; max_tokens {run['max_tokens']}, seed {run['seed']}",
        f"service:         {run.get('url')} ({where}{'; ' + small if small else ''})",
        f"pairs:           {summary.get('pairs')} ({summary.get('pairs_used')} usable)",
        f"stopped by:      {summary.get('stopped_by')}",
    ]


if __name__ == "__main__":
    raise SystemExit(main())
