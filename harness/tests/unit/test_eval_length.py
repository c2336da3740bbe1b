"""Length-balanced accuracy against hand-computed values."""

from __future__ import annotations

import pytest

from reflectrm_harness.evaluation.length import (
    chosen_longer,
    judge_figures,
    length_balanced,
    longer_of,
)


def test_the_strata_are_told_by_characters() -> None:
    assert chosen_longer("long answer", "short") is True
    assert chosen_longer("short", "long answer") is False
    assert chosen_longer("same", "size") is None
    assert longer_of((3, 5)) is False
    assert longer_of((5, 5)) is None
    assert longer_of(None) is None


def test_the_longer_wins_rule_scores_one_half() -> None:
    longer = [True, True, False, False]
    rule = [1.0 if x else 0.0 for x in longer]  # right exactly when the better one is longer
    out = length_balanced(rule, longer)
    assert out["accuracy"] == 0.5
    assert out["better_longer"] == {"pairs": 2, "accuracy": 1.0}
    assert out["better_shorter"] == {"pairs": 2, "accuracy": 0.0}
    assert out["length_balanced"] == 0.5
    # Every draw of a stratum scores as the stratum does: the interval is the point.
    assert out["length_balanced_ci"] == [0.5, 0.5]


def test_unequal_strata_weigh_the_same() -> None:
    longer = [True, True, True, False]
    out = length_balanced([1.0, 1.0, 1.0, 0.0], longer)  # "longer wins" again
    assert out["accuracy"] == 0.75
    assert out["length_balanced"] == 0.5


def test_right_on_all_longer_and_half_of_shorter_is_three_quarters() -> None:
    longer = [True, True, False, False]
    out = length_balanced([1.0, 1.0, 1.0, 0.0], longer, seed=3, draws=500)
    assert out["better_shorter"]["accuracy"] == 0.5
    assert out["length_balanced"] == 0.75
    low, high = out["length_balanced_ci"]
    # Only the shorter stratum varies: its mean is 0, 0.5 or 1, so the mean is 0.5 .. 1.
    assert 0.5 <= low <= 0.75 <= high <= 1.0
    assert out == length_balanced([1.0, 1.0, 1.0, 0.0], longer, seed=3, draws=500)  # seeded


def test_equal_lengths_count_in_plain_accuracy_only() -> None:
    out = length_balanced([1.0, 0.0, 0.0], [True, False, None])
    assert out["pairs"] == 3
    assert out["equal_length"] == 1
    assert out["accuracy"] == pytest.approx(1 / 3)
    assert out["length_balanced"] == 0.5


def test_one_empty_stratum_gives_no_length_balanced_accuracy() -> None:
    out = length_balanced([1.0, 0.0], [True, None])
    assert out["better_shorter"] == {"pairs": 0, "accuracy": None}
    assert "length_balanced" not in out
    assert "length_balanced_ci" not in out


def test_a_judge_over_both_orders() -> None:
    orders = [
        ((1, 1), (2, 2)),  # right in both orders: 1
        ((1, 1), (2, 1)),  # always slot 1: 0.5
        ((1, None), (2, 1)),  # no verdict, then wrong: 0
        ((2, 2), (1, 1)),  # right in both: 1
    ]
    out = judge_figures(orders, [True, True, False, False])
    assert out["better_longer"]["accuracy"] == 0.75
    assert out["better_shorter"]["accuracy"] == 0.5
    assert out["length_balanced"] == 0.625
    assert out["accuracy"] == 0.625
    assert out["both_right"] == 0.5
    assert out["slot1_share"] == 5 / 7  # 7 verdicts, 5 of them name Response 1
