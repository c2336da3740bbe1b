"""NeMo Gym 0.7.0's own ``genrm_compare`` and ``genrm_model`` servers, as real HTTP servers each
in its own process (tests/frameworks/nemo_gym.py), calling this app over HTTP as NeMo-RL's
``GENRM_BASE_URL`` makes them: a cohort's ``/verify`` calls end to end, the replies parsed by
Gym, the rewards as Gym computes them, and a failed judgment masked by Gym.

The app runs the scripted preference engine (tests/api/conftest.py) in vote mode (from
genrm_model's ``extra_body``): of 8 votes response 1 gets 4 + q(r1) - q(r2) + 2 (the first-shown
bias), so with ``debias: swap`` (the default here) a pair's share for response 1 is
0.5 + (q1 - q2) / 8, and Gym reads score_1 = 3 + (q1 - q2) / 2, score_2 = 3 - (q1 - q2) / 2.
Qualities: A 2, B 0, C 1. Gym's circular pairs for three rollouts are (0, 1), (1, 2), (2, 0):
(A, B) 4 / 2, (B, C) 2.5 / 3.5, (C, A) 2.5 / 3.5, no ties, so Gym's rewards (the mean of each
rollout's scores) are A (4 + 3.5) / 2 = 3.75, B (2 + 2.5) / 2 = 2.25, C (3.5 + 2.5) / 2 = 3.0.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from reflectrm.engines.base import GenerationResult, Prompt, SamplingSpec
from tests.api.conftest import PreferenceEngine, served
from tests.conftest import ScriptedEngine, judgment
from tests.frameworks.gym_servers import GymRun, gym_servers

A, B, C = "alpha answer", "b", "gamma"
QUALITY = {A: 2, B: 0, C: 1}
Q = "What is asked?"
CIRCULAR = [3.75, 2.25, 3.0]
# Gym's shipped genrm_compare configuration, with a cohort of three and short deadlines.
COMPARE = {
    "num_rollouts_per_prompt": 3,
    "cohort_collection_timeout_s": 60,
    "cohort_evaluation_timeout_s": 60,
    "judge_request_timeout_s": 30,
    "genrm_parse_retry_sleep_s": 0.05,
}
VOTE = {"extra_body": {"reflectrm": {"mode": "vote"}}}


class SlowPair(PreferenceEngine):
    """The preference engine, with the comparison of A and B (either order) taking ``slow_s``;
    records when each engine request ended."""

    slow_s: float = 0.0
    ended: list[tuple[str, float]]

    def __init__(self, slow_s: float, **kw: Any) -> None:
        super().__init__(**kw)
        self.slow_s = slow_s
        self.ended = []

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        both = A in prompt.text and f"]\n{B}\n[" in prompt.text
        if both:
            await asyncio.sleep(self.slow_s)
        result = await super().generate(prompt, spec, request_id)
        self.ended.append(("A-B" if both else "other", time.monotonic()))
        return result


def engine() -> PreferenceEngine:
    return PreferenceEngine(quality=dict(QUALITY), first_bias=2)


def verify_body(index: int, text: str, group: str) -> dict[str, Any]:
    """One rollout's /verify body as Gym's agent sends it: the prompt, the policy's Responses
    object, the cohort coordinates."""
    return {
        "responses_create_params": {"input": [{"role": "user", "content": Q}]},
        "response": {
            "id": f"resp-{group}-{index}",
            "created_at": 0.0,
            "model": "policy",
            "object": "response",
            "output": [
                {
                    "id": f"msg-{group}-{index}",
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": text, "annotations": []}],
                }
            ],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        },
        "_ng_group_id": group,
        "_ng_group_attempt": 0,
        "_ng_rollout_index": index,
    }


async def verify_all(
    run: GymRun, texts: list[str], group: str, hold_last_s: float = 0.0
) -> list[dict[str, Any]]:
    """Every rollout's /verify, concurrently; the last one sent ``hold_last_s`` later."""
    async with httpx.AsyncClient(base_url=run.compare_url, timeout=120) as client:

        async def one(index: int, text: str) -> dict[str, Any]:
            if index == len(texts) - 1:
                await asyncio.sleep(hold_last_s)
            r = await client.post("/verify", json=verify_body(index, text, group))
            assert r.status_code == 200, r.text
            return r.json()

        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(texts))))


def reused(url: str) -> float:
    """Judgments this app answered from an identical call (a retry of Gym's) instead of judging."""
    text = httpx.get(f"{url}/metrics", timeout=10).text
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("reflectrm_reused_answers_total{")
    )


def test_a_cohort_of_verify_calls_gets_gyms_rewards_from_this_judge(tmp_path: Path):
    eng = engine()
    with served(eng) as url, gym_servers(url, tmp_path, COMPARE, VOTE) as run:
        group = uuid.uuid4().hex
        replies = asyncio.run(verify_all(run, [A, B, C], group))
        assert [r["reward"] for r in replies] == pytest.approx(CIRCULAR)
        assert [r["_ng_rollout_index"] for r in replies] == [0, 1, 2]
        assert not any(r.get("mask_sample") for r in replies)
        # Every reply parsed at the first try: each circular pair judged once in both orders,
        # and no call of Gym's was a retry answered again.
        assert len(eng.calls) == 6
        assert reused(url) == 0
        assert "parse failed" not in run.log().lower()
        # A retry of a member of the completed cohort is answered from Gym's record.
        again = httpx.post(f"{run.compare_url}/verify", json=verify_body(0, A, group), timeout=60)
        assert again.json()["reward"] == pytest.approx(CIRCULAR[0])
        assert len(eng.calls) == 6


def test_no_comparison_before_the_cohort_is_whole_and_none_left_out(tmp_path: Path):
    """Gym 07d6b0d totalled a cohort when the last rollout's comparisons were judged, leaving
    out an earlier rollout's comparison still in flight. In 0.7.0 comparisons start only when
    every member has arrived, and the rewards wait for all of them: with the last rollout sent
    1.5 s late and the (A, B) comparison made 2 s slower than the others, nothing is judged
    before the last rollout arrives, and every reward counts every comparison."""
    eng = SlowPair(2.0, quality=dict(QUALITY), first_bias=2)
    with served(eng) as url, gym_servers(url, tmp_path, COMPARE, VOTE) as run:
        start = time.monotonic()
        replies = asyncio.run(verify_all(run, [A, B, C], uuid.uuid4().hex, hold_last_s=1.5))
        answered = time.monotonic()
    assert [r["reward"] for r in replies] == pytest.approx(CIRCULAR)
    assert len(eng.calls) == 6
    first_judged = min(t for _, t in eng.ended)
    assert first_judged - start >= 1.5  # nothing judged before the third rollout came
    slow_done = max(t for what, t in eng.ended if what == "A-B")
    fast_done = max(t for what, t in eng.ended if what == "other")
    assert slow_done - fast_done >= 1.5  # the slow comparison finished last...
    assert answered >= slow_done  # ...and the rewards waited for it


def masked(reply: dict[str, Any]) -> bool:
    """Gym 0.7's shape for a judgment that failed (nemo_gym/judge.py judge_failsafe)."""
    return (
        reply["mask_sample"] is True
        and reply["failure_kind"] == "judge_failed"
        and bool(reply["failure_reason"])
        and reply["instance_config"]["mask_sample"] is True  # older NeMo-RL readers
        and reply["_ng_failure_class"] == "judge_failed"
    )


def test_no_verdict_is_masked_by_gym_not_rewarded(tmp_path: Path):
    silent = ScriptedEngine(stage1=[judgment(None)] * 8)
    with served(silent) as url, gym_servers(url, tmp_path, COMPARE, VOTE) as run:
        replies = asyncio.run(verify_all(run, [A, B, C], uuid.uuid4().hex))
    assert all(masked(r) for r in replies), replies
    assert all("no completed answer" in r["failure_reason"] for r in replies)
    assert [r["reward"] for r in replies] == [0.0] * 3  # Gym's placeholder beside the mask


def test_the_made_up_scores_are_an_explicit_choice(tmp_path: Path):
    """no_verdict: unparseable (the earlier default) gets genrm_compare's default scores: a
    made-up reward of 3.0 for every rollout, unmasked."""
    silent = ScriptedEngine(stage1=[judgment(None)] * 8)
    opts = {"extra_body": {"reflectrm": {"mode": "vote", "no_verdict": "unparseable"}}}
    with served(silent) as url, gym_servers(url, tmp_path, COMPARE, opts) as run:
        replies = asyncio.run(verify_all(run, [A, B, C], uuid.uuid4().hex))
        assert "parse failed" in run.log().lower()
    assert [r["reward"] for r in replies] == [3.0] * 3
    assert not any(r.get("mask_sample") for r in replies)


def test_a_dead_engine_is_masked_within_gyms_bounded_retries(tmp_path: Path):
    dead = ScriptedEngine(stage1=[judgment(1)] * 8, dead=True)
    with served(dead) as url, gym_servers(url, tmp_path, COMPARE, VOTE) as run:
        start = time.monotonic()
        replies = asyncio.run(verify_all(run, [A, B, C], uuid.uuid4().hex))
        took = time.monotonic() - start
    assert all(masked(r) for r in replies), replies
    assert all("503" in r["failure_reason"] or "500" in r["failure_reason"] for r in replies)
    assert took < 30
