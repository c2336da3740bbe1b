"""docs/training.md's GRPO table is the one scripts/grpo_results.py renders from the saved check
records, and its counts are the records' own (hand-checked on a small record)."""

from __future__ import annotations

from scripts.generated import between
from scripts.grpo_results import END, PAGE, START, figures, render, wilson


def test_the_training_page_holds_the_table_rendered_from_the_records() -> None:
    inside = between(PAGE.read_text(), START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.grpo_results --write`"


def test_figures_count_each_order_each_kind_and_both_orders() -> None:
    record = {
        "pairs": 2,
        "judgments": 4,
        "parsed": 3,
        "first_position_picks": 2,
        "verdicts": [
            {"id": "s/1/non_answer", "chosen_at": 1, "verdict": 1},  # right
            {"id": "s/1/non_answer", "chosen_at": 2, "verdict": 2},  # right
            {"id": "s/2/other_prompt", "chosen_at": 1, "verdict": 1},  # right
            {"id": "s/2/other_prompt", "chosen_at": 2, "verdict": None},  # malformed: wrong
        ],
    }
    f = figures(record)
    assert (f["first"], f["second"], f["both"]) == (2, 1, 1)
    assert f["kinds"] == {"non_answer": (2, 2), "other_prompt": (1, 2)}


def test_wilson_interval() -> None:
    # 8 of 10: the 95% Wilson interval is [49.0, 94.3] (percent)
    low, high = wilson(8, 10)
    assert round(low, 1) == 49.0
    assert round(high, 1) == 94.3
