"""The policy example's task and measures (examples/policy_grpo.py), by hand: the splits share
no question, the grade reads the numbers a completion states besides the question's own, and the
paired interval and the judge's agreement are the textbook ones."""

from __future__ import annotations

import math

import pytest

from examples.policy_grpo import (
    NON_ANSWER,
    auc,
    exact_match_reward,
    grade,
    make_questions,
    non_answer_reward,
    paired_interval,
)


def test_the_splits_are_disjoint_by_question_and_seeded():
    splits = make_questions(0)
    ids = [q.id for split in splits.values() for q in split]
    assert len(ids) == len(set(ids)) == 500
    assert [len(s) for s in splits.values()] == [350, 50, 100]
    assert make_questions(0)["heldout"] == splits["heldout"]
    for q in splits["train"]:
        assert str(q.answer) in q.reference


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("37 + 48 = 85.", "right"),
        ("The answer is 85", "right"),
        ("To add 37 and 48, you add them: 85, or 1,000 - 915 = 85", "wrong"),  # 1000, 915 too
        ("37 + 48 = 75.", "wrong"),
        ("85 or 86", "wrong"),
        ("To add 37 and 48, add the tens first.", NON_ANSWER),  # the question's own numbers only
        ("I don't know.", NON_ANSWER),
    ],
)
def test_grade(completion: str, expected: str):
    assert grade(completion, 85, (37, 48)) == expected


def test_the_logged_measures_are_the_grade():
    texts = ["37 + 48 = 85.", "I can't say.", [{"role": "assistant", "content": "75"}]]
    answers, operands = [85, 85, 85], [[37, 48]] * 3
    assert exact_match_reward(texts, answers, operands) == [1.0, 0.0, 0.0]
    assert non_answer_reward(texts, answers, operands) == [0.0, 1.0, 0.0]


def test_paired_interval_by_hand():
    # Differences 1, 0, 0, 1: mean 0.5, sample sd sqrt(1/3), half width 1.96 * sd / 2.
    out = paired_interval([0, 1, 0, 0], [1, 1, 0, 1])
    half = 1.96 * math.sqrt(1 / 3) / 2
    assert out["difference"] == pytest.approx(0.5)
    assert (out["low"], out["high"]) == pytest.approx((0.5 - half, 0.5 + half))


def test_auc_counts_pairs_and_halves_ties():
    # Right rewards 0.6, 0.5; wrong 0.5, 0.4: pairs (0.6>0.5) (0.6>0.4) (0.5=0.5: half) (0.5>0.4)
    assert auc([0.6, 0.5, 0.5, 0.4], [True, True, False, False]) == pytest.approx(3.5 / 4)
    assert auc([0.6], [True]) is None
