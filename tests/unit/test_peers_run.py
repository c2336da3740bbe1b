"""loadtests/peers_run.py's pure parts: how the rounds' cohorts are planned, the summary of the
two arms, the checks and the markdown, on hand-made calls (no engine, no service)."""

from __future__ import annotations

from typing import Any

import pytest

from loadtests import peers_run
from loadtests.peers_run import PROMPTS, check, good, markdown, plan_cohorts, summarize


def call(cohort: int, rnd: int, arm: str, seconds: float, **kw: Any) -> dict[str, Any]:
    return {
        "cohort": cohort,
        "round": rnd,
        "arm": arm,
        "status": 200,
        "seconds": seconds,
        "split": 0.0,
        "cut": 0.0,
        **kw,
    }


# Round 0: local first (1.0, 1.2), then forwarded (1.1, 1.5); round 1: forwarded first
# (2.0, 2.2, 2.4), then local (2.3, 2.5, 2.1).
CALLS = [
    call(0, 0, "local", 1.0),
    call(0, 0, "local", 1.2),
    call(1, 0, "forwarded", 1.1),
    call(1, 0, "forwarded", 1.5),
    call(2, 1, "forwarded", 2.0),
    call(2, 1, "forwarded", 2.2),
    call(2, 1, "forwarded", 2.4),
    call(3, 1, "local", 2.3),
    call(3, 1, "local", 2.5),
    call(3, 1, "local", 2.1),
]


def cohort(index: int, rnd: int, arm: str, group_size: int, **kw: Any) -> dict[str, Any]:
    forwarded = arm == "forwarded"
    return {
        "index": index,
        "round": rnd,
        "arm": arm,
        "group_size": group_size,
        "debias": "none" if rnd == 0 else "swap",
        "engine_requests": {"owner": 1.0 if rnd == 0 else 6.0, "non_owner": 0.0},
        "forwards": {"ok": float(group_size) if forwarded else 0.0, "error": 0.0}
        | {"fallback_local": 0.0},
        **kw,
    }


COHORTS = [
    cohort(0, 0, "local", 2),
    cohort(1, 0, "forwarded", 2),
    cohort(2, 1, "forwarded", 3),
    cohort(3, 1, "local", 3),
]


def test_the_plan_alternates_the_first_arm_and_gives_every_cohort_its_own_prompt_and_seed():
    plan = plan_cohorts(3, (2, 3, 4), ("none", "swap"), seed=7)
    assert [(c.round, c.arm) for c in plan] == [
        (0, "local"),
        (0, "forwarded"),
        (1, "forwarded"),
        (1, "local"),
        (2, "local"),
        (2, "forwarded"),
    ]
    assert [(c.group_size, c.debias) for c in plan] == [(2, "none")] * 2 + [(3, "swap")] * 2 + [
        (4, "none")
    ] * 2
    assert [c.seed for c in plan] == [7, 8, 9, 10, 11, 12]
    assert [c.question for c in plan] == [q for q, _ in PROMPTS[:6]]
    assert [len(c.rollouts) for c in plan] == [2, 2, 3, 3, 4, 4]
    assert plan[2].rollouts == PROMPTS[2][1][:3]


def test_six_rounds_cover_every_group_size_with_both_debias_settings():
    plan = plan_cohorts(6)
    shapes = {(c.group_size, c.debias) for c in plan}
    assert shapes == {(g, d) for g in (2, 3, 4) for d in ("none", "swap")}
    assert len({c.question for c in plan}) == 12


def test_more_rounds_than_prompts_is_refused():
    with pytest.raises(ValueError, match="rounds must be 1 to 8"):
        plan_cohorts(len(PROMPTS) // 2 + 1)
    with pytest.raises(ValueError, match="rounds must be 1 to 8"):
        plan_cohorts(0)


def test_the_summary_per_arm_and_per_round():
    s = summarize(CALLS)
    # local: 1.0 1.2 2.1 2.3 2.5; forwarded: 1.1 1.5 2.0 2.2 2.4
    assert s["arms"]["local"]["p50_s"] == 2.1
    assert s["arms"]["local"]["max_s"] == 2.5
    assert s["arms"]["forwarded"]["p50_s"] == 2.0
    assert s["arms"]["forwarded"]["max_s"] == 2.4
    assert s["median_difference_s"] == -0.1
    assert s["median_ratio"] == 0.952  # 2.0 / 2.1
    # Round 0: 1.3 - 1.1 = 0.2; round 1: 2.2 - 2.3 = -0.1.
    assert s["rounds"][0] == {"local": 1.1, "forwarded": 1.3, "difference_s": 0.2}
    assert s["rounds"][1] == {"local": 2.3, "forwarded": 2.2, "difference_s": -0.1}
    assert s["round_differences_s"] == {"min": -0.1, "median": 0.05, "max": 0.2}
    assert s["within_noise"] is True


def test_the_difference_is_not_noise_when_every_round_has_the_forwarded_arm_slower():
    calls = [c | {"seconds": c["seconds"] + 1.0} if c["arm"] == "forwarded" else c for c in CALLS]
    s = summarize(calls)
    assert s["rounds"][1]["difference_s"] == 0.9  # 3.2 - 2.3
    assert s["within_noise"] is False


def test_a_call_that_failed_is_left_out_of_the_latencies():
    calls = [*CALLS, call(1, 0, "forwarded", 99.0, status=503)]
    assert summarize(calls)["arms"]["forwarded"]["max_s"] == 2.4
    assert check(calls, COHORTS)["not_200"] == 1
    assert not good(check(calls, COHORTS))


def test_the_checks_on_a_clean_run():
    c = check(CALLS, COHORTS)
    assert c["all_200"] is True
    assert c["forwarded_calls"] == 5
    assert c["forwarded_marked_split"] == 0
    assert c["forwards_ok"] == c["forwards_ok_expected"] == 5
    assert c["owner_engine_requests"] == 14.0  # 1 + 1 + 6 + 6
    assert c["non_owner_engine_requests"] == 0.0
    assert good(c)


def test_a_forwarded_member_judged_locally_fails_the_run():
    calls = [*CALLS[:2], call(1, 0, "forwarded", 1.1, split=1.0), *CALLS[3:]]
    cohorts = [COHORTS[0], cohort(1, 0, "forwarded", 2) | {"forwards": {"ok": 1.0, "error": 0.0,
               "fallback_local": 1.0}}, *COHORTS[2:]]  # fmt: skip
    c = check(calls, cohorts)
    assert c["forwarded_marked_split"] == 1
    assert c["forwards_fallback_local"] == 1.0
    assert c["forwards_ok"] == 4.0
    assert not good(c)


def test_a_non_owner_engine_at_work_fails_the_run():
    cohorts = [*COHORTS[:3], COHORTS[3] | {"engine_requests": {"owner": 6.0, "non_owner": 2.0}}]
    c = check(CALLS, cohorts)
    assert c["non_owner_engine_requests"] == 2.0
    assert not good(c)


def test_the_markdown_carries_the_figures():
    replicas = {
        "http://127.0.0.1:1": {
            "name": "replica-0",
            "engine_requests": 7.0,
            "engine_requests_owning_local": 1.0,
            "engine_requests_owning_forwarded": 6.0,
            "engine_requests_not_owning_local": 0.0,
            "engine_requests_not_owning_forwarded": 0.0,
            "ok": 2.0,
            "fallback_local": 0.0,
            "error": 0.0,
        }
    }
    report = {
        "command": "python -m loadtests.peers_run --out x",
        "machine": {"cpus": 2, "load_average_at_start": [1.234, 1.0, 0.5]},
        "params": {"group_sizes": [2, 3], "debias": ["none", "swap"], "mode": "single"}
        | {"max_tokens": 16},
        "cohorts": COHORTS,
        "statuses": {"200": 10},
        "replicas": replicas,
        "summary": summarize(CALLS),
        "checks": check(CALLS, COHORTS),
        "wall_s": 12.3,
    }
    text = markdown(report)
    assert "`python -m loadtests.peers_run --out x`" in text
    assert "| call time, median | 2.1 s | 2.0 s |" in text
    assert "| call time, max | 2.5 s | 2.4 s |" in text
    assert "forwarded - local = -0.1 s, forwarded / local = 0.952" in text
    assert "; within noise" in text
    assert "| forwards ok (expected) | 5.0 (5) |" in text
    assert "| replica-0 | 7.0 | 1.0 / 6.0 | 0.0 | 2.0 / 0.0 / 0.0 |" in text
    assert "| 1 | 3 | swap | 2.3 s | 2.2 s | -0.1 s |" in text
    assert "load average at start [1.23, 1.0, 0.5]" in text


def test_the_command_is_the_documented_one():
    assert "-m loadtests.peers_run --out docs/records/peer-forward-cost" in (
        peers_run.__doc__ or ""
    )
