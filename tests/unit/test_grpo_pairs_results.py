"""docs/training.md's tables of the GRPO rerun are the ones scripts/grpo_pairs_results.py renders
from the saved check records, and the per-pair and paired figures are hand-checked."""

from __future__ import annotations

import pytest

from reflectrm_harness.evaluation.length import paired_length_balanced
from scripts.generated import between, page_markers
from scripts.grpo_pairs_results import PAGE, PREFIX, TABLES, correctness, render


def test_the_training_page_holds_the_tables_rendered_from_the_records() -> None:
    text = PAGE.read_text()
    tables = render()
    for key in TABLES:
        inside = between(text, *page_markers(PREFIX, key))
        assert inside.strip() == tables[key].strip(), (
            "run `python -m scripts.grpo_pairs_results --write`"
        )


def test_a_pair_scores_the_mean_of_its_two_orders_and_a_missing_verdict_is_wrong() -> None:
    record = {
        "verdicts": [
            {"id": "a", "chosen_at": 1, "verdict": 1},  # right
            {"id": "a", "chosen_at": 2, "verdict": 1},  # wrong: names Response 1
            {"id": "b", "chosen_at": 1, "verdict": 1},  # right
            {"id": "b", "chosen_at": 2, "verdict": 2},  # right
            {"id": "c", "chosen_at": 1, "verdict": None},  # no verdict: wrong
            {"id": "c", "chosen_at": 2, "verdict": 2},  # right
        ]
    }
    assert correctness(record) == {"a": 0.5, "b": 1.0, "c": 0.5}


def test_a_pair_judged_in_one_order_only_is_refused() -> None:
    with pytest.raises(ValueError, match="pair a"):
        correctness({"verdicts": [{"id": "a", "chosen_at": 1, "verdict": 1}]})


def test_the_paired_gain_is_the_difference_of_the_strata_means() -> None:
    # differences per pair: +1, 0 (chosen longer: mean +0.5); +0.5, 0 (shorter: mean +0.25);
    # the gain is (0.5 + 0.25) / 2 = 0.375; the same-length pair counts in neither stratum
    fig = paired_length_balanced(
        [0, 1, 0.5, 0, 0], [1, 1, 1, 0, 1], [True, True, False, False, None], draws=500
    )
    assert fig["pairs"] == 4
    assert fig["delta"] == pytest.approx(0.375)
    low, high = fig["ci95"]
    assert 0 <= low <= 0.375 <= high <= 0.75


def test_a_judge_against_itself_gains_nothing_and_its_interval_is_a_point() -> None:
    same = [1.0, 0.0, 0.5, 1.0]
    fig = paired_length_balanced(same, same, [True, False, True, False])
    assert fig["delta"] == 0.0
    assert fig["ci95"] == [0.0, 0.0]


def test_a_length_rule_turned_around_gains_nothing_length_balanced() -> None:
    # before: "the longer wins" (right on chosen-longer pairs only); after: "the shorter wins"
    longer = [True, True, True, False]
    before = [1.0, 1.0, 1.0, 0.0]
    after = [0.0, 0.0, 0.0, 1.0]
    assert paired_length_balanced(before, after, longer)["delta"] == 0.0


def test_without_both_strata_there_is_no_gain() -> None:
    assert "delta" not in paired_length_balanced([0.0], [1.0], [True])
    with pytest.raises(ValueError, match="one entry per pair"):
        paired_length_balanced([0.0], [1.0, 0.0], [True, False])
