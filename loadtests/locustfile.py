"""Locust users for the load scenarios in ``scenarios.py``: steady, burst and mixed.

``loadtests/run.py`` runs this file headless (and starts the service when given no URL); by hand:

    locust -f loadtests/locustfile.py --headless -u 4 -r 4 -t 600s -H http://127.0.0.1:8000 \\
        --request-limit 16 --send-window 300 --judge-max-tokens 32 SteadyUser

Each user sends judgments back to back. After a 429 or 503 it waits what Retry-After asks
(at most --max-retry-wait seconds) and sends the next request. Requests are numbered across the
run: request ``i`` is always the same body (``scenarios.request_body``). No request starts once
--request-limit requests were sent or --send-window seconds have passed; when the last one in
flight is done, locust quits. Each request's stats row is named ``"<mode> <outcome>"``
(``summary.classify``).
"""

from __future__ import annotations

import json
import math
import sys
import time
from pathlib import Path
from typing import Any

import gevent
from locust import HttpUser, constant, events, task
from locust.env import Environment
from locust.exception import StopUser

_REPO = str(Path(__file__).resolve().parents[1])
if _REPO not in sys.path:  # loaded by path from any folder
    sys.path.insert(0, _REPO)

from loadtests.scenarios import SCENARIOS, Pairs, load_pairs, request_body  # noqa: E402
from loadtests.summary import (  # noqa: E402
    LOST,
    NO_RETRY_AFTER,
    REFUSALS,
    classify,
    retry_after_seconds,
    row_name,
)

# locust rewrites its CSV files once a second; waiting this long before it closes them makes
# them include the last requests.
CSV_SETTLE_S = 1.5


@events.init_command_line_parser.add_listener
def _options(parser: Any) -> None:
    parser.add_argument("--pairs-file", default="", help="pairs JSONL(.gz); default RewardBench")
    parser.add_argument("--max-pair-chars", type=int, default=1500)
    parser.add_argument("--judge-max-tokens", type=int, default=32)
    parser.add_argument("--judge-seed", type=int, default=0)
    parser.add_argument("--request-limit", type=int, default=0, help="0: no bound")
    parser.add_argument("--send-window", type=float, default=0.0, help="0: no bound")
    parser.add_argument("--request-timeout", type=float, default=600.0)
    parser.add_argument("--max-retry-wait", type=float, default=30.0)
    parser.add_argument("--counts-file", default="")


class Plan:
    """The run's request numbering and bounds, shared by every user (one process, greenlets)."""

    def __init__(self, options: Any) -> None:
        self.pairs: Pairs = load_pairs(
            options.pairs_file or None, options.max_pair_chars, options.judge_seed
        )
        self.max_tokens = int(options.judge_max_tokens)
        self.seed = int(options.judge_seed)
        self.limit = int(options.request_limit)
        self.window = float(options.send_window)
        self.send_until = math.inf
        self.timeout = float(options.request_timeout)
        self.max_retry_wait = float(options.max_retry_wait)
        self.counts_file = options.counts_file
        self.sent = 0
        self.in_flight = 0
        self.recorded = 0
        self.first_sent: float | None = None
        self.last_done: float | None = None
        self.stopped_by: str | None = None
        self.quitting = False

    def start(self) -> None:
        if self.window > 0:
            self.send_until = time.monotonic() + self.window

    def _close_if_due(self) -> None:
        if self.stopped_by is None:
            if self.limit and self.sent >= self.limit:
                self.stopped_by = "request bound"
            elif time.monotonic() >= self.send_until:
                self.stopped_by = "time bound"

    def take(self) -> int | None:
        """The number of the next request to send, or None once a bound is reached."""
        self._close_if_due()
        if self.stopped_by is not None:
            return None
        index = self.sent
        self.sent += 1
        self.in_flight += 1
        if self.first_sent is None:
            self.first_sent = time.time()
        return index

    def done(self) -> None:
        self.in_flight -= 1
        self.recorded += 1
        self.last_done = time.time()

    def quit_if_finished(self, environment: Environment) -> None:
        self._close_if_due()
        if self.stopped_by is not None and self.in_flight == 0 and not self.quitting:
            self.quitting = True
            runner = environment.runner
            if runner is not None:  # not from this user's greenlet, which quit() kills
                gevent.spawn(runner.quit)

    def counts(self) -> dict[str, Any]:
        self._close_if_due()
        return {
            "sent": self.sent,
            "recorded": self.recorded,
            "in_flight": self.in_flight,
            "first_sent": self.first_sent,
            "last_done": self.last_done,
            "stopped_by": self.stopped_by or "locust stopped (run time or signal)",
            "pairs": self.pairs.source,
            "pairs_used": len(self.pairs.rows),
        }


_plan: Plan | None = None


@events.init.add_listener
def _make_plan(environment: Environment, **_: Any) -> None:
    global _plan
    _plan = Plan(environment.parsed_options)


@events.test_start.add_listener
def _start_window(**_: Any) -> None:
    if _plan is not None:
        _plan.start()


@events.quitting.add_listener
def _write_counts(environment: Environment, **_: Any) -> None:
    if _plan is not None and _plan.counts_file:
        Path(_plan.counts_file).write_text(json.dumps(_plan.counts(), indent=2) + "\n")
    gevent.sleep(CSV_SETTLE_S)


def _failure_text(response: Any, label: str) -> str:
    if label == LOST:
        return f"no response: {type(response.error).__name__}: {response.error}"
    if response.status_code in REFUSALS:
        retry_after = response.headers.get("Retry-After")
        if label.endswith(NO_RETRY_AFTER):
            return f"refused: HTTP {label} (Retry-After: {retry_after!r})"
        return f"refused: HTTP {label}, Retry-After: {retry_after}"
    try:
        detail = response.json().get("detail")
    except ValueError:
        detail = response.text
    return f"HTTP {response.status_code}: {str(detail)[:200]}"


class JudgeUser(HttpUser):
    abstract = True
    wait_time = constant(0)
    modes: tuple[str, ...] = ("reflect",)

    @task
    def judge(self) -> None:
        plan = _plan
        assert plan is not None
        index = plan.take()
        if index is None:
            plan.quit_if_finished(self.environment)
            raise StopUser
        body = request_body(index, plan.pairs, self.modes, plan.max_tokens, plan.seed)
        wait = 0.0
        try:
            with self.client.post(
                "/v1/judge",
                json=body,
                name=body["mode"],
                timeout=plan.timeout,
                catch_response=True,
            ) as response:
                retry_after = response.headers.get("Retry-After")
                label = classify(response.status_code, retry_after)
                response.request_meta["name"] = row_name(body["mode"], label)
                if label == "200":
                    response.success()
                else:
                    response.failure(_failure_text(response, label))
                if response.status_code in REFUSALS:
                    wait = retry_after_seconds(retry_after, default=1.0)
        finally:
            plan.done()
        plan.quit_if_finished(self.environment)
        if wait:
            gevent.sleep(min(wait, plan.max_retry_wait))


class SteadyUser(JudgeUser):
    modes = SCENARIOS["steady"].modes


class BurstUser(JudgeUser):
    modes = SCENARIOS["burst"].modes


class MixedUser(JudgeUser):
    modes = SCENARIOS["mixed"].modes
