"""Real judgments from the real vLLM CPU engine and the default model, over real HTTP."""

from __future__ import annotations

import asyncio
import contextlib
import json
import subprocess
import sys
import time

import httpx
import pytest

from loadtests.common.family import SMALL
from loadtests.common.metrics import parse_metrics
from loadtests.common.process import launch_service, stop_process, wait_ready
from tests.e2e.conftest import E2E_MAX_TOKENS, default_model_name, separate_service

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
    assert body["model"] == default_model_name()
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


def test_the_default_judge_starts_without_a_warning_per_weight(tmp_path):
    """Served in bfloat16, the default judge is built in bfloat16: vLLM loads every weight as
    stored (a float32 build logged 126 "Attempted to load weight ..." warnings per start)."""
    # vLLM's own level set here: importing trl (another test module does) sets ERROR for every
    # vLLM started after it, which would hide the warnings counted here.
    settings = {**SMALL, "REFLECTRM_DTYPE": "bfloat16", "VLLM_LOGGING_LEVEL": "INFO"}
    served = launch_service(tmp_path / "serve.log", settings)
    try:
        wait_ready(served.url, 900, served)
        r = httpx.post(f"{served.url}/v1/judge", json={**PAIR, "mode": "single"}, timeout=300)
        assert r.status_code == 200, r.text
        assert r.json()["model"].endswith("-bf16")
    finally:
        stop_process(served.proc)
    log = served.log.read_text(errors="replace")  # vLLM logs to stdout, the service to stderr
    assert "Loading weights took" in log  # vLLM's own lines are in this log
    assert log.count("Attempted to load weight") == 0
    assert "Downcasting" not in log  # nor is the checkpoint cast to the served dtype


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


def engine_counters(url: str) -> dict[str, float]:
    """Disconnected judgment requests, background swap checks waiting or running, and the
    engine's token counters so far, from /metrics."""
    text = httpx.get(f"{url}/metrics", timeout=30).text
    wanted = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "reflectrm_swap_checks_pending",
        "reflectrm_swap_checks_running",
    )
    out = dict.fromkeys((*wanted, "disconnected"), 0.0)
    for (name, labels), value in parse_metrics(text, by="labels").items():
        if name in wanted:
            out[name] += value
        elif name == "reflectrm_judgments_total" and dict(labels)["outcome"] == "disconnected":
            out["disconnected"] += value
    return out


def wait_until(condition, what: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"never happened: {what}"
        time.sleep(0.2)


def test_client_disconnect_aborts_the_engine_requests():
    # The untrained base model: its analyses run to their bound, so the judgment is far from
    # done when the client leaves; the default judge ends every output at 33 tokens.
    with separate_service(model="base") as live:
        unfinished = live.engine._llm.output_processor.get_num_unfinished_requests

        def background() -> float:
            now = engine_counters(live.url)
            return now["reflectrm_swap_checks_pending"] + now["reflectrm_swap_checks_running"]

        # Nothing else on the engine (its start-up's background swap checks, if any, done), so
        # the engine work counted below is this judgment's.
        wait_until(lambda: unfinished() == 0 and background() == 0, "an idle engine", 300)
        before = engine_counters(live.url)
        # 8 samples of up to 1024 tokens: far from done when the client leaves.
        body = {**PAIR, "max_tokens": 1024, "seed": 1}

        async def leave_once_the_engine_generates() -> dict[str, float]:
            async with httpx.AsyncClient(base_url=live.url, timeout=600) as client:
                call = asyncio.create_task(client.post("/v1/judge", json=body))
                deadline = time.monotonic() + 300
                while True:
                    # The client leaves only once the engine holds its requests and has generated
                    # tokens: a request refused or stuck before the engine fails here.
                    await asyncio.sleep(0.2)
                    if call.done():
                        answer = call.result()
                        raise AssertionError(f"answered before it was left: {answer.status_code}")
                    assert time.monotonic() < deadline, "the engine never started on the judgment"
                    if unfinished() == 0:
                        continue
                    started = engine_counters(live.url)
                    if (
                        started["vllm:generation_tokens_total"]
                        > before["vllm:generation_tokens_total"]
                    ):
                        break
                call.cancel()  # closes the connection: the client is gone
                with contextlib.suppress(asyncio.CancelledError):
                    await call
            return started

        started = asyncio.run(leave_once_the_engine_generates())
        assert started["vllm:prompt_tokens_total"] > before["vllm:prompt_tokens_total"]
        deadline = time.monotonic() + 15
        while unfinished() > 0:
            assert time.monotonic() < deadline, "engine requests kept running after the disconnect"
            time.sleep(0.2)
        stopped = engine_counters(live.url)
        time.sleep(1.0)
        after = engine_counters(live.url)
        # Aborted, not finished: no more tokens, far fewer than 8 x 1024, and the judgment counted as
        # disconnected.
        assert after["vllm:generation_tokens_total"] == stopped["vllm:generation_tokens_total"]
        generated = after["vllm:generation_tokens_total"] - before["vllm:generation_tokens_total"]
        assert 0 < generated < 8 * 1024, generated
        assert after["disconnected"] - before["disconnected"] == 1, (before, after)
