"""A real Prometheus scrapes the service on the real engine; every query of every dashboard panel
must return data after a few real judgments, and every metric the dashboards and
docs/metrics.md name must be exposed, the engine's vllm:* ones included."""

from __future__ import annotations

import asyncio
import concurrent.futures
import json
import math
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
import yaml

from loadtests.common.ports import free_port
from reflectrm.app import create_app
from tests.api.test_metrics import DASHBOARDS, exposed, named_metrics, parse, value
from tests.conftest import unavailable
from tests.e2e.conftest import LiveService, e2e_settings

ROOT = Path(__file__).resolve().parents[2]
PAIR = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}
# Grafana's interval variables, as Prometheus needs them: wide enough to hold the whole test.
GRAFANA_VARIABLES = {"$__rate_interval": "10m", "$__interval": "10m", "$__range": "1h"}


def wait_until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out waiting for {what}")
        time.sleep(0.2)


@pytest.fixture(scope="module")
def service(live: LiveService) -> Iterator[str]:
    """A second app on the session's engine, sampling every judgment for a background swap
    check, served by uvicorn on the engine's loop. It is its own only peer
    (``REFLECTRM_PEERS`` naming itself), so the peer metrics are exposed and every cohort is
    owned here: nothing is forwarded."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    settings = e2e_settings(
        swap_check_fraction=1.0, max_tokens=32, num_candidates=4, peers=url, peer_url=url
    )
    app = create_app(settings, engine=live.engine)
    server = uvicorn.Server(
        uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    serving = asyncio.run_coroutine_threadsafe(server.serve(), live.loop)
    wait_until(lambda: server.started or serving.done(), 60, "the metrics service to start")
    assert not serving.done(), serving.exception()
    try:
        yield url
    finally:
        server.should_exit = True
        serving.result(timeout=120)


@pytest.fixture(scope="module")
def prometheus(service: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Prometheus (the Debian package) on loopback, with deploy/prometheus.yml pointed at the
    service and a 1 s scrape interval."""
    binary = shutil.which("prometheus")
    if binary is None:
        unavailable("prometheus is not installed: run scripts/system-deps.sh (make test does)")
    folder = tmp_path_factory.mktemp("prometheus")
    config = yaml.safe_load((ROOT / "deploy" / "prometheus.yml").read_text())
    config["global"].update(scrape_interval="1s", evaluation_interval="1s")
    config["scrape_configs"][0]["static_configs"] = [{"targets": [service.removeprefix("http://")]}]
    (folder / "prometheus.yml").write_text(yaml.safe_dump(config))
    port = free_port()
    log = (folder / "prometheus.log").open("wb")
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={folder / 'prometheus.yml'}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until(lambda: _ready(url) or process.poll() is not None, 60, "Prometheus")
        assert process.poll() is None, (folder / "prometheus.log").read_text()[-3000:]
        # Judgments start only after a first scrape, so every counter's increase is seen.
        wait_until(lambda: _vector(url, 'up{job="reflectrm"} == 1'), 60, "a first scrape")
        yield url
    finally:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
        log.close()


def _ready(url: str) -> bool:
    try:
        return httpx.get(f"{url}/-/ready", timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def _vector(prometheus: str, expr: str) -> list[dict[str, Any]]:
    r = httpx.get(f"{prometheus}/api/v1/query", params={"query": expr}, timeout=30)
    body = r.json()
    assert r.status_code == 200, (expr, body)
    assert body["status"] == "success", (expr, body)
    result: list[dict[str, Any]] = body["data"]["result"]
    return result


@pytest.fixture(scope="module")
def judged(service: str, prometheus: str) -> int:
    """A few real judgments of each mode, one with check_swap, and their background checks,
    all scraped. Returns how many background checks were due."""
    requests = [
        {**PAIR, "seed": 1, "check_swap": True},
        {**PAIR, "seed": 2},
        {**PAIR, "seed": 3, "mode": "vote"},
        {**PAIR, "seed": 4, "mode": "single"},
    ]
    due = 0
    with httpx.Client(base_url=service, timeout=300) as client:
        for body in requests:
            r = client.post("/v1/judge", json=body)
            assert r.status_code == 200, r.text
            # Every answer with a verdict and without check_swap is sampled (fraction 1.0).
            due += r.json()["winner"] is not None and not body.get("check_swap")

        def checks_done() -> bool:
            samples = parse(client.get("/metrics").text)
            running = value(samples, "reflectrm_swap_checks_running")
            pending = value(samples, "reflectrm_swap_checks_pending")
            return running + pending == 0

        wait_until(checks_done, 180, "the background swap checks")
        # A cohort of two per-sample calls (one greedy judgment): the cohort panels' data.
        member = {
            "prompt": PAIR["prompt"],
            "group_size": 2,
            "strategy": "knockout",
            "mode": "single",
            "debias": "none",
            "seed": 5,
        }
        with concurrent.futures.ThreadPoolExecutor(2) as pool:
            replies = list(
                pool.map(
                    lambda text: client.post(
                        "/v1/rewards/sample", json={**member, "completion": text}
                    ),
                    PAIR["responses"],
                )
            )
        assert [r.status_code for r in replies] == [200, 200], [r.text for r in replies]
        assert [r.json()["cohort"]["arrived"] for r in replies] == [2, 2]
    assert due >= 1, "no answer had a verdict"
    sampled = f'sum(reflectrm_swap_checks_total{{source="sampled"}}) >= {due}'
    wait_until(lambda: bool(_vector(prometheus, sampled)), 30, "Prometheus to scrape them")
    return due


def test_metrics_endpoint_shows_the_judge_and_the_engine(service: str, judged: int):
    samples = parse(httpx.get(f"{service}/metrics", timeout=30).text)
    # Four pair calls and the cohort's one judgment.
    assert value(samples, "reflectrm_judgment_duration_seconds_count") == 5
    assert value(samples, "reflectrm_cohorts_closed_total", how="full") == 1
    assert value(samples, "reflectrm_swap_checks_total", source="requested") == 1
    assert value(samples, "reflectrm_swap_checks_total", source="sampled") == judged
    assert value(samples, "reflectrm_swap_checks_dropped_total") == 0
    assert value(samples, "reflectrm_generated_tokens_total", stage="reflections") > 0
    assert value(samples, "vllm:generation_tokens_total") > 0
    assert value(samples, "vllm:num_requests_running") >= 0
    # Its own only peer: the cohort was owned here, not one call forwarded or judged as split.
    for outcome in ("ok", "error", "fallback_local"):
        assert value(samples, "reflectrm_peer_forward_total", outcome=outcome) == 0
    missing = sorted(name for name in named_metrics() if not exposed(name, samples))
    assert not missing, f"named in the dashboards or docs/metrics.md but not exposed: {missing}"


def panel_queries() -> list[tuple[str, str, str]]:
    """(dashboard, panel title, PromQL with Grafana's variables filled in) of every target."""
    queries = []
    # The fleet dashboard's panels need a fleet (router, replicas): not this single service.
    for path in (p for p in DASHBOARDS if p.name != "reflectrm-fleet.json"):
        for panel in json.loads(path.read_text())["panels"]:
            for target in panel.get("targets", []):
                expr = target["expr"]
                for variable, replacement in GRAFANA_VARIABLES.items():
                    expr = expr.replace(variable, replacement)
                assert "$" not in expr, f"unhandled variable in {expr}"
                queries.append((path.name, panel["title"], expr))
    return queries


def test_every_dashboard_query_has_data(judged: int, prometheus: str):
    queries = panel_queries()
    assert len(queries) >= 20
    empty = []
    for dashboard, title, expr in queries:
        result = _vector(prometheus, expr)
        values = [float(sample["value"][1]) for sample in result]
        if not any(math.isfinite(v) for v in values):
            empty.append(f"{dashboard} / {title}: {expr} -> {values}")
    assert not empty, "panels without data:\n" + "\n".join(empty)
