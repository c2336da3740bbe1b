"""Faults measured on real engines: each run starts its own `reflectrm serve` or `reflectrm judge`
(as an operator runs it), breaks it one way, and writes what happened as JSON.

- ``engine-kill``: three long judgments in flight on `reflectrm serve`, its ``VLLM::EngineCore``
  killed with SIGKILL: each judgment's answer and how long after the kill it came, /ready until
  the process exits, its exit status and when, and its processes left afterwards.
- ``sigterm``: a short and a long judgment in flight, SIGTERM to `reflectrm serve`: when /ready
  turned 503, a new judgment's answer, the two judgments' answers and when, the exit status and
  when, the processes left, and whether the log holds a traceback.
- ``sigkill-judge`` and ``sigkill-serve``: `reflectrm judge` (a long judgment) or `reflectrm
  serve` (a long judgment in flight) killed with SIGKILL once the engine is up: its processes,
  and how long each lived on after the kill.

The service runs with the end-to-end tests' settings (1 GiB of KV cache, 4096-token context,
no swap checks); the log goes beside the JSON (``.log``). One engine at a time:

    flock /tmp/reflectrm-engine.lock env PYTHONPATH=service .venv/bin/python loadtests/faults.py \
        engine-kill --out runs/engine-kill.json
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import psutil

if __package__ in (None, ""):  # run as a script: make the repo importable
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from loadtests.common.family import Watched, WatchedServe, reflectrm_command, reflectrm_env
from loadtests.common.process import RunError, wait_for
from reflectrm_harness.portable import portable

ROOT = Path(__file__).resolve().parents[1]
PAIR: dict[str, Any] = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}
# Certainly still running when the fault comes: 8 samples of up to 1024 tokens, then reflections.
LONG = {**PAIR, "max_tokens": 1024}
# Longer than the drain's grace period (8 samples of up to 3072 tokens), and well within it.
LONGER = {**PAIR, "mode": "vote", "max_tokens": 3072, "seed": 1}
SHORT = {**PAIR, "mode": "single", "max_tokens": 32, "seed": 2}


def noted(p: Watched) -> list[dict[str, Any]]:
    """Every process of ``p`` now, by pid and name."""
    return [{"pid": q.pid, "name": p.names[q.pid]} for q in p.note_family()]


def engine_core(p: Watched) -> psutil.Process:
    core = p.engine_core()
    if core is None:
        raise RunError("no engine core process")
    return core


def watch_family(p: Watched, since: float, timeout: float = 60) -> dict[str, Any]:
    """Watched from ``since`` (the fault) on, every 0.1 s: how long after it each noted process
    was last seen alive, and what still ran at the end of ``timeout``."""
    last_seen: dict[int, float] = {}
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        running = p.left_running()
        now = time.monotonic() - since
        for q in running:
            last_seen[q.pid] = now
        if not running:
            break
        time.sleep(0.1)
    left = p.left_running()
    return {
        "processes": len(p.family),
        "lived_on_s": {
            f"{p.names.get(q.pid, '?')} ({q.pid})": round(last_seen.get(q.pid, 0.0), 1)
            for q in p.family
        },
        "all_ended_within_s": None if left else round(time.monotonic() - since, 1),
        "left_running": [{"pid": q.pid, "name": p.names.get(q.pid, "?")} for q in left],
    }


class Served(WatchedServe):
    """`reflectrm serve` with the end-to-end tests' settings and ``settings`` over them."""

    def __init__(self, log: Path, **settings: str) -> None:
        super().__init__(log, reflectrm_env(settings))

    def post(self, body: dict[str, Any]) -> dict[str, Any]:
        """One judgment: its status, detail, Retry-After and when it was answered."""
        try:
            r = httpx.post(f"{self.url}/v1/judge", json=body, timeout=600)
        except httpx.HTTPError as exc:
            return {"lost": type(exc).__name__, "at": time.monotonic()}
        detail = None
        with contextlib.suppress(ValueError):
            detail = r.json().get("detail")
        return {
            "status": r.status_code,
            "detail": detail,
            "retry_after": r.headers.get("retry-after"),
            "at": time.monotonic(),
        }


def answered(result: dict[str, Any], since: float) -> dict[str, Any]:
    """A judgment's answer with its time as seconds after ``since``."""
    out = {k: v for k, v in result.items() if k != "at"}
    out["answered_after_s"] = round(result["at"] - since, 1)
    return out


def engine_at_work(
    s: Served, judgments: int, generating: bool = True, running: bool = True
) -> Callable[[], bool]:
    """True once ``judgments`` hold slots, and (``running``) the engine runs requests, and
    (``generating``) it has generated tokens."""

    def check() -> bool:
        m = s.metrics()
        return (
            m.get("reflectrm_judgments_in_flight") == judgments
            and (not running or m.get("vllm:num_requests_running", 0) > 0)
            and (not generating or m.get("vllm:generation_tokens_total", 0) > 0)
        )

    return check


def engine_kill(log: Path) -> dict[str, Any]:
    s = Served(log, engine_check_interval_s="1")
    try:
        ready_s = s.wait_ready()
        with ThreadPoolExecutor(4) as pool:
            calls = [pool.submit(s.post, {**LONG, "seed": i}) for i in range(3)]
            wait_for(engine_at_work(s, 3), "three judgments in flight, the engine generating", 300)
            family = noted(s)
            core = engine_core(s)
            core_name = s.names.get(core.pid, "?")
            generated = s.metrics().get("vllm:generation_tokens_total")
            os.kill(core.pid, signal.SIGKILL)
            killed = time.monotonic()
            watching = pool.submit(watch_family, s, killed, 180)
            ready_seen: dict[str, int] = {}
            while s.proc.poll() is None and time.monotonic() - killed < 180:
                status = str(s.ready_status() or "no answer (port closed)")
                ready_seen[status] = ready_seen.get(status, 0) + 1
                time.sleep(0.2)
            exit_s = time.monotonic() - killed if s.proc.poll() is not None else None
            answers = [answered(c.result(timeout=600), killed) for c in calls]
            processes = watching.result()
        stderr = s.stderr
        return {
            "engine_ready_s": round(ready_s, 1),
            "in_flight_at_kill": 3,
            "generated_tokens_before_kill": generated,
            "killed": f"{core_name} ({core.pid}), SIGKILL",
            "processes_at_kill": family,
            "answers": answers,
            "ready_polls_until_exit": ready_seen,
            "exit_status": s.proc.returncode,
            "exited_after_s": round(exit_s, 1) if exit_s is not None else None,
            "log_names_the_setting": "REFLECTRM_EXIT_ON_ENGINE_FAILURE" in stderr,
            "log_lines": [ln for ln in stderr.splitlines() if "EXIT_ON_ENGINE_FAILURE" in ln][:3],
            "processes_after_kill": processes,
        }
    finally:
        s.stop()


def sigterm(log: Path, grace_s: float) -> dict[str, Any]:
    s = Served(log, shutdown_grace_s=str(grace_s))
    try:
        ready_s = s.wait_ready()
        with ThreadPoolExecutor(4) as pool:
            short: Future[dict[str, Any]] = pool.submit(s.post, SHORT)
            long = pool.submit(s.post, LONGER)
            # Both hold their slots and the engine runs requests (their first tokens may not be
            # counted yet).
            wait_for(
                engine_at_work(s, 2, generating=False, running=True), "two judgments running", 300
            )
            family = noted(s)
            running = s.metrics().get("vllm:num_requests_running")
            s.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            watching = pool.submit(watch_family, s, signalled, 300)
            not_ready_s = wait_for(lambda: s.ready_status() == 503, "/ready says 503", 30)
            refused = answered(s.post(SHORT), signalled)
            answers = {
                "short (single, 32 tokens)": answered(short.result(timeout=300), signalled),
                "long (vote, 8 x 3072 tokens)": answered(long.result(timeout=300), signalled),
            }
            exit_status = s.proc.wait(300)
            exited_s = time.monotonic() - signalled
            processes = watching.result()
        stderr = s.stderr
        return {
            "engine_ready_s": round(ready_s, 1),
            "shutdown_grace_s": grace_s,
            "processes_at_signal": family,
            "engine_requests_running_at_signal": running,
            "ready_503_after_s": round(not_ready_s, 1),
            "new_judgment_after_signal": refused,
            "in_flight": answers,
            "exit_status": exit_status,
            "exited_after_s": round(exited_s, 1),
            "traceback_in_log": "Traceback" in stderr,
            "exception_ignored_in_log": "Exception ignored" in stderr,
            "processes_after_signal": processes,
        }
    finally:
        s.stop()


def sigkill_judge(log: Path) -> dict[str, Any]:
    args: list[str] = [
        "judge",
        "--prompt",
        PAIR["prompt"],
        "--response1",
        PAIR["responses"][0],
        "--response2",
        PAIR["responses"][1],
        "--max-tokens",
        "1024",
    ]
    p = Watched(reflectrm_command(*args), log, reflectrm_env())
    try:
        ready_s = wait_for(
            lambda: "vLLM engine ready" in p.stderr or p.proc.poll() is not None,
            "the engine is up",
            900,
        )
        if p.proc.poll() is not None:
            raise RunError(f"judge exited ({p.proc.returncode}); see {log}")
        time.sleep(2.0)  # the judgment under way
        family = noted(p)
        p.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        p.proc.wait(30)
        return {
            "engine_ready_s": round(ready_s, 1),
            "processes_at_kill": family,
            "exit_status": p.proc.returncode,
            "after_kill": watch_family(p, killed),
        }
    finally:
        p.stop()


def sigkill_serve(log: Path) -> dict[str, Any]:
    s = Served(log)
    try:
        ready_s = s.wait_ready()
        with ThreadPoolExecutor(1) as pool:
            call = pool.submit(s.post, {**LONG, "seed": 1})
            wait_for(engine_at_work(s, 1), "a judgment in flight, the engine generating", 300)
            family = noted(s)
            s.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            s.proc.wait(30)
            client = answered(call.result(timeout=60), killed)
        return {
            "engine_ready_s": round(ready_s, 1),
            "processes_at_kill": family,
            "exit_status": s.proc.returncode,
            "client_in_flight": client,
            "after_kill": watch_family(s, killed),
        }
    finally:
        s.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    faults = ["engine-kill", "sigterm", "sigkill-judge", "sigkill-serve"]
    parser.add_argument("fault", choices=faults)
    parser.add_argument("--grace", type=float, default=40.0, help="sigterm: the grace period, s")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    log = args.out.with_suffix(".log")
    started = time.monotonic()
    try:
        if args.fault == "engine-kill":
            report = engine_kill(log)
        elif args.fault == "sigterm":
            report = sigterm(log, args.grace)
        elif args.fault == "sigkill-judge":
            report = sigkill_judge(log)
        else:
            report = sigkill_serve(log)
    except RunError as exc:  # the service exited early, or a step never happened
        raise SystemExit(str(exc)) from None
    report = {"fault": args.fault, **report, "run_s": round(time.monotonic() - started, 1)}
    report = portable(report, ROOT)  # paths relative to the repository, not this machine's
    text = json.dumps(report, indent=2)
    print(text)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
