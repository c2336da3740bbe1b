"""docs/training.md's table of the `qwen05b` judge beside `smollm2` is the one
scripts/qwen05b_results.py renders from the saved records under docs/records/judge-training/."""

from __future__ import annotations

from scripts.generated import between
from scripts.qwen05b_results import END, JUDGES, PAGE, START, render


def test_the_training_page_holds_the_table_rendered_from_the_records() -> None:
    inside = between(PAGE.read_text(), START, END)
    assert inside.strip() == render().strip(), "run `python -m scripts.qwen05b_results --write`"


def test_both_judges_ran_on_the_same_samples_the_labels_count() -> None:
    # The row labels take their counts from the Qwen judge's records; the other judge's must
    # agree, or one label would misstate the other column.
    smollm2, qwen = JUDGES
    for name in ("trap_", "heldout_", "rewardbench_", "rmbench_"):
        a, b = getattr(smollm2, name), getattr(qwen, name)
        assert a["pairs"] == b["pairs"], name
        assert a["better_longer"]["pairs"] == b["better_longer"]["pairs"], name
    assert smollm2.rule["accuracy"] == qwen.rule["accuracy"]
    for breakdown in ("breakdown-heldout", "breakdown-rewardbench", "breakdown-rm-bench"):
        got = {g: v["verdicts"] for g, v in smollm2.breakdown(breakdown).items()}
        assert got == {g: v["verdicts"] for g, v in qwen.breakdown(breakdown).items()}
