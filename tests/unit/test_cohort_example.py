"""The cohort-of-8 example's ranking figures, hand-computed."""

from __future__ import annotations

from studies.cohort_example import ROLLOUTS, outranked


def test_the_example_has_four_helpful_and_four_unhelpful_rollouts() -> None:
    assert len(ROLLOUTS) == 8
    assert sum(helpful for _, helpful in ROLLOUTS) == 4
    assert len({text for text, _ in ROLLOUTS}) == 8


def test_outranked_counts_helpful_rollouts_above_every_unhelpful_one() -> None:
    # helpful 0.9, 0.6, 0.3; unhelpful 0.5, 0.3
    rank = outranked([0.9, 0.5, 0.6, 0.3, 0.3], [True, False, True, False, True])
    assert rank["helpful"] == 3
    assert rank["helpful_above_every_unhelpful"] == 2  # 0.9 and 0.6
    # pairs: 0.9>0.5, 0.9>0.3, 0.6>0.5, 0.6>0.3, 0.3<0.5, 0.3=0.3 (half): 4.5 of 6
    assert rank["pairs_ordered_right"] == 4.5 / 6
    assert rank["every_helpful_above_every_unhelpful"] is False
    assert outranked([0.8, 0.2], [True, False])["every_helpful_above_every_unhelpful"] is True


def test_a_reply_gives_its_reward_and_cohort_figures() -> None:
    from loadtests.cohort_run import openrlhf_body, reward_fields

    assert openrlhf_body("Q: ", "A") == {"query": ["Q: A"], "prompts": ["Q: "], "labels": [None]}
    logs = {
        "judge_no_verdict": [0.0],
        "judge_cohort_arrived": [8.0],
        "judge_cohort_cut": [1.0],
        "judge_cohort_wait_s": [2.5],
        "judge_judgments_per_reward": [7.0],
        "judge_generated_tokens_per_reward": [90.0],
    }
    fields = reward_fields({"rewards": [0.75], "extra_logs": logs})
    assert fields == {
        "reward": 0.75,
        "no_verdict": 0.0,
        "arrived": 8.0,
        "cut": 1.0,
        "cohort_wait_s": 2.5,
        "judgments_per_reward": 7.0,
        "generated_tokens_per_reward": 90.0,
    }
