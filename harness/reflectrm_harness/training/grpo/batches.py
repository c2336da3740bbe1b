"""What each GRPO step sees: as many prompts whose right answer is in position 1 as in position 2,
and for each item whether its pair's chosen reply is the longer one (for the reward logs).

TRL's GRPOTrainer draws a step's prompts as consecutive runs of the dataset (its
``RepeatSampler``, ``prompts_per_batch`` prompts a step) in a random permutation; a random
permutation of balanced items still gives steps that are all one position (with 2 prompts a step,
half of the steps). ``position_balanced`` orders the items so that every consecutive run of
``per_step`` items holds both positions equally, and the job turns TRL's shuffling off
(``shuffle_dataset: False``) so the runs stay as ordered; the order itself is random (by seed),
and every epoch repeats it.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any


def position_balanced(
    items: Sequence[Mapping[str, Any]], per_step: int, seed: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """The items in an order whose every consecutive run of ``per_step`` (from the first) holds
    as many label-1 as label-2 items (for an odd ``per_step``, one more of each label in turn),
    and how many of the more frequent label's items were left out to make the two equal.

    Items of each label keep no order of their own: each label's items are shuffled (by
    ``seed``), the two are interleaved, and each run is shuffled within itself.
    """
    if per_step < 1:
        raise ValueError(f"per_step must be at least 1, not {per_step}")
    rng = random.Random(seed)
    by_label: dict[int, list[dict[str, Any]]] = {1: [], 2: []}
    for item in items:
        label = int(item["label"])
        if label not in by_label:
            raise ValueError(f"item {item.get('id')!r}: label must be 1 or 2, not {label}")
        by_label[label].append(dict(item))
    for group in by_label.values():
        rng.shuffle(group)
    keep = min(len(by_label[1]), len(by_label[2]))
    left_out = len(items) - 2 * keep
    interleaved = [item for pair in zip(by_label[1], by_label[2], strict=False) for item in pair]
    interleaved = interleaved[: 2 * keep]
    ordered: list[dict[str, Any]] = []
    for start in range(0, len(interleaved), per_step):
        run = interleaved[start : start + per_step]
        rng.shuffle(run)
        ordered.extend(run)
    return ordered, left_out


def chosen_longer_by_pair(judgments: Path) -> dict[str, bool | None]:
    """From build-data's judgments.jsonl: per pair, whether the chosen (human-preferred) reply is
    longer than the other in characters (None for equal lengths)."""
    out: dict[str, bool | None] = {}
    if not judgments.is_file():
        return out
    with judgments.open(encoding="utf-8") as f:
        for line in f:
            if not line.strip():
                continue
            row = json.loads(line)
            first, second = (len(r) for r in row["responses"])
            chosen, other = (first, second) if int(row["label"]) == 1 else (second, first)
            out[str(row["pair_id"])] = None if chosen == other else chosen > other
    return out


def with_chosen_longer(
    items: Sequence[Mapping[str, Any]], by_pair: Mapping[str, bool | None]
) -> list[dict[str, Any]]:
    """Each item with ``chosen_longer`` (its own if it has one, else its pair's, else None)."""
    return [
        {**item, "chosen_longer": item.get("chosen_longer", by_pair.get(str(item.get("pair_id"))))}
        for item in items
    ]
