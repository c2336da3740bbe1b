"""One structured log line per request, request ids, and the optional API keys."""

from __future__ import annotations

import hmac
import json
import logging
from collections.abc import Iterator

import pytest
from fastapi.testclient import TestClient

from reflectrm.api import auth
from reflectrm.api.auth import ApiKeyAuth, KeyConfigError, load_keys
from reflectrm.app import create_app
from reflectrm.settings import Settings
from tests.conftest import ScriptedEngine, judgment

GOOD = {"prompt": "What is 2 + 2?", "responses": ["4", "5"]}
KEY_A = "key-a-0123456789abcdef"
KEY_B = "key-b-fedcba9876543210"


def client_for(**settings) -> TestClient:
    app = create_app(Settings(**settings), engine=ScriptedEngine(stage1=[judgment(2)] * 8))
    return TestClient(app)


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "reflectrm.access"]


# --- the access log ---------------------------------------------------------------------------


def test_one_structured_line_per_request_with_id_route_status_latency_and_tokens(caplog):
    caplog.set_level(logging.INFO)
    with client_for() as c:
        r = c.post("/v1/judge", json={**GOOD, "seed": 3}, headers={"X-Request-ID": "trainer-7.42"})
        assert r.status_code == 200
        c.get("/health")
    lines = access_lines(caplog)
    assert len(lines) == 2
    judged, health = lines
    assert judged["request_id"] == "trainer-7.42" == r.headers["x-request-id"]
    assert r.json()["request_id"] == "trainer-7.42"
    assert (judged["method"], judged["route"], judged["status"]) == ("POST", "/v1/judge", 200)
    assert judged["latency_ms"] >= 0
    # The scripted engine: 8 unanimous outputs of 10 tokens each, one engine request.
    usage = r.json()["usage"]
    assert judged["generated_tokens"] == usage["generated_tokens"] == 80
    assert judged["prompt_tokens"] == usage["prompt_tokens"] > 0
    assert judged["engine_requests"] == 1
    assert (judged["mode"], judged["outcome"], judged["winner"]) == ("reflect", "verdict", 2)
    assert health["route"] == "/health"
    assert health["status"] == 200
    # Never the body: neither the prompt nor the responses appear in any log record.
    text = "\n".join(rec.getMessage() for rec in caplog.records)
    assert "What is 2 + 2?" not in text


def test_a_reused_answer_reports_no_engine_work_in_its_reply_and_its_log_line(caplog):
    # Single mode: one engine request of one 10-token output per order judged.
    caplog.set_level(logging.INFO)
    engine = ScriptedEngine(stage1=[judgment(1)])
    pair = {"prompt": "q", "responses": ["a", "b"], "mode": "single", "seed": 3}
    group = {"prompt": "q", "completions": ["x", "y", "z"], "strategy": "round_robin"}
    group |= {"mode": "single", "debias": "none", "seed": 3}
    samples = {"query": ["q a"], "prompts": ["q"], "labels": ["b"]}
    with TestClient(create_app(Settings(swap_check_fraction=0), engine=engine)) as c:
        pairs = [c.post("/v1/judge", json=pair).json() for _ in range(2)]
        groups = [c.post("/v1/rewards", json=group).json() for _ in range(2)]
        batch = c.post("/v1/judge/batch", json={"items": [pair | {"seed": 4}] * 2}).json()
        rl = [c.post("/get_reward?mode=single&debias=none&seed=5", json=samples) for _ in "ab"]
    judged = {"generated_tokens": 10, "engine_requests": 1}
    none = {"prompt_tokens": 0, "generated_tokens": 0, "engine_requests": 0}
    assert {k: pairs[0]["usage"][k] for k in judged} == judged
    assert pairs[1]["usage"] | {"cached_prompt_tokens": 0} == none | {"cached_prompt_tokens": 0}
    assert groups[0]["usage"]["generated_tokens"] == 30  # 3 comparisons
    assert groups[1]["usage"]["generated_tokens"] == 0  # answered from the cache
    assert [x["usage"]["engine_requests"] for x in groups[1]["comparisons"]] == [0, 0, 0]
    # The second item joined the first (identical, in flight): the batch judged once.
    assert batch["usage"]["generated_tokens"] == 10
    assert [r.json()["extra_logs"]["judge_generated_tokens"] for r in rl] == [[10.0], [0.0]]
    logged = [line.get("generated_tokens", 0) for line in access_lines(caplog)]
    assert logged == [10, 0, 30, 0, 10, 10, 0]


def test_errors_are_logged_once_with_their_status_and_outcome(caplog):
    caplog.set_level(logging.INFO)
    with client_for() as c:
        assert c.post("/v1/judge", json={"prompt": "q", "responses": ["a"]}).status_code == 422
        assert c.get("/nowhere").status_code == 404
    invalid, missing = access_lines(caplog)
    assert (invalid["route"], invalid["status"]) == ("/v1/judge", 422)
    assert (missing["route"], missing["status"]) == ("/nowhere", 404)


@pytest.mark.parametrize("given", ["", "x" * 129, "two words", "a\x7fb", "é"])
def test_an_implausible_request_id_is_replaced_by_a_fresh_one(given: str):
    with client_for() as c:
        r = c.get("/health", headers={"X-Request-ID": given.encode("utf-8")})
    rid = r.headers["x-request-id"]
    assert rid != given
    assert len(rid) == 32
    assert rid.isalnum()


def test_requests_sharing_a_client_id_get_distinct_engine_request_ids():
    engine = ScriptedEngine(stage1=[judgment(1), judgment(2)] * 4, reflect=lambda c1, c2: 1)
    app = create_app(Settings(), engine=engine)
    seen: list[str] = []
    original = engine.generate

    async def spy(prompt, spec, request_id):
        seen.append(request_id)
        return await original(prompt, spec, request_id)

    engine.generate = spy  # type: ignore[method-assign]
    with TestClient(app) as c:
        for seed in range(2):  # two different calls (identical ones would share one judgment)
            r = c.post(
                "/v1/judge",
                json={**GOOD, "mode": "single", "seed": seed},
                headers={"X-Request-ID": "same"},
            )
            assert r.json()["request_id"] == "same"
    assert len(seen) == 2
    assert len(set(seen)) == 2
    assert all(rid.startswith("same-") for rid in seen)


# --- API keys ----------------------------------------------------------------------------------


@pytest.fixture
def keyed() -> Iterator[TestClient]:
    with client_for(api_keys=f"{KEY_A}, {KEY_B}") as c:
        yield c


def test_without_keys_configured_nothing_is_asked(caplog):
    with client_for() as c:
        assert c.post("/v1/judge", json=GOOD).status_code == 200


def test_a_missing_key_is_401_with_a_bearer_challenge(keyed: TestClient):
    r = keyed.post("/v1/judge", json=GOOD)
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Bearer realm="reflectrm"'
    assert "Authorization: Bearer" in r.json()["detail"]


@pytest.mark.parametrize(
    "header",
    [
        f"Bearer {KEY_A}x",
        f"Bearer {KEY_A[:-1]}",
        "Bearer ",
        f"Basic {KEY_A}",
        KEY_A,
        "Bearer wrong",
    ],
)
def test_a_wrong_key_is_401_and_the_key_is_never_echoed(keyed: TestClient, header: str):
    r = keyed.post("/judge", json=GOOD, headers={"Authorization": header})
    assert r.status_code == 401
    assert r.headers["www-authenticate"].startswith('Bearer realm="reflectrm"')
    assert KEY_A not in r.text


@pytest.mark.parametrize("key", [KEY_A, KEY_B])
def test_every_configured_key_opens_every_route(keyed: TestClient, key: str):
    headers = {"Authorization": f"Bearer {key}"}
    assert keyed.post("/v1/judge", json=GOOD, headers=headers).status_code == 200
    assert (
        keyed.post("/judge", json=GOOD, headers={"Authorization": f"bearer {key}"}).status_code
        == 200
    )


def test_probes_docs_and_metrics_stay_open(keyed: TestClient):
    for path in ("/health", "/ready", "/metrics", "/openapi.json", "/docs"):
        assert keyed.get(path).status_code == 200, path


def test_unknown_routes_are_closed_too(keyed: TestClient):
    assert keyed.get("/v1/anything").status_code == 401


def test_metrics_can_require_a_key():
    with client_for(api_keys=KEY_A, metrics_require_key=True) as c:
        assert c.get("/metrics").status_code == 401
        assert c.get("/metrics", headers={"Authorization": f"Bearer {KEY_A}"}).status_code == 200
        assert c.get("/ready").status_code == 200


def test_keys_from_a_file(tmp_path):
    path = tmp_path / "keys"
    path.write_text(f"# the trainer\n{KEY_A}\n\n  {KEY_B}  \n")
    assert load_keys(Settings(api_key_file=path)) == [KEY_A, KEY_B]
    assert load_keys(Settings(api_keys="k" * 16, api_key_file=path)) == ["k" * 16, KEY_A, KEY_B]
    with client_for(api_key_file=path) as c:
        assert c.post("/v1/judge", json=GOOD).status_code == 401
        assert (
            c.post("/v1/judge", json=GOOD, headers={"Authorization": f"Bearer {KEY_B}"}).status_code
            == 200
        )


@pytest.mark.parametrize(
    ("settings", "needle"),
    [
        ({"api_keys": "short"}, "shorter than 16"),
        ({"api_key_file": "/nonexistent/keys"}, "cannot be read"),
        ({"api_key_file": "EMPTY"}, "holds no key"),
    ],
)
def test_unusable_keys_stop_the_start_rather_than_run_open(tmp_path, settings, needle):
    if settings.get("api_key_file") == "EMPTY":
        empty = tmp_path / "keys"
        empty.write_text("# nothing yet\n")
        settings = {"api_key_file": empty}
    with pytest.raises(KeyConfigError, match=needle):
        create_app(Settings(**settings), engine=ScriptedEngine())


def test_keys_are_secret_in_settings_and_never_logged(caplog):
    caplog.set_level(logging.DEBUG)
    settings = Settings(api_keys=KEY_A)
    assert KEY_A not in repr(settings)
    assert KEY_A not in str(settings.model_dump())
    with client_for(api_keys=KEY_A) as c:
        c.post("/v1/judge", json=GOOD, headers={"Authorization": f"Bearer {KEY_A}"})
        c.post("/v1/judge", json=GOOD, headers={"Authorization": f"Bearer {KEY_B}"})
    assert len(access_lines(caplog)) == 2
    assert all(KEY_A not in r.getMessage() and KEY_B not in r.getMessage() for r in caplog.records)


def test_every_key_is_compared_in_constant_time_without_early_exit(monkeypatch):
    calls: list[tuple[bytes, bytes]] = []
    real = hmac.compare_digest

    def counting(a, b):
        calls.append((a, b))
        return real(a, b)

    monkeypatch.setattr(auth.hmac, "compare_digest", counting)
    guard = ApiKeyAuth(app=None, keys=[KEY_A, KEY_B, "key-c-0000000000000000"])  # type: ignore[arg-type]
    assert guard.allowed(KEY_A.encode()) is True  # matches the first key...
    assert len(calls) == 3  # ...and is still compared with all three
    assert all(len(a) == len(b) == 32 for a, b in calls)  # digests: the length says nothing
    calls.clear()
    assert guard.allowed(b"nope") is False
    assert len(calls) == 3


async def test_the_in_process_judge_command_judges_and_needs_no_key(monkeypatch):
    # `reflectrm judge` without --url serves nobody: the service's keys in the env do not apply.
    # (It also answered 503 before: the app's lifespan, which hands it the engine, never ran.)
    import contextlib

    from reflectrm import cli

    @contextlib.asynccontextmanager
    async def scripted(config):
        yield ScriptedEngine(stage1=[judgment(2)] * 8)

    monkeypatch.setattr("reflectrm.engines.open_engine", scripted)
    settings = Settings(api_keys=KEY_A)
    status, body = await cli._judge_in_process({**GOOD, "mode": "single"}, settings)
    assert status == 200
    assert body["winner"] == 2
