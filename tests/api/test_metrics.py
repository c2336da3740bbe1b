"""GET /metrics on the app with a scripted engine: what each judgment records, and that every
metric the dashboards and docs/metrics.md name exists."""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from loadtests.common.metrics import parse_metrics
from reflectrm.app import create_app
from reflectrm.metrics import Metrics
from reflectrm.settings import Settings
from tests.api.test_contract import GOOD, mixed_engine
from tests.conftest import ScriptedEngine, judgment

ROOT = Path(__file__).resolve().parents[2]
DASHBOARDS = sorted((ROOT / "deploy" / "grafana" / "dashboards").glob("*.json"))
METRICS_DOC = ROOT / "docs" / "metrics.md"
METRIC_NAME = re.compile(r"\b(reflectrm_[a-z0-9_]+|vllm:[a-z0-9_:]+)")

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def scrape(client: TestClient) -> Samples:
    r = client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    return parse(r.text)


def parse(text: str) -> Samples:
    return parse_metrics(text, by="labels")


def value(samples: Samples, name: str, **labels: str) -> float:
    """The sum over the series of ``name`` whose labels include ``labels``."""
    wanted = set(labels.items())
    found = [v for (n, ls), v in samples.items() if n == name and wanted <= ls]
    assert found, f"no series {name}{labels}"
    return sum(found)


def dashboard_exprs() -> list[str]:
    exprs = []
    for path in DASHBOARDS:
        for panel in json.loads(path.read_text())["panels"]:
            exprs += [t["expr"] for t in panel.get("targets", [])]
    return exprs


def named_metrics() -> set[str]:
    """Every metric a dashboard query or the metrics table names."""
    names = set(METRIC_NAME.findall(METRICS_DOC.read_text()))
    for expr in dashboard_exprs():
        names |= set(METRIC_NAME.findall(expr))
    return names


def exposed(name: str, samples: Samples) -> bool:
    present = {n for n, _ in samples}
    return any(f"{name}{suffix}" in present for suffix in ("", "_bucket", "_count", "_total"))


def slow_engine(**kw) -> ScriptedEngine:
    return ScriptedEngine(stage1=[judgment(1)] * 8, **kw)


@pytest.fixture
def client() -> Iterator[TestClient]:
    app = create_app(Settings(swap_check_fraction=0.0), engine=mixed_engine())
    with TestClient(app) as c:
        yield c


def test_judgments_are_recorded_and_match_the_responses(client: TestClient):
    bodies = [
        client.post("/v1/judge", json={**GOOD, "seed": 1}).json(),
        client.post("/judge", json={**GOOD, "seed": 2, "check_swap": True}).json(),
        client.post("/v1/judge", json={**GOOD, "mode": "vote"}).json(),
        client.post("/v1/judge", json={**GOOD, "mode": "single"}).json(),
    ]
    s = scrape(client)
    assert value(s, "reflectrm_judgments_total", mode="reflect", outcome="verdict") == 2
    assert value(s, "reflectrm_judgments_total", mode="vote", outcome="verdict") == 1
    assert value(s, "reflectrm_judgments_total", mode="single", outcome="verdict") == 1
    assert value(s, "reflectrm_judgment_duration_seconds_count") == 4
    assert value(s, "reflectrm_judgment_runs_total", mode="reflect") == 3  # check_swap: 2 runs
    assert value(s, "reflectrm_judgment_runs_total") == 5
    assert value(s, "reflectrm_stage_duration_seconds_count", stage="rollouts") == 5
    assert value(s, "reflectrm_stage_duration_seconds_count", stage="reflections") == 3
    # The engine-side counters add up to what the responses report.
    for metric, field in [
        ("reflectrm_generated_tokens_total", "generated_tokens"),
        ("reflectrm_prompt_tokens_total", "prompt_tokens"),
        ("reflectrm_engine_requests_total", "engine_requests"),
    ]:
        assert value(s, metric) == sum(b["usage"][field] for b in bodies), metric
    assert value(s, "reflectrm_engine_requests_total", stage="reflections") == 3 * 7
    assert value(s, "reflectrm_generated_outputs_total", stage="rollouts") == 8 + 8 + 8 + 8 + 1
    assert value(s, "reflectrm_generated_tokens_total", stage="reflections") == 3 * 7 * 10
    # Reflect: the seven winners vote unanimously; vote: 7 against 1; single: one vote.
    assert value(s, "reflectrm_vote_margin_ratio_count", mode="reflect") == 3
    assert value(s, "reflectrm_vote_margin_ratio_sum", mode="reflect") == 3.0
    assert value(s, "reflectrm_vote_margin_ratio_sum", mode="vote") == 0.75
    assert value(s, "reflectrm_early_exits_total") == 0
    assert value(s, "reflectrm_parse_failures_total") == 0
    assert value(s, "reflectrm_judgments_in_flight") == 0


def test_early_exits_parse_failures_and_no_verdicts():
    # Two outputs unparseable, the rest unanimous: an early exit with 2 parse failures.
    engine = ScriptedEngine(stage1=[judgment(2)] * 6 + [judgment(None)] * 2)
    with TestClient(create_app(Settings(), engine=engine)) as c:
        c.post("/v1/judge", json=GOOD)
        engine.stage1 = [judgment(None)] * 8
        assert c.post("/v1/judge", json={**GOOD, "seed": 1}).json()["outcome"] == "no_verdict"
        s = scrape(c)
    assert value(s, "reflectrm_early_exits_total") == 1
    assert value(s, "reflectrm_parse_failures_total", stage="rollouts") == 2 + 8
    assert value(s, "reflectrm_generated_outputs_total", stage="rollouts") == 16
    assert value(s, "reflectrm_judgments_total", outcome="no_verdict") == 1
    assert value(s, "reflectrm_judgment_runs_total", outcome="no_verdict") == 1
    assert value(s, "reflectrm_vote_margin_ratio_count") == 1  # no-verdict runs have no vote


def test_a_tie_of_both_orders_is_counted_as_a_tie_not_as_no_verdict():
    # Every output says the first-shown response is better: in the swapped order that is
    # response 2, so the averaged scores are (1 + 0) / 2 each: a tie, every reply a verdict.
    engine = ScriptedEngine(stage1=[judgment(1)] * 8)
    with TestClient(create_app(Settings(), engine=engine)) as c:
        body = c.post("/v1/judge", json={**GOOD, "debias": "swap"}).json()
        assert (body["winner"], body["scores"]) == (None, [0.5, 0.5])
        group = {"prompt": "q", "completions": ["a", "b", "c"], "strategy": "round_robin"}
        rewards = c.post("/v1/rewards", json={**group, "debias": "swap", "seed": 1}).json()
        assert rewards["rewards"] == [0.5, 0.5, 0.5]
        s = scrape(c)
    # 1 pair + the group's 3 comparisons, each of both orders with a verdict.
    assert value(s, "reflectrm_judgments_total", outcome="tie") == 1 + 3
    assert value(s, "reflectrm_judgments_total", outcome="no_verdict") == 0
    assert value(s, "reflectrm_judgment_runs_total", outcome="verdict") == 2 + 6


def test_reflection_parse_failures_are_counted():
    engine = mixed_engine()
    engine.reflect = lambda c1, c2: None
    with TestClient(create_app(Settings(), engine=engine)) as c:
        c.post("/v1/judge", json=GOOD)
        s = scrape(c)
    assert value(s, "reflectrm_parse_failures_total", stage="reflections") == 7
    assert value(s, "reflectrm_generated_outputs_total", stage="reflections") == 7


def test_requested_swap_checks_are_counted():
    # The scripted model prefers whatever is shown first: inconsistent by construction.
    with TestClient(create_app(Settings(), engine=slow_engine())) as c:
        assert c.post("/v1/judge", json={**GOOD, "check_swap": True}).json()["consistent"] is False
        s = scrape(c)
    assert value(s, "reflectrm_swap_checks_total", source="requested", result="inconsistent") == 1
    assert value(s, "reflectrm_swap_checks_total", source="sampled") == 0


@pytest.mark.parametrize(
    ("settings", "engine_kw", "body", "status", "outcome"),
    [
        ({"max_tokens_limit": 512}, {}, {"max_tokens": 1000}, 422, "invalid"),
        ({}, {"max_model_len": 300}, {"responses": ["word " * 400, "x"]}, 413, "too_long"),
        ({}, {"dead": True}, {}, 503, "unavailable"),
        ({"request_timeout_s": 0.2}, {"delay_s": 30}, {}, 504, "timeout"),
    ],
)
def test_errors_are_counted_by_outcome(settings, engine_kw, body, status, outcome):
    with TestClient(create_app(Settings(**settings), engine=mixed_engine(**engine_kw))) as c:
        assert c.post("/v1/judge", json={**GOOD, **body}).status_code == status
        s = scrape(c)
    assert value(s, "reflectrm_judgments_total", mode="reflect", outcome=outcome) == 1
    assert value(s, "reflectrm_judgment_duration_seconds_count") == 0


def test_rejected_requests_and_in_flight():
    engine = slow_engine(delay_s=1.0)
    settings = Settings(max_concurrent_judgments=1, max_queued_judgments=0)
    with TestClient(create_app(settings, engine=engine)) as c:
        first = threading.Thread(target=lambda: c.post("/v1/judge", json=GOOD))
        first.start()
        deadline = time.monotonic() + 5
        while value(scrape(c), "reflectrm_judgments_in_flight") < 1:
            assert time.monotonic() < deadline, "the first judgment never started"
            time.sleep(0.02)
        assert c.post("/v1/judge", json={**GOOD, "seed": 1}).status_code == 429
        first.join()
        s = scrape(c)
    assert value(s, "reflectrm_judgments_total", outcome="rejected") == 1
    assert value(s, "reflectrm_judgments_total", outcome="verdict") == 1
    assert value(s, "reflectrm_judgments_in_flight") == 0


def test_metric_names_prefixes_units_and_labels():
    registry = Metrics().registry
    families = list(registry.collect())
    assert len(families) >= 15
    for family in families:
        assert family.name.startswith("reflectrm_"), family.name
        if family.type == "counter":
            assert family.samples[0].name.endswith("_total")
        if family.type == "histogram":
            assert family.name.endswith(("_seconds", "_ratio")), family.name
        labels = {k for s in family.samples for k in s.labels if k != "le"}
        assert len(labels) <= 2, (family.name, labels)


def test_every_metric_named_in_dashboards_and_docs_exists(client: TestClient):
    """The judge's metrics here; the engine's vllm:* ones are checked against a real engine in
    tests/e2e/test_prometheus.py."""
    names = named_metrics()
    assert DASHBOARDS
    assert {"reflectrm_judgments_total", "vllm:kv_cache_usage_perc"} <= names
    samples = scrape(client)
    # The forwarding counter is exposed where REFLECTRM_PEERS is set.
    with_peers = Metrics()
    with_peers.enable_peers()
    samples |= parse(with_peers.render().decode())
    missing = sorted(n for n in names if n.startswith("reflectrm_") and not exposed(n, samples))
    assert not missing, f"named in the dashboards or docs/metrics.md but not exposed: {missing}"
    # And the other way round: every metric of the judge is documented.
    documented = set(METRIC_NAME.findall(METRICS_DOC.read_text()))
    for family in with_peers.registry.collect():
        name = family.samples[0].name if family.type == "counter" else family.name
        assert name in documented, f"{name} is missing from docs/metrics.md"
