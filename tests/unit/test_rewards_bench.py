"""The reward benchmark's plan and arithmetic (loadtests/rewards_bench.py): which pairs each
contender judges, and the per-pair and per-reward figures its summary reports, hand-computed."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from loadtests.common.process import RunError
from loadtests.rewards_bench import draw_pairs, summarize


def _pairs_file(tmp_path: Path, n: int) -> Path:
    path = tmp_path / "pairs.jsonl"
    rows = [{"id": f"p{k}", "prompt": f"q{k}", "chosen": "a", "rejected": "b"} for k in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_floor_and_margin_judge_the_same_pairs_and_single_others(tmp_path: Path) -> None:
    args = SimpleNamespace(seed=0, rounds=2, pairs_per_round=3)
    plan = draw_pairs(_pairs_file(tmp_path, 12), args)
    for r in range(2):
        assert [p.id for p in plan[("floor", r)]] == [p.id for p in plan[("margin", r)]]
    margin = {p.id for r in range(2) for p in plan[("margin", r)]}
    single = {p.id for r in range(2) for p in plan[("single", r)]}
    # Every pair at most once per engine: 6 for floor and margin, 6 others for single.
    assert len(margin) == 6
    assert len(single) == 6
    assert not margin & single


def test_too_few_pairs_is_an_error_naming_the_count(tmp_path: Path) -> None:
    args = SimpleNamespace(seed=0, rounds=2, pairs_per_round=3)
    with pytest.raises(RunError, match="has 11 pairs; this run needs 12"):
        draw_pairs(_pairs_file(tmp_path, 11), args)


def _pair(contender: str, rnd: int, requests: int, prompt: int, cached: int, error=None):
    return {
        "kind": "pair",
        "contender": contender,
        "round": rnd,
        "pair_id": "x",
        "seconds": 1.0,
        "engine_requests": requests,
        "prompt_tokens": prompt,
        "cached_prompt_tokens": cached,
        "verdict_prompt_tokens": 1000,
        "winner": 1,
        "error": error,
    }


def test_the_summary_counts_pairs_per_second_and_computed_tokens() -> None:
    rows = [
        {"kind": "round", "contender": "margin", "round": 0, "seconds": 4.0},
        _pair("margin", 0, 4, 1600, 200),
        _pair("margin", 0, 4, 1400, 0),
        {"kind": "round", "contender": "margin", "round": 1, "seconds": 2.0},
        _pair("margin", 1, 4, 1500, 100),
        _pair("margin", 1, 0, 0, 0, error="HTTP 503"),
        {
            "kind": "step",
            "contender": "api",
            "strategy": "pivot",
            "step": 0,
            "seconds": 8.0,
            "completions": 16,
            "rewards": 16,
            "engine_requests": 44,
            "prompt_tokens": 9000,
            "cached_prompt_tokens": 1000,
            "error": None,
        },
    ]
    s = summarize(rows)
    m = s["pairs"]["margin"]
    # 3 answered pairs in 6 s; by round 2/4 and 1/2; the failed pair counts in no mean.
    assert (m["pairs"], m["failed"], m["seconds"]) == (4, 1, 6.0)
    assert m["pairs_per_s"] == pytest.approx(0.5)
    assert m["pairs_per_s_by_round"] == {0: 0.5, 1: 0.5}
    assert m["engine_requests"] == 4.0
    assert m["prompt_tokens"] == pytest.approx(1500.0)
    assert m["computed_prompt_tokens"] == pytest.approx((1400 + 1400 + 1400) / 3)
    step = s["steps"]["api/pivot"]
    assert step["rewards_per_s"] == 2.0
    assert step["requests_per_reward"] == pytest.approx(44 / 16)
    assert step["computed_prompt_tokens_per_reward"] == pytest.approx(8000 / 16)
