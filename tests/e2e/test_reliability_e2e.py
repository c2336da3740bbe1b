"""Reliability with the real engine: fuzzed, its engine killed, drained on SIGTERM, its parent
killed. The fuzz run reuses the session's engine; each test that ends a process starts its own
(`reflectrm serve` or `reflectrm judge` as a subprocess, as an operator would run it)."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
from schemathesis import GenerationMode

from loadtests.common.family import Watched, WatchedServe, reflectrm_command, reflectrm_env
from loadtests.common.metrics import parse_metrics
from loadtests.common.process import wait_for as harness_wait_for
from tests import fuzzing
from tests.e2e.conftest import LiveService

ROOT = Path(__file__).resolve().parents[2]
PYTHONPATH = (ROOT / "service", ROOT)
PAIR: dict[str, Any] = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}
# These judgments' lengths rely on the untrained base model (BASE below), whose analyses run on
# to their bound; the default judge, trained on the format, ends every output at 33 tokens.
# Certainly running when the test acts: 8 samples of up to 1024 tokens, then reflections.
LONG = {**PAIR, "max_tokens": 1024, "seed": 1}
# Longer than the drain's grace period: 8 samples of up to 3072 tokens (the analyses run on
# towards their bound of about 3,000 characters; the KV cache holds them all, so nothing waits
# behind them), which on an idle 2-core machine takes about 40 s: a 40 s grace let it finish
# in one whole-suite run; and within it: 32 tokens, greedy, a few seconds (the output format alone takes 23 of
# the model's tokens; below that the service refuses max_tokens). The grace sits between, with
# room on both sides.
LONGER = {**PAIR, "mode": "vote", "max_tokens": 3072, "seed": 1}
SHORT = {**PAIR, "mode": "single", "max_tokens": 32, "seed": 2}
GRACE_S = 15
BASE = "base"  # REFLECTRM_MODEL of the services that must run long judgments


# --- fuzzing against the real engine ------------------------------------------------------------

FUZZ_MAX_TOKENS = 32
FUZZ_MAX_CANDIDATES = 2


FUZZ_COHORT_TIMEOUT_S = 0.5


def _cap(node: dict[str, Any], key: str, cap: float) -> None:
    value = node.get(key)
    if isinstance(value, str):  # a query parameter
        with contextlib.suppress(ValueError):
            if float(value) > cap:
                node[key] = str(cap)
    elif isinstance(value, int | float) and not isinstance(value, bool) and value > cap:
        node[key] = cap


def tiny(case: Any) -> None:
    """Keep generated judgments small: at most 32 tokens and 2 candidates, one order; a cohort
    member waits at most 0.5 s for the rest of its group (a fuzzed group never fills). Values
    that are invalid anyway are left alone, to be refused."""

    def shrink(node: Any) -> None:
        if isinstance(node, dict):
            if "completion" in node:  # a cohort member
                node.setdefault("cohort_timeout_s", FUZZ_COHORT_TIMEOUT_S)
                _cap(node, "cohort_timeout_s", FUZZ_COHORT_TIMEOUT_S)
                _cap(node, "max_tokens", FUZZ_MAX_TOKENS)
                _cap(node, "num_candidates", FUZZ_MAX_CANDIDATES)
            if "responses" in node:  # a judgment request
                for key, cap in (
                    ("max_tokens", FUZZ_MAX_TOKENS),
                    ("num_candidates", FUZZ_MAX_CANDIDATES),
                ):
                    value = node.get(key, cap + 1)
                    if isinstance(value, int) and not isinstance(value, bool) and value > cap:
                        node[key] = cap
                if node.get("check_swap") is True:
                    node["check_swap"] = False
            for value in node.values():
                shrink(value)
        elif isinstance(node, list):
            for value in node:
                shrink(value)

    shrink(case.body)
    query = case.query if isinstance(case.query, dict) else None
    if query is not None and "group_size" in query:  # /get_reward members of a cohort
        query.setdefault("cohort_timeout_s", FUZZ_COHORT_TIMEOUT_S)
        _cap(query, "cohort_timeout_s", FUZZ_COHORT_TIMEOUT_S)


def test_fuzzing_against_the_real_engine(live: LiveService):
    schema = fuzzing.operations(fuzzing.load(live.url))
    tally = fuzzing.Tally()
    for _, operation in sorted(schema.items()):
        has_body = bool(operation.body)
        fuzzing.fuzz(
            operation, GenerationMode.POSITIVE, 8 if has_body else 1, live.url, tally, tiny, 300
        )
        if has_body:
            fuzzing.fuzz(operation, GenerationMode.NEGATIVE, 25, live.url, tally, tiny, 300)
    tally.write(os.environ.get("REFLECTRM_FUZZ_REPORT_E2E"))
    judged = sum(c[200] for k, c in tally.counts.items() if "judge" in k)
    assert judged > 0  # real judgments ran, not only refusals


# --- a service of its own, as a subprocess -----------------------------------------------------


class Served(WatchedServe):
    """`reflectrm serve` with its own engine, logs in files, every process of it tracked."""

    def __init__(self, tmp: Path, **settings: str) -> None:
        super().__init__(tmp / "serve.stderr", reflectrm_env(settings, pythonpath=PYTHONPATH))

    def in_flight(self) -> float:
        text = httpx.get(f"{self.url}/metrics", timeout=10).text
        return parse_metrics(text)["reflectrm_judgments_in_flight"]


def wait_for(condition: Callable[[], bool], what: str, timeout: float) -> None:
    """``condition`` holds within ``timeout`` s (RunError otherwise), asked every 0.2 s."""
    harness_wait_for(condition, what, timeout, poll_s=0.2)


@contextlib.contextmanager
def serving(tmp_path: Path, **settings: str) -> Iterator[Served]:
    served = Served(tmp_path, **settings)
    try:
        served.wait_ready()
        yield served
    finally:
        served.stop(signals=(signal.SIGKILL,))  # whatever still runs of it (a failed test)


def post(url: str, body: dict) -> httpx.Response:
    return httpx.post(f"{url}/v1/judge", json=body, timeout=600)


def test_engine_killed_mid_load_in_flight_503_ready_503_exit_1_nothing_left(tmp_path):
    with (
        serving(tmp_path, MODEL=BASE, ENGINE_CHECK_INTERVAL_S="1") as s,
        ThreadPoolExecutor(4) as pool,
    ):
        calls = [pool.submit(post, s.url, {**LONG, "seed": i}) for i in range(3)]
        wait_for(lambda: s.in_flight() == 3, "three judgments in flight", 120)
        family = s.note_family()
        core = s.engine_core()
        assert core is not None, "no engine core process"
        os.kill(core.pid, signal.SIGKILL)
        killed = time.monotonic()
        # In flight: 503 saying why, long before their 600 s deadline (the client waits 600 s).
        answers = [c.result(timeout=600) for c in calls]
        answered_s = time.monotonic() - killed
        assert [r.status_code for r in answers] == [503] * 3, [r.text for r in answers]
        assert all("engine" in r.json()["detail"] for r in answers)
        # /ready is 503 (or the port is already closed) and the process exits 1 by itself.
        statuses = set()
        while s.proc.poll() is None and time.monotonic() - killed < 120:
            statuses.add(s.ready_status())
            time.sleep(0.2)
        assert s.proc.returncode == 1, s.stderr[-3000:]
        assert 200 not in statuses
        assert "REFLECTRM_EXIT_ON_ENGINE_FAILURE" in s.stderr
        wait_for(lambda: not s.left_running(), "every process of the service ends", 60)
        print(
            f"in-flight answered {answered_s:.1f} s after the kill; {len(family)} processes ended"
        )


def test_sigterm_drains_in_flight_finish_or_are_aborted_exit_0_quietly_nothing_left(tmp_path):
    with (
        serving(tmp_path, MODEL=BASE, SHUTDOWN_GRACE_S=str(GRACE_S)) as s,
        ThreadPoolExecutor(4) as pool,
    ):
        short = pool.submit(post, s.url, SHORT)
        long = pool.submit(post, s.url, LONGER)
        wait_for(lambda: s.in_flight() == 2, "two judgments in flight", 120)
        s.note_family()
        s.proc.send_signal(signal.SIGTERM)
        # At once: not ready, and a new judgment is refused; the port still answers.
        wait_for(lambda: s.ready_status() == 503, "/ready says 503", 5)
        refused = post(s.url, SHORT)
        assert refused.status_code == 503
        assert "shutting down" in refused.json()["detail"]
        assert refused.headers["retry-after"]
        # The short judgment finishes; the long one is aborted when the grace period ends.
        assert short.result(timeout=120).status_code == 200
        r = long.result(timeout=120)
        assert r.status_code == 503
        assert "REFLECTRM_SHUTDOWN_GRACE_S" in r.json()["detail"]
        assert s.proc.wait(120) == 0, s.stderr[-3000:]
        wait_for(lambda: not s.left_running(), "every process of the service ends", 60)
        # Shut down explicitly and quietly: no traceback (vLLM's AsyncLLM.__del__ printed one).
        assert "Traceback" not in s.stderr, s.stderr[-3000:]
        assert "Exception ignored" not in s.stderr, s.stderr[-3000:]


def test_a_judge_command_killed_with_sigkill_leaves_no_engine_processes(tmp_path):
    defaults = {"REFLECTRM_KV_CACHE_GIB": "1", "REFLECTRM_MAX_MODEL_LEN": "4096"}
    args = ["judge", "--prompt", PAIR["prompt"]]
    args += ["--response1", PAIR["responses"][0], "--response2", PAIR["responses"][1]]
    args += ["--max-tokens", "1024"]
    env = reflectrm_env(defaults=defaults, pythonpath=PYTHONPATH)
    p = Watched(reflectrm_command(*args), tmp_path / "judge.stderr", env)
    try:
        wait_for(
            lambda: "vLLM engine ready" in p.stderr or p.proc.poll() is not None,
            "the engine is up",
            900,
        )
        assert p.proc.poll() is None, p.stderr[-3000:]
        family = p.note_family()
        assert any("EngineCore" in q.name() for q in family)
        p.proc.send_signal(signal.SIGKILL)
        p.proc.wait(30)
        # Before the reaper, the engine core and its worker lived on under init.
        wait_for(lambda: not p.left_running(), "the engine's processes end", 60)
    finally:
        p.stop(signals=(signal.SIGKILL,))
