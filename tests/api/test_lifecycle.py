"""How the service stops: the engine health probe, exit on engine failure, and the drain on
SIGTERM, on the app with a scripted engine (the real engine and process: tests/e2e)."""

from __future__ import annotations

import contextlib
import signal
import threading
import time
from collections.abc import AsyncIterator, Callable
from concurrent.futures import Future, ThreadPoolExecutor

import httpx
import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.server import DrainingServer
from reflectrm.serving.lifecycle import EXIT_ENGINE_FAILURE, Lifecycle
from reflectrm.settings import Settings
from tests.api.served import served
from tests.conftest import ScriptedEngine, judgment

GOOD = {"prompt": "What is 2 + 2?", "responses": ["4", "5"], "mode": "single"}


def wait_for(condition: Callable[[], bool], what: str, timeout: float = 60.0) -> None:
    """Bounded wait for something that must happen (not a timing assertion)."""
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.02)


def scripted(delay_s: float = 0.0) -> ScriptedEngine:
    return ScriptedEngine(stage1=[judgment(1)] * 8, delay_s=delay_s)


def test_a_dead_engine_is_found_without_traffic_and_the_process_is_told_to_exit():
    engine = scripted()
    app = create_app(Settings(engine_check_interval_s=0.05), engine=engine)
    lifecycle: Lifecycle = app.state.lifecycle
    exits: list[int] = []
    lifecycle.on_exit = exits.append
    with TestClient(app) as c:
        assert c.get("/ready").status_code == 200
        engine.dead = True  # no request touches the engine from here on
        wait_for(lambda: exits == [EXIT_ENGINE_FAILURE], "the probe asks for exit status 1")
        assert lifecycle.exit_code == EXIT_ENGINE_FAILURE
        assert app.state.reflectrm.judge is None  # nothing is admitted any more
        r = c.post("/v1/judge", json=GOOD)
        assert r.status_code == 503
        assert "health check" in r.json()["detail"]
        ready = c.get("/ready")
        assert ready.status_code == 503
        assert "stopped" in ready.json()["detail"]


def test_judgments_in_flight_end_with_503_when_the_engine_dies_not_at_their_deadline():
    # A hung engine: the requests it holds never return; its health check fails.
    engine = scripted(delay_s=600)
    app = create_app(
        Settings(engine_check_interval_s=0.05, request_timeout_s=600, max_concurrent_judgments=2),
        engine=engine,
    )
    with TestClient(app) as c, ThreadPoolExecutor(4) as pool:
        calls = [pool.submit(c.post, "/v1/judge", json={**GOOD, "seed": i}) for i in range(4)]
        wait_for(lambda: len(engine.calls) == 2, "two judgments in flight, two queued")
        engine.dead = True
        answers = [f.result(timeout=60) for f in calls]  # not 600 s: the deadline
    assert [r.status_code for r in answers] == [503] * 4
    assert all("health check" in r.json()["detail"] for r in answers)
    assert all(r.headers["retry-after"] == "5" for r in answers)
    assert engine.aborted == 2  # the engine requests of both admitted judgments were cancelled


def test_with_exit_on_engine_failure_off_the_service_stays_up_answering_503():
    engine = scripted()
    app = create_app(
        Settings(engine_check_interval_s=0.05, exit_on_engine_failure=False), engine=engine
    )
    lifecycle: Lifecycle = app.state.lifecycle
    exits: list[int] = []
    lifecycle.on_exit = exits.append
    with TestClient(app) as c:
        engine.dead = True
        wait_for(lambda: lifecycle.failed is not None, "the probe notices")
        assert c.get("/ready").status_code == 503
        assert c.get("/health").status_code == 200
    assert exits == []
    assert lifecycle.exit_code is None


@pytest.mark.parametrize(("exit_on_failure", "code"), [(True, EXIT_ENGINE_FAILURE), (False, None)])
def test_an_engine_that_fails_to_start_ends_the_process_when_configured(exit_on_failure, code):
    @contextlib.asynccontextmanager
    async def broken(settings) -> AsyncIterator[ScriptedEngine]:
        raise RuntimeError("no such model folder")
        yield  # pragma: no cover

    app = create_app(Settings(exit_on_engine_failure=exit_on_failure), engine_factory=broken)
    lifecycle: Lifecycle = app.state.lifecycle
    exits: list[int] = []
    lifecycle.on_exit = exits.append
    with TestClient(app) as c:
        wait_for(lambda: lifecycle.failed is not None, "the failed start is noticed")
        r = c.get("/ready")
        assert r.status_code == 503
        assert "no such model folder" in r.json()["detail"]
        if code is not None:
            wait_for(lambda: exits == [code], "exit requested")
    assert lifecycle.exit_code == code


# --- the drain on SIGTERM, over real HTTP --------------------------------------------------------


class Drained:
    """The app under the service's DrainingServer on a loopback port."""

    def __init__(self, engine: ScriptedEngine, **settings) -> None:
        self.engine = engine
        self.app = create_app(Settings(**settings), engine=engine)
        self.lifecycle: Lifecycle = self.app.state.lifecycle
        self.server: DrainingServer | None = None

    def make_server(self, config):
        self.server = DrainingServer(config, self.lifecycle)
        return self.server


def post_in_background(pool: ThreadPoolExecutor, url: str, body: dict) -> Future[httpx.Response]:
    return pool.submit(httpx.post, f"{url}/v1/judge", json=body, timeout=120)


def test_sigterm_drains_ready_and_new_judgments_503_at_once_in_flight_ones_finish():
    drained = Drained(scripted(delay_s=1.5), shutdown_grace_s=60)
    with served(drained.app, drained.make_server) as s, ThreadPoolExecutor(2) as pool:
        running = post_in_background(pool, s.url, GOOD)
        wait_for(lambda: len(drained.engine.calls) == 1, "a judgment in flight")
        assert drained.server is not None
        drained.server.handle_exit(signal.SIGTERM, None)
        wait_for(lambda: drained.lifecycle.draining, "draining")
        # Still listening: /ready says 503 at once, a new judgment is refused with 503.
        ready = httpx.get(f"{s.url}/ready")
        assert ready.status_code == 503
        assert "shutting down" in ready.json()["detail"]
        refused = httpx.post(f"{s.url}/v1/judge", json=GOOD)
        assert refused.status_code == 503
        assert "shutting down" in refused.json()["detail"]
        assert refused.headers["retry-after"] == "5"
        assert httpx.get(f"{s.url}/health").status_code == 200
        # The judgment in flight finishes within the grace period.
        assert running.result(timeout=60).status_code == 200
        wait_for(lambda: drained.server.should_exit, "the server stops after the drain")
    assert drained.lifecycle.exit_code == 0
    assert len(drained.engine.calls) == 1  # the refused one never reached the engine


def test_judgments_still_running_when_the_grace_period_ends_are_aborted_with_503():
    drained = Drained(scripted(delay_s=600), shutdown_grace_s=0.3, request_timeout_s=600)
    with served(drained.app, drained.make_server) as s, ThreadPoolExecutor(2) as pool:
        running = post_in_background(pool, s.url, GOOD)
        wait_for(lambda: len(drained.engine.calls) == 1, "a judgment in flight")
        assert drained.server is not None
        drained.server.handle_exit(signal.SIGTERM, None)
        r = running.result(timeout=60)
        assert r.status_code == 503
        assert "REFLECTRM_SHUTDOWN_GRACE_S" in r.json()["detail"]
        wait_for(lambda: drained.server.should_exit, "the server stops")
    assert drained.engine.aborted == 1
    assert drained.lifecycle.exit_code == 0


def test_sigterm_answers_members_waiting_for_their_cohorts_with_503_at_once():
    """Waiting members hold no admission slot, so the drain does not wait for them: they are
    told at once (503, retry elsewhere), not cut off when the server stops."""
    drained = Drained(scripted(), shutdown_grace_s=60, cohort_timeout_s=300)
    member = {**GOOD, "completion": "4", "group_size": 4}
    member.pop("responses")
    with served(drained.app, drained.make_server) as s, ThreadPoolExecutor(2) as pool:
        waiting = pool.submit(httpx.post, f"{s.url}/v1/rewards/sample", json=member, timeout=120)
        wait_for(lambda: drained.app.state.reflectrm.cohorts.open == 1, "an open cohort")
        assert drained.server is not None
        drained.server.handle_exit(signal.SIGTERM, None)
        r = waiting.result(timeout=30)
        assert r.status_code == 503, r.text
        assert "shutting down" in r.json()["detail"]
        assert r.headers["retry-after"]
        wait_for(lambda: drained.server.should_exit, "the server stops after the drain")
    assert drained.lifecycle.exit_code == 0
    assert drained.engine.calls == []


def test_a_second_signal_cuts_the_grace_period_short():
    drained = Drained(scripted(delay_s=600), shutdown_grace_s=600, request_timeout_s=600)
    with served(drained.app, drained.make_server) as s, ThreadPoolExecutor(2) as pool:
        running = post_in_background(pool, s.url, GOOD)
        wait_for(lambda: len(drained.engine.calls) == 1, "a judgment in flight")
        assert drained.server is not None
        drained.server.handle_exit(signal.SIGTERM, None)
        wait_for(lambda: drained.lifecycle.draining, "draining")
        threading.Event().wait(0.2)
        assert not running.done()  # waiting out its grace period
        drained.server.handle_exit(signal.SIGINT, None)
        assert running.result(timeout=60).status_code == 503
    assert drained.lifecycle.exit_code == 0
