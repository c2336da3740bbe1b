"""NeMo Gym's GenRM judge protocol on the real engine (default model).

The request is the one NeMo Gym's genrm_model server posts for a genrm_compare comparison (see
tests/api/test_nemo_gym.py). With ``NEMO_GYM_SRC`` (a NeMo Gym checkout) and
``NEMO_GYM_PYTHON`` (a Python with Gym's light dependencies) set, Gym's own genrm_compare and
genrm_model code is also run against the live service (scripts/nemo_gym_check.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.e2e.conftest import LiveService

ROOT = Path(__file__).resolve().parents[2]
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
    assert (own["mode"], own["debias"]) == ("reflect", "swap")
    assert [o["first"] for o in own["orders"]] == [1, 2]  # both orders ran
    content = reply["choices"][0]["message"]["content"]
    if own["no_verdict"]:  # the weak judge may say nothing parseable in either order
        assert "{" not in content
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


@pytest.mark.skipif(
    not (os.environ.get("NEMO_GYM_SRC") and os.environ.get("NEMO_GYM_PYTHON")),
    reason="NEMO_GYM_SRC (a NeMo Gym checkout) and NEMO_GYM_PYTHON not set",
)
def test_nemo_gyms_own_genrm_code_gets_rewards(live: LiveService):
    completions = [GOOD, BAD, "Paris."]
    args = [os.environ["NEMO_GYM_PYTHON"], str(ROOT / "scripts" / "nemo_gym_check.py")]
    args += ["--gym-src", os.environ["NEMO_GYM_SRC"], "--url", live.url]
    args += ["--extra-body", json.dumps(OPTIONS), "--prompt", PROMPT]
    for c in completions:
        args += ["--completion", c]
    done = subprocess.run(args, capture_output=True, text=True, timeout=1500, check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout)
    sys.stderr.write(done.stdout)  # the rewards, for the record (pytest -s)
    assert {(r["path"], r["strategy"]) for r in out["runs"]} == {
        ("compare", "circular"),
        ("compare", "all_pairs"),
        ("verify", "circular"),
    }
    for run in out["runs"]:
        assert len(run["rewards"]) == len(completions)
        assert all(1.0 <= x <= 5.0 for x in run["rewards"])
        for reply in run["replies"]:
            assert reply.startswith(('{"score_1"', "No verdict")), reply
