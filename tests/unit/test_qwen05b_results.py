"""docs/training.md's table of the `qwen05b` judge beside `smollm2` is the one
scripts/qwen05b_results.py renders from the saved records under docs/records/judge-training/."""

from __future__ import annotations

import json

from scripts.generated import between
from scripts.qwen05b_results import (
    BACKBONES,
    END,
    JUDGES,
    PAGE,
    READOUTS,
    READOUTS_END,
    READOUTS_START,
    START,
    chosen_readout,
    render,
    render_readouts,
)


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


def test_the_training_page_holds_the_backbone_readouts_rendered_from_their_record() -> None:
    inside = between(PAGE.read_text(), READOUTS_START, READOUTS_END)
    assert inside.strip() == render_readouts().strip(), (
        "run `python -m scripts.qwen05b_results --write`"
    )


def test_the_readouts_chosen_are_the_ones_the_page_names() -> None:
    # training.md: "(middle layer, penalty 1e-3 for both: the best development figure of each.)"
    readouts = json.loads(READOUTS.read_text())
    for name, _ in BACKBONES:
        assert chosen_readout(readouts[name]) == ("mid", "0.001"), name
