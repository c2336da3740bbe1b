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
import subprocess
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

from loadtests.harness.metrics import parse_metrics
from loadtests.harness.ports import free_port
from reflectrm.portable import portable

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
ENV = {
    "REFLECTRM_KV_CACHE_GIB": "1",
    "REFLECTRM_MAX_MODEL_LEN": "4096",
    "REFLECTRM_MAX_TOKENS": "48",
    "REFLECTRM_SWAP_CHECK_FRACTION": "0",
    "REFLECTRM_REQUEST_TIMEOUT_S": "600",
}


def alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def describe(p: psutil.Process) -> str:
    """The process's name, and what it runs when that is only "python"."""
    with contextlib.suppress(psutil.Error):
        name = p.name()
        if name.startswith("python"):
            args = p.cmdline()[1:]
            return f"{name} {' '.join(args)[:70]}".rstrip()
        return name
    return "?"


def wait_for(condition: Callable[[], bool], what: str, timeout: float) -> float:
    """Seconds until ``condition`` held; SystemExit when it never did."""
    started = time.monotonic()
    while not condition():
        if time.monotonic() - started > timeout:
            raise SystemExit(f"never happened within {timeout:.0f} s: {what}")
        time.sleep(0.1)
    return time.monotonic() - started


class Process:
    """A `reflectrm` command with its own engine, its stderr in ``log``, its processes tracked."""

    def __init__(self, args: list[str], log: Path, settings: dict[str, str]) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT / "service"), **ENV}
        env.update({f"REFLECTRM_{k.upper()}": v for k, v in settings.items()})
        self.log = log
        self._stderr = log.open("w")
        self.started = time.monotonic()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "reflectrm.cli", *args],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=self._stderr,
        )
        self.family: list[psutil.Process] = []
        self.names: dict[int, str] = {}

    @property
    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    def note_family(self) -> list[dict[str, Any]]:
        me = psutil.Process(self.proc.pid)
        self.family = [me, *me.children(recursive=True)]
        self.names = {p.pid: describe(p) for p in self.family}
        return [{"pid": p.pid, "name": self.names[p.pid]} for p in self.family]

    def engine_core(self) -> psutil.Process:
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            with contextlib.suppress(psutil.Error):
                if "EngineCore" in p.name() or "EngineCore" in " ".join(p.cmdline()):
                    return p
        raise SystemExit("no engine core process")

    def left_running(self) -> list[psutil.Process]:
        return [p for p in self.family if alive(p)]

    def watch_family(self, since: float, timeout: float = 60) -> dict[str, Any]:
        """Watched from ``since`` (the fault) on, every 0.1 s: how long after it each noted
        process was last seen alive, and what still ran at the end of ``timeout``."""
        last_seen: dict[int, float] = {}
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            running = self.left_running()
            now = time.monotonic() - since
            for p in running:
                last_seen[p.pid] = now
            if not running:
                break
            time.sleep(0.1)
        left = self.left_running()
        return {
            "processes": len(self.family),
            "lived_on_s": {
                f"{self.names.get(p.pid, '?')} ({p.pid})": round(last_seen.get(p.pid, 0.0), 1)
                for p in self.family
            },
            "all_ended_within_s": None if left else round(time.monotonic() - since, 1),
            "left_running": [{"pid": p.pid, "name": self.names.get(p.pid, "?")} for p in left],
        }

    def stop(self) -> None:
        """Whatever still runs of it (a failed run): SIGTERM, then SIGKILL."""
        if self.proc.poll() is None:
            self.note_family()
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for p in self.left_running():
                with contextlib.suppress(psutil.Error):
                    p.send_signal(sig)
            with contextlib.suppress(psutil.Error):
                psutil.wait_procs(self.family, timeout=15)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(30)
        self._stderr.close()


class Served(Process):
    def __init__(self, log: Path, **settings: str) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        super().__init__(["serve", "--port", str(self.port)], log, settings)

    def ready_status(self) -> int | None:
        try:
            return httpx.get(f"{self.url}/ready", timeout=5).status_code
        except httpx.TransportError:
            return None

    def wait_ready(self, timeout: float = 900) -> float:
        def ready() -> bool:
            if self.proc.poll() is not None:
                raise SystemExit(f"serve exited ({self.proc.returncode}); see {self.log}")
            return self.ready_status() == 200

        wait_for(ready, "the service is ready", timeout)
        return time.monotonic() - self.started

    def metrics(self) -> dict[str, float]:
        """Every sample of /metrics, summed over labels by name."""
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return parse_metrics(text, by="name")

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
            family = s.note_family()
            core = s.engine_core()
            core_name = s.names.get(core.pid, "?")
            generated = s.metrics().get("vllm:generation_tokens_total")
            os.kill(core.pid, signal.SIGKILL)
            killed = time.monotonic()
            watching = pool.submit(s.watch_family, killed, 180)
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
            family = s.note_family()
            running = s.metrics().get("vllm:num_requests_running")
            s.proc.send_signal(signal.SIGTERM)
            signalled = time.monotonic()
            watching = pool.submit(s.watch_family, signalled, 300)
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
    p = Process(args, log, {})
    try:
        ready_s = wait_for(
            lambda: "vLLM engine ready" in p.stderr or p.proc.poll() is not None,
            "the engine is up",
            900,
        )
        if p.proc.poll() is not None:
            raise SystemExit(f"judge exited ({p.proc.returncode}); see {log}")
        time.sleep(2.0)  # the judgment under way
        family = p.note_family()
        p.proc.send_signal(signal.SIGKILL)
        killed = time.monotonic()
        p.proc.wait(30)
        return {
            "engine_ready_s": round(ready_s, 1),
            "processes_at_kill": family,
            "exit_status": p.proc.returncode,
            "after_kill": p.watch_family(killed),
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
            family = s.note_family()
            s.proc.send_signal(signal.SIGKILL)
            killed = time.monotonic()
            s.proc.wait(30)
            client = answered(call.result(timeout=60), killed)
        return {
            "engine_ready_s": round(ready_s, 1),
            "processes_at_kill": family,
            "exit_status": s.proc.returncode,
            "client_in_flight": client,
            "after_kill": s.watch_family(killed),
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
    if args.fault == "engine-kill":
        report = engine_kill(log)
    elif args.fault == "sigterm":
        report = sigterm(log, args.grace)
    elif args.fault == "sigkill-judge":
        report = sigkill_judge(log)
    else:
        report = sigkill_serve(log)
    report = {"fault": args.fault, **report, "run_s": round(time.monotonic() - started, 1)}
    report = portable(report, ROOT)  # paths relative to the repository, not this machine's
    text = json.dumps(report, indent=2)
    print(text)
    args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
