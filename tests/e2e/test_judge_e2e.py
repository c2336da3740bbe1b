"""Real judgments from the real vLLM CPU engine and the default model, over real HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import httpx
import pytest

from tests.e2e.conftest import E2E_MAX_TOKENS

PAIR = {
    "prompt": "What is the capital of France?",
    "responses": ["The capital of France is Paris.", "The capital of France is Berlin."],
}


def check_common(body: dict) -> None:
    assert body["outcome"] in ("verdict", "no_verdict")
    assert body["winner"] in (1, 2, None)
    assert body["scores"][0] + body["scores"][1] == pytest.approx(1.0)
    assert all(0.0 <= s <= 1.0 for s in body["scores"])
    assert body["template_version"] == "v1"
    assert body["model"] == "SmolLM2-135M-Instruct-f32"
    assert body["latency_ms"] > 0


def test_ready(client: httpx.Client):
    r = client.get("/ready")
    assert r.status_code == 200
    assert r.json()["status"] == "ready"


def test_reflect_mode_trace(client: httpx.Client):
    r = client.post("/v1/judge", json={**PAIR, "seed": 11, "return_trace": True})
    assert r.status_code == 200, r.text
    body = r.json()
    check_common(body)
    trace = body["trace"]
    assert len(trace["candidates"]) == 8
    parsed = [c for c in trace["candidates"] if c["parsed"]]
    # With format enforcement the only way to miss a verdict is running out of tokens (rare).
    assert all(c["parse_error"] == "truncated" for c in trace["candidates"] if not c["parsed"])
    assert len(parsed) >= 6
    assert all(c["num_tokens"] <= E2E_MAX_TOKENS for c in trace["candidates"])
    assert trace["anchor"] == max(parsed, key=lambda c: (c["confidence"], -c["index"]))["index"]
    assert len(trace["reflections"]) == len(parsed) - 1
    assert {r["candidate"] for r in trace["reflections"]} == {c["index"] for c in parsed} - {
        trace["anchor"]
    }
    assert trace["winner_group"] == sorted(
        r["candidate"] for r in trace["reflections"] if r["beats_anchor"]
    )
    assert body["usage"]["engine_requests"] == 1 + len(trace["reflections"])
    assert body["usage"]["generated_tokens"] > 0
    voters = [trace["candidates"][i]["verdict"] for i in trace["voters"]]
    assert body["votes"] == [voters.count(1), voters.count(2)]
    assert body["winner"] == (1 if voters.count(1) > voters.count(2) else 2)


def test_single_and_vote_modes(client: httpx.Client):
    single = client.post("/v1/judge", json={**PAIR, "mode": "single", "return_trace": True}).json()
    check_common(single)
    assert len(single["trace"]["candidates"]) == 1
    assert single["usage"]["engine_requests"] == 1
    vote = client.post("/judge", json={**PAIR, "mode": "vote", "seed": 3, "return_trace": True})
    body = vote.json()
    check_common(body)
    assert len(body["trace"]["candidates"]) == 8
    assert body["trace"]["reflections"] == []
    assert sum(body["votes"]) == sum(c["parsed"] for c in body["trace"]["candidates"])


def test_seeded_judgments_reproduce(client: httpx.Client):
    req = {**PAIR, "mode": "vote", "seed": 99, "num_candidates": 4, "return_trace": True}
    a = client.post("/v1/judge", json=req).json()
    # Judged again as another tenant: the same call from the same tenant is answered from the
    # cache, which would prove nothing about the engine's seeded sampling.
    b = client.post("/v1/judge", json=req, headers={"X-Reflectrm-Tenant": "again"}).json()
    assert [c["analysis"] for c in a["trace"]["candidates"]] == [
        c["analysis"] for c in b["trace"]["candidates"]
    ]
    assert a["winner"] == b["winner"]


def test_multi_turn_and_check_swap(client: httpx.Client):
    req = {
        "messages": [
            {"role": "user", "content": "Give me a prime number."},
            {"role": "assistant", "content": "7"},
            {"role": "user", "content": "Another one, larger than 10."},
        ],
        "responses": ["11", "12"],
        "check_swap": True,
        "num_candidates": 4,
        "seed": 5,
    }
    body = client.post("/v1/judge", json=req).json()
    check_common(body)
    if body["winner"] is not None and body["swapped_winner"] is not None:
        assert body["consistent"] == (body["winner"] == body["swapped_winner"])


def test_too_long_conversation_is_413_with_the_real_tokenizer(client: httpx.Client):
    r = client.post("/v1/judge", json={**PAIR, "prompt": "word " * 5000})
    assert r.status_code == 413
    assert "4096 tokens" in r.json()["detail"]


def test_cli_judge_against_the_service(live):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "reflectrm.cli",
            "judge",
            "--url",
            live.url,
            "--prompt",
            "2+2?",
            "--response1",
            "4",
            "--response2",
            "5",
            "--mode",
            "single",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=True,
    )
    body = json.loads(out.stdout)
    assert body["mode"] == "single"
    assert body["winner"] in (1, 2, None)


def test_client_disconnect_aborts_the_engine_requests(live):
    unfinished = live.engine._llm.output_processor.get_num_unfinished_requests
    assert unfinished() == 0
    body = {**PAIR, "max_tokens": 1024, "seed": 1}
    with pytest.raises(httpx.ReadTimeout):
        # The client gives up after 3 s, long before a 1024-token judgment could finish.
        httpx.post(f"{live.url}/v1/judge", json=body, timeout=httpx.Timeout(3.0))
    deadline = time.monotonic() + 15
    while unfinished() > 0:
        assert time.monotonic() < deadline, "engine requests kept running after the disconnect"
        time.sleep(0.2)
