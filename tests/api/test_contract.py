"""The HTTP contract and every error status, on the app with a scripted engine."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor

import pytest
from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.engines.base import Prompt
from reflectrm.settings import Settings
from tests.conftest import ScriptedEngine, judgment

GOOD = {"prompt": "What is 2 + 2?", "responses": ["4", "5"]}


def mixed_engine(**kw) -> ScriptedEngine:
    """c0 (most confident) says 1; the rest say 2 and all beat it in reflection."""
    gens = [judgment(1, "a0", (-0.01,) * 9 + (-0.1,))]
    gens += [judgment(2, f"a{i}", (-0.01,) * 9 + (-1.0 - i,)) for i in range(1, 8)]
    return ScriptedEngine(stage1=gens, reflect=lambda c1, c2: 2 if c1 == "a0" else 1, **kw)


@contextlib.contextmanager
def client_for(engine: ScriptedEngine, **settings) -> Iterator[TestClient]:
    app = create_app(Settings(**settings), engine=engine)
    with TestClient(app) as client:
        yield client


@pytest.fixture
def client() -> Iterator[TestClient]:
    with client_for(mixed_engine()) as c:
        yield c


def test_judge_contract(client: TestClient):
    r = client.post("/v1/judge", json={**GOOD, "seed": 5, "return_trace": True})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["winner"] == 2
    assert body["outcome"] == "verdict"
    assert body["mode"] == "reflect"
    assert body["scores"] == [0.0, 1.0]
    assert body["votes"] == [0, 7]
    assert body["early_exit"] is False
    assert body["consistent"] is None
    assert body["usage"]["engine_requests"] == 8
    assert body["template_version"] == "v1"
    assert body["model"] == "scripted"
    assert body["seed"] == 5
    assert body["request_id"]
    trace = body["trace"]
    assert len(trace["candidates"]) == 8
    assert trace["anchor"] == 0
    assert len(trace["reflections"]) == 7
    assert {r["verdict"] for r in trace["reflections"]} == {"candidate"}
    assert trace["winner_group"] == [1, 2, 3, 4, 5, 6, 7]
    assert body["analysis"] == "a1"


def test_short_path_and_messages(client: TestClient):
    msgs = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "Hi"},
        {"role": "assistant", "content": "Hello"},
        {"role": "user", "content": "2+2?"},
    ]
    r = client.post("/judge", json={"messages": msgs, "responses": ["4", "5"], "mode": "single"})
    assert r.status_code == 200, r.text
    assert r.json()["mode"] == "single"
    assert r.json()["trace"] is None


def test_check_swap_reports_consistency():
    # The scripted model always prefers whatever is shown first: inconsistent by construction.
    with client_for(ScriptedEngine(stage1=[judgment(1)] * 8)) as c:
        body = c.post("/v1/judge", json={**GOOD, "check_swap": True}).json()
    assert body["winner"] == 1
    assert body["swapped_winner"] == 2
    assert body["consistent"] is False
    assert body["usage"]["engine_requests"] == 2  # both orders exit early


def test_no_verdict_outcome():
    with client_for(ScriptedEngine(stage1=[judgment(None)] * 8)) as c:
        body = c.post("/v1/judge", json=GOOD).json()
    assert body["winner"] is None
    assert body["outcome"] == "no_verdict"
    assert body["scores"] == [0.5, 0.5]
    assert body["parse_failures"] == 8


@pytest.mark.parametrize(
    ("payload", "needle"),
    [
        ({"responses": ["a", "b"]}, "exactly one of `prompt`"),
        ({**GOOD, "messages": [{"role": "user", "content": "x"}]}, "exactly one of `prompt`"),
        ({"prompt": "q", "responses": ["only one"]}, "at least 2"),
        ({"prompt": "q", "responses": ["a", "b", "c"]}, "at most 2"),
        ({"prompt": "q", "responses": ["a", ""]}, "at least 1 character"),
        ({"prompt": "", "responses": ["a", "b"]}, "at least 1 character"),
        ({**GOOD, "surprise": 1}, "Extra inputs are not permitted"),
        ({**GOOD, "mode": "best"}, "'reflect', 'single', 'vote' or 'margin'"),
        ({**GOOD, "num_candidates": 0}, "greater than or equal to 1"),
        ({**GOOD, "max_tokens": 4}, "greater than or equal to 16"),
        (
            {
                "messages": [
                    {"role": "user", "content": "a"},
                    {"role": "assistant", "content": "b"},
                ],
                "responses": ["x", "y"],
            },
            "must end with a user turn",
        ),
        ({"messages": [{"role": "robot", "content": "a"}], "responses": ["x", "y"]}, "robot"),
        ({"prompt": "q", "responses": ["a", "b" * 1_000_001]}, "at most 1000000 characters"),
    ],
)
def test_bad_fields_get_422_saying_what_to_fix(client: TestClient, payload, needle):
    r = client.post("/v1/judge", json=payload)
    assert r.status_code == 422
    assert needle in r.text


def test_ablations_only_where_the_server_allows_them():
    body = {**GOOD, "ablation": "anchor_only", "seed": 3}
    with client_for(mixed_engine()) as c:
        r = c.post("/v1/judge", json=body)
        assert r.status_code == 422
        assert "REFLECTRM_ALLOW_ABLATIONS=true" in r.text
    with client_for(mixed_engine(), allow_ablations=True) as c:
        r = c.post("/v1/judge", json=body)
        assert r.status_code == 200, r.text
        # anchor_only: the most confident candidate (c0, "Response 1") decides, no reflection.
        assert r.json()["winner"] == 1
        assert r.json()["usage"]["engine_requests"] == 1
        r = c.post("/v1/judge", json={**body, "mode": "vote"})
        assert r.status_code == 422
        assert "mode `reflect` only" in r.text


def test_malformed_json_is_422(client: TestClient):
    r = client.post("/v1/judge", content=b"{not json", headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert "JSON" in r.text


def test_max_tokens_over_server_limit_is_422():
    with client_for(mixed_engine(), max_tokens_limit=512) as c:
        r = c.post("/v1/judge", json={**GOOD, "max_tokens": 1000})
    assert r.status_code == 422
    assert "REFLECTRM_MAX_TOKENS_LIMIT" in r.text


def test_too_long_is_413_naming_the_limit():
    with client_for(mixed_engine(max_model_len=300)) as c:
        r = c.post("/v1/judge", json={**GOOD, "responses": ["word " * 400, "x"]})
        assert r.status_code == 413
        assert "300 tokens" in r.json()["detail"]


def test_deadline_is_504_and_aborts_engine_requests():
    engine = mixed_engine(delay_s=30)
    with client_for(engine, request_timeout_s=0.3) as c:
        r = c.post("/v1/judge", json=GOOD)
    assert r.status_code == 504
    assert "REFLECTRM_REQUEST_TIMEOUT_S" in r.json()["detail"]
    assert engine.aborted == 1


def test_dead_engine_is_503_and_not_ready():
    engine = mixed_engine()
    with client_for(engine) as c:
        assert c.get("/ready").status_code == 200
        engine.dead = True
        r = c.post("/v1/judge", json=GOOD)
        assert r.status_code == 503
        assert "restart" in r.json()["detail"]
        ready = c.get("/ready")
        assert ready.status_code == 503
        assert "stopped" in ready.json()["detail"]
        assert c.get("/health").status_code == 200


@pytest.mark.parametrize("extra", [{}, {"check_swap": True}])
def test_engine_dying_mid_judgment_is_503_not_500(extra):
    # Stage 1 succeeds, then the engine dies while the 7 reflections are in flight.
    with client_for(mixed_engine(dies_after=1)) as c:
        r = c.post("/v1/judge", json={**GOOD, **extra})
    assert r.status_code == 503
    assert "restart" in r.json()["detail"]


def test_loading_and_failed_engine_are_503():
    @contextlib.asynccontextmanager
    async def broken(settings) -> AsyncIterator[ScriptedEngine]:
        raise RuntimeError("no such model folder")
        yield  # pragma: no cover

    app = create_app(Settings(), engine_factory=broken)
    with TestClient(app) as c:
        assert c.get("/health").status_code == 200
        r = c.get("/ready")
        assert r.status_code == 503
        assert "no such model folder" in r.json()["detail"]
        r = c.post("/v1/judge", json=GOOD)
        assert r.status_code == 503
        assert "failed to start" in r.json()["detail"]


def test_openapi_documents_examples_and_errors(client: TestClient):
    spec = client.get("/openapi.json").json()
    op = spec["paths"]["/v1/judge"]["post"]
    assert {"413", "422", "503", "504"} <= set(op["responses"])
    schema = spec["components"]["schemas"]["JudgeRequest"]
    assert schema["examples"][0]["responses"] == ["The capital of France is Paris.", "It is Lyon."]
    assert schema["additionalProperties"] is False


def test_too_many_in_flight_is_429_with_retry_after():
    engine = mixed_engine(delay_s=0.5)
    with client_for(engine, max_concurrent_judgments=1, max_queued_judgments=0) as c:
        admission = c.app.state.reflectrm.admission
        admission._in_flight = 1  # one judgment already holds the only slot; no queue
        r = c.post("/v1/judge", json=GOOD)
        assert r.status_code == 429
        assert r.headers["retry-after"] == "5"
        assert "REFLECTRM_MAX_CONCURRENT_JUDGMENTS" in r.json()["detail"]
        admission._in_flight = 0
        assert c.post("/v1/judge", json=GOOD).status_code == 200


def test_a_burst_past_the_limit_waits_in_the_queue_and_every_call_is_answered():
    engine = mixed_engine(delay_s=0.2)
    with client_for(engine, max_concurrent_judgments=2) as c:
        with ThreadPoolExecutor(max_workers=8) as pool:
            statuses = list(
                pool.map(
                    lambda i: c.post("/v1/judge", json={**GOOD, "seed": i}).status_code, range(8)
                )
            )
        admission = c.app.state.reflectrm.admission
        assert (admission.in_flight, admission.queued) == (0, 0)
        metrics = c.get("/metrics").text
    assert statuses == [200] * 8
    assert "reflectrm_queue_wait_seconds_count 8.0" in metrics


# --- max_tokens that cannot hold the output format ----------------------------------------------


class CharEngine(ScriptedEngine):
    """A scripted engine whose tokenizer makes one token of every character."""

    def render_chat(self, messages):
        prompt = super().render_chat(messages)
        return Prompt(text=prompt.text, token_ids=tuple(range(len(prompt.text))))


# "<Analysis>x</Analysis>\n<Result>Response 1 is better than Response 2</Result>": 10 + 1 + 11
# + 1 + 8 + 36 + 9 = 76 characters (a critique's verdict is as long): 76 tokens here.
FLOOR = 76


def test_a_max_tokens_that_cannot_hold_the_format_is_refused_on_every_endpoint():
    engine = CharEngine(stage1=[judgment(1)] * 8)
    short, enough = FLOOR - 1, FLOOR
    # The reward endpoints judge in margin mode unless asked (one token, no format to hold).
    sample = {"prompt": "q", "completion": "a", "group_size": 2, "cohort_timeout_s": 0.1}
    sample["mode"] = "single"
    samples = {"query": ["q a"], "prompts": ["q"], "labels": ["b"]}
    gym = {
        "messages": [
            {"role": "user", "content": "q"},
            {"role": "response_1", "content": "a"},
            {"role": "response_2", "content": "b"},
        ]
    }
    calls = [
        ("/v1/judge", lambda n: {**GOOD, "mode": "single", "max_tokens": n}),
        (
            "/v1/rewards",
            lambda n: {"prompt": "q", "completions": ["a", "b"], "mode": "single", "max_tokens": n},
        ),
        ("/v1/rewards/sample", lambda n: {**sample, "max_tokens": n}),
        (
            "/v1/chat/completions",
            lambda n: {**gym, "reflectrm": {"mode": "single", "max_tokens": n}},
        ),
    ]
    with TestClient(create_app(Settings(swap_check_fraction=0), engine=engine)) as c:
        for path, body in calls:
            r = c.post(path, json=body(short))
            assert r.status_code == 422, (path, r.text)
            assert f"max_tokens is {short}" in r.json()["detail"], path
            assert f"at least {FLOOR} tokens" in r.json()["detail"], path
            assert "REFLECTRM_ENFORCE_FORMAT" in r.json()["detail"], path
        batch = c.post("/v1/judge/batch", json={"items": [{**GOOD, "max_tokens": short}]})
        (item,) = batch.json()["results"]
        assert (item["status"], f"at least {FLOOR} tokens" in item["detail"]) == (422, True)
        for query in ("", "&group_size=2"):
            r = c.post(f"/get_reward?mode=single&max_tokens={short}{query}", json=samples)
            assert r.status_code == 422, (query, r.text)
            assert f"at least {FLOOR} tokens" in r.json()["detail"]
        # At the floor the format fits: judged.
        assert c.post("/v1/judge", json=calls[0][1](enough)).status_code == 200
        assert c.post("/v1/rewards", json=calls[1][1](enough)).status_code == 200


def test_a_default_max_tokens_below_the_format_stops_the_start_and_says_why():
    settings = Settings(max_tokens=FLOOR - 1, swap_check_fraction=0)
    app = create_app(settings, engine=CharEngine(stage1=[judgment(1)]))
    with TestClient(app) as c:
        r = c.get("/ready")
        assert r.status_code == 503
        detail = r.json()["detail"]
        assert f"REFLECTRM_MAX_TOKENS is {FLOOR - 1}, below the {FLOOR} tokens" in detail
        assert f"set REFLECTRM_MAX_TOKENS to at least {FLOOR}" in detail
        assert c.post("/v1/judge", json=GOOD).status_code == 503
    assert app.state.lifecycle.exit_code == 1  # REFLECTRM_EXIT_ON_ENGINE_FAILURE: exits
    ok = create_app(Settings(max_tokens=FLOOR), engine=CharEngine(stage1=[judgment(1)]))
    with TestClient(ok) as c:
        assert c.get("/ready").status_code == 200
