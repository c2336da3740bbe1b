"""NeMo Gym's GenRM judge protocol on the real engine (default model).

The request is the one NeMo Gym's genrm_model server posts for a genrm_compare comparison (see
tests/api/test_nemo_gym.py); then Gym 0.7.0's own genrm_compare and genrm_model servers
(tests/frameworks/gym_servers.py) verify a cohort of three rollouts against the live service.
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.api.test_nemo_gym_servers import verify_all
from tests.e2e.conftest import LiveService
from tests.frameworks.gym_servers import gym_servers

KEPT = ("reward", "mask_sample", "failure_kind", "failure_reason")
PROMPT = "What is the capital of France?"
GOOD, BAD = "The capital of France is Paris.", "The capital of France is Berlin."
# Small, so that the weak CPU judge answers in seconds; the method is the one served.
OPTIONS = {"reflectrm": {"num_candidates": 4}}


@pytest.fixture(scope="module")
def client(live: LiveService) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=live.url, timeout=600) as c:
        yield c


def gym_body(response_1: str, response_2: str) -> dict:
    return {
        "messages": [
            {"role": "user", "content": PROMPT},
            {"role": "response_1", "content": response_1},
            {"role": "response_2", "content": response_2},
        ],
        "max_tokens": 16384,
        "temperature": 0.6,
        "top_p": 0.95,
        "model": "nvidia/Qwen3-Nemotron-235B-A22B-GenRM",
        **OPTIONS,
    }


def test_a_genrm_compare_comparison_on_the_real_engine(client: httpx.Client):
    r = client.post("/v1/chat/completions", json=gym_body(GOOD, BAD))
    assert r.status_code == 200, r.text
    reply = r.json()
    own = reply["reflectrm"]
    assert (own["mode"], own["debias"], own["scoring"]) == ("margin", "swap", "probability")
    assert [o["first"] for o in own["orders"]] == [1, 2]  # both orders ran
    content = reply["choices"][0]["message"]["content"]
    if own["no_verdict"]:  # the weak judge may say nothing in either order: an empty answer
        assert content == ""
        return
    verdict = json.loads(content)
    s1, s2 = own["scores"]
    assert verdict == {
        "score_1": 1 + 4 * s1,
        "score_2": 1 + 4 * s2,
        "ranking": 3.5 - 2.5 * (s1 - s2),
    }
    assert 1 <= verdict["score_1"] <= 5
    assert 1 <= verdict["ranking"] <= 6
    assert reply["usage"]["completion_tokens"] > 0


def test_nemo_gyms_own_servers_verify_a_cohort_on_the_real_engine(
    live: LiveService, tmp_path: Path
):
    completions = [GOOD, BAD, "Paris."]
    compare = {
        "num_rollouts_per_prompt": 3,
        "cohort_collection_timeout_s": 60,
        "cohort_evaluation_timeout_s": 1200,
        "judge_request_timeout_s": 1200,
    }
    with gym_servers(live.url, tmp_path, compare, {"extra_body": OPTIONS}) as run:
        replies = asyncio.run(verify_all(run, completions, uuid.uuid4().hex))
        log = run.log()
    sys.stderr.write(json.dumps([{k: r.get(k) for k in KEPT} for r in replies]) + "\n")
    assert [r["_ng_rollout_index"] for r in replies] == [0, 1, 2]
    if any(r.get("mask_sample") for r in replies):
        # The weak judge said nothing in both orders of some pair: Gym failed the cohort and
        # masked every member, as it does any failed judge call.
        assert all(r["failure_kind"] == "judge_failed" for r in replies)
        return
    assert all(1.0 <= r["reward"] <= 5.0 for r in replies)
    assert "parse failed" not in log.lower()
