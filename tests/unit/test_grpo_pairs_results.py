"""docs/training.md's tables of the GRPO rerun are the ones scripts/grpo_pairs_results.py renders
from the saved check records, and the per-pair and paired figures are hand-checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from reflectrm_harness.evaluation.length import paired_length_balanced
from scripts.generated import between, page_markers
from scripts.grpo_pairs_results import PAGE, PREFIX, TABLES, correctness, render, reward_table


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


def test_the_reward_table_means_the_first_and_last_steps_leaving_out_absent_strata(
    tmp_path: Path,
) -> None:
    rows = [
        {"step": 1, "rewards/verdict_reward/mean": 0.25, "reward": 0.25, "reward_by/right_1": 0.5},
        {"step": 2, "rewards/verdict_reward/mean": 0.75, "reward": 0.75},
        {"step": 3, "rewards/verdict_reward/mean": 1.0, "reward": 1.0, "reward_by/right_1": 1.0},
        {"train_runtime": 9.0},  # the end row: no reward, not a step
    ]
    metrics = tmp_path / "metrics.jsonl"
    metrics.write_text("".join(json.dumps(r) + "\n" for r in rows))
    table = reward_table(steps=2, metrics=metrics)
    # first 2 steps: reward (0.25 + 0.75) / 2 = 0.50; right_1 only in step 1: 0.50 (1)
    # last 2 steps: reward (0.75 + 1.0) / 2 = 0.875 -> 0.88; right_1 only in step 3: 1.00 (1)
    assert "| all completions (`reward`) | 0.50 (2) | 0.88 (2) |" in table
    assert "| right answer Response 1 (`reward_by/right_1`) | 0.50 (1) | 1.00 (1) |" in table
    assert "| right answer Response 2 (`reward_by/right_2`) | – | – |" in table
