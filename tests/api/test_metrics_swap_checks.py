"""Sampled background swap checks: counted, never delaying a response, yielding to live traffic."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.judging.types import EngineUsage, Judgment, JudgmentSpec, Message, Trace
from reflectrm.metrics import Metrics
from reflectrm.serving.swap_checks import SwapChecker
from reflectrm.settings import Settings, SwapCheckConfig
from tests.api.test_contract import GOOD
from tests.api.test_metrics import Samples, parse, scrape, value
from tests.conftest import ScriptedEngine, judgment

DELAY_S = 1.0


def first_shown_engine(delay_s: float = 0.0) -> ScriptedEngine:
    """Always prefers the response shown first: every run exits early after one engine call."""
    return ScriptedEngine(stage1=[judgment(1)] * 8, delay_s=delay_s)


def wait_for(client: TestClient, done: Callable[[Samples], bool], timeout_s: float = 10) -> Samples:
    deadline = time.monotonic() + timeout_s
    while True:
        samples = scrape(client)
        if done(samples):
            return samples
        assert time.monotonic() < deadline, "timed out waiting for the metrics"
        time.sleep(0.02)


def timed_judgment(client: TestClient, seed: int = 0) -> float:
    started = time.monotonic()
    r = client.post("/v1/judge", json={**GOOD, "seed": seed})
    assert r.status_code == 200
    return time.monotonic() - started


def test_sampled_check_runs_after_the_response_without_delaying_it():
    # Without background checks: the response takes one engine call.
    with TestClient(
        create_app(Settings(swap_check_fraction=0.0), engine=first_shown_engine(DELAY_S))
    ) as c:
        without = timed_judgment(c)
        assert c.app.state.reflectrm.swap_checks.running == 0

    engine = first_shown_engine(DELAY_S)
    with TestClient(create_app(Settings(swap_check_fraction=1.0), engine=engine)) as c:
        state = c.app.state.reflectrm
        with_checks = timed_judgment(c)
        # The response is back while its swapped judgment is still running in the engine.
        assert state.swap_checks.running == 1
        s = scrape(c)
        assert value(s, "reflectrm_swap_checks_running") == 1
        assert value(s, "reflectrm_swap_checks_total", source="sampled") == 0
        s = wait_for(c, lambda s: value(s, "reflectrm_swap_checks_total", source="sampled") == 1)
    assert value(s, "reflectrm_swap_checks_total", source="sampled", result="inconsistent") == 1
    assert value(s, "reflectrm_judgment_runs_total") == 2
    assert len(engine.calls) == 2
    # Loose on purpose: waiting for the check would add a whole engine call (DELAY_S).
    assert with_checks < without + DELAY_S / 2, (with_checks, without)


def test_sampled_checks_take_every_nth_judgment_with_a_verdict():
    with TestClient(
        create_app(Settings(swap_check_fraction=0.25), engine=first_shown_engine())
    ) as c:
        for seed in range(8):
            assert c.post("/v1/judge", json={**GOOD, "seed": seed}).status_code == 200
        s = wait_for(c, lambda s: value(s, "reflectrm_swap_checks_total", source="sampled") == 2)
        # check_swap requests are checked already, so they are never sampled.
        for seed in range(4):
            c.post("/v1/judge", json={**GOOD, "check_swap": True, "seed": seed})
        s = wait_for(c, lambda s: value(s, "reflectrm_swap_checks_total", source="requested") == 4)
    assert value(s, "reflectrm_swap_checks_total", source="sampled") == 2
    assert value(s, "reflectrm_swap_checks_dropped_total") == 0


def test_live_traffic_preempts_a_running_check():
    engine = first_shown_engine(DELAY_S)
    settings = Settings(swap_check_fraction=1.0, swap_check_busy_in_flight=1)
    with TestClient(create_app(settings, engine=engine)) as c:
        state = c.app.state.reflectrm
        timed_judgment(c)
        assert state.swap_checks.running == 1
        # A live request arrives: the check is cancelled and its engine request aborted.
        timed_judgment(c, seed=1)
        s = scrape(c)
        assert value(s, "reflectrm_swap_checks_dropped_total", reason="preempted") == 1
        assert engine.aborted == 1
    # The second request's own check was running at shutdown.
    assert value(parse_state(state), "reflectrm_swap_checks_dropped_total", reason="shutdown") == 1


def parse_state(state) -> Samples:
    return parse(state.metrics.render().decode())


# --- the checker on its own, with a judge whose judgments finish when the test says -------------


def verdict(winner: int | None = 1) -> Judgment:
    return Judgment(
        winner=winner,
        scores=(1.0, 0.0),
        outcome="verdict" if winner else "no_verdict",
        mode="reflect",
        analysis=None,
        votes=(8, 0),
        early_exit=True,
        usage=EngineUsage(),
        trace=Trace(candidates=()),
        seed=0,
    )


REQUEST = JudgmentSpec(conversation=(Message("user", "q"),), responses=("a", "b"))


@dataclass
class GatedJudge:
    """``judge`` waits for ``release``, then answers ``answer`` (or raises it)."""

    answer: Judgment | Exception = field(default_factory=lambda: verdict(2))
    release: asyncio.Event = field(default_factory=asyncio.Event)
    started: int = 0
    cancelled: int = 0

    async def judge(self, request: JudgmentSpec, request_id: str) -> Judgment:
        assert request.responses == ("b", "a")  # the swapped order
        self.started += 1
        try:
            await self.release.wait()
        except asyncio.CancelledError:
            self.cancelled += 1
            raise
        if isinstance(self.answer, Exception):
            raise self.answer
        return self.answer


class Load:
    def __init__(self) -> None:
        self.in_flight = 0

    def __call__(self) -> int:
        return self.in_flight


def checker(**config) -> tuple[SwapChecker, Metrics, Load]:
    metrics, load = Metrics(), Load()
    base = {"fraction": 1.0, "poll_s": 0.01}
    return SwapChecker(SwapCheckConfig(**{**base, **config}), metrics, load), metrics, load


def counts(metrics: Metrics) -> Samples:
    return parse(metrics.render().decode())


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0.02)


@pytest.mark.parametrize(
    ("answer", "result"),
    [(verdict(2), "consistent"), (verdict(1), "inconsistent"), (verdict(None), "no_verdict")],
)
async def test_results(answer: Judgment, result: str):
    swaps, metrics, _ = checker()
    judge = GatedJudge(answer)
    assert swaps.offer(judge, REQUEST, verdict(1), "r1")  # type: ignore[arg-type]
    judge.release.set()
    await settle()
    assert value(counts(metrics), "reflectrm_swap_checks_total", source="sampled", result=result)


async def test_a_failed_check_is_counted_as_error():
    swaps, metrics, _ = checker()
    judge = GatedJudge(RuntimeError("engine gone"))
    swaps.offer(judge, REQUEST, verdict(1), "r1")  # type: ignore[arg-type]
    judge.release.set()
    await settle()
    assert value(counts(metrics), "reflectrm_swap_checks_total", result="error") == 1
    assert swaps.running == 0


async def test_a_stuck_check_times_out_and_frees_its_slot():
    swaps, metrics, _ = checker(timeout_s=0.05)
    judge = GatedJudge()
    swaps.offer(judge, REQUEST, verdict(1), "r1")  # type: ignore[arg-type]
    await settle()
    assert judge.cancelled == 1
    assert swaps.running == 0
    assert value(counts(metrics), "reflectrm_swap_checks_total", result="error") == 1


async def test_no_verdict_judgments_are_not_sampled():
    swaps, _, _ = checker(fraction=0.5)
    judge = GatedJudge()
    assert not swaps.offer(judge, REQUEST, verdict(None), "r0")  # type: ignore[arg-type]
    taken = [swaps.offer(judge, REQUEST, verdict(1), f"r{i}") for i in range(4)]  # type: ignore[arg-type]
    assert taken == [False, True, False, True]
    await swaps.close()


async def test_bounded_queue_drops_when_full():
    swaps, metrics, _ = checker(concurrency=1, max_pending=1)
    judge = GatedJudge()
    taken = [swaps.offer(judge, REQUEST, verdict(1), f"r{i}") for i in range(3)]  # type: ignore[arg-type]
    await settle()
    assert taken == [True, True, False]
    assert (swaps.running, swaps.pending, judge.started) == (1, 1, 1)
    s = counts(metrics)
    assert value(s, "reflectrm_swap_checks_dropped_total", reason="queue_full") == 1
    assert value(s, "reflectrm_swap_checks_pending") == 1
    judge.release.set()
    await settle()
    assert judge.started == 2
    assert swaps.running == swaps.pending == 0
    assert value(counts(metrics), "reflectrm_swap_checks_total", result="consistent") == 2


async def test_not_started_while_live_traffic_is_busy():
    swaps, metrics, load = checker(busy_in_flight=2)
    load.in_flight = 2
    judge = GatedJudge()
    swaps.offer(judge, REQUEST, verdict(1), "r1")  # type: ignore[arg-type]
    await settle()
    assert judge.started == 0
    assert swaps.pending == 0
    assert value(counts(metrics), "reflectrm_swap_checks_dropped_total", reason="busy") == 1


async def test_cancelled_when_live_traffic_arrives():
    swaps, metrics, load = checker(busy_in_flight=2)
    judge = GatedJudge()
    swaps.offer(judge, REQUEST, verdict(1), "r1")  # type: ignore[arg-type]
    await settle()
    load.in_flight = 2
    await settle()
    assert judge.cancelled == 1
    assert swaps.running == 0
    assert value(counts(metrics), "reflectrm_swap_checks_dropped_total", reason="preempted") == 1


async def test_close_drops_pending_and_cancels_running():
    swaps, metrics, _ = checker(concurrency=1, max_pending=4)
    judge = GatedJudge()
    for i in range(3):
        swaps.offer(judge, REQUEST, verdict(1), f"r{i}")  # type: ignore[arg-type]
    await settle()
    await swaps.close()
    assert judge.cancelled == 1
    assert swaps.running == swaps.pending == 0
    assert value(counts(metrics), "reflectrm_swap_checks_dropped_total", reason="shutdown") == 3
    assert not swaps.offer(judge, REQUEST, verdict(1), "late")  # type: ignore[arg-type]
    assert value(counts(metrics), "reflectrm_swap_checks_dropped_total", reason="shutdown") == 4
