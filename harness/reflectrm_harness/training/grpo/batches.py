"""What each GRPO step sees: as many prompts whose right answer is in position 1 as in position 2,
and for each item whether its pair's chosen reply is the longer one (for the reward logs).

TRL's GRPOTrainer draws a step's prompts as consecutive runs of the dataset (its
``RepeatSampler``, ``prompts_per_batch`` prompts a step) in a random permutation; a random
permutation of balanced items still gives steps that are all one position (with 2 prompts a step,
half of the steps). ``position_balanced`` orders the items so that every consecutive run of
``per_step`` items holds both positions equally, and the job turns TRL's shuffling off
(``shuffle_dataset: False``) so the runs stay as ordered; the order itself is random (by seed),
and every epoch repeats it.

``length_balanced`` (the ``balance_length`` setting) goes first: whatever dropped items upstream
(build-data's prompt bound and its choice of the pairs the base got wrong, the job's own
``max_prompt_tokens``), it leaves as many items whose chosen reply is the longer as the shorter,
in each position, within each group of items, so that a length rule scores 50% on what is
trained on.
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from reflectrm_harness.training.grpo.pairs import KINDS


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


def item_group(item: Mapping[str, Any]) -> str:
    """An item's group for ``length_balanced``: its kind (preference or reflection), and for a
    counterfactual pair (``reflectrm train grpo-pairs``, whose ids end in ``/<kind>``) that kind."""
    tail = str(item.get("pair_id", "")).rsplit("/", 1)[-1]
    return f"{item.get('kind', '')}/{tail}" if tail in KINDS else str(item.get("kind", ""))


def length_balanced(
    items: Sequence[Mapping[str, Any]], seed: int = 0
) -> tuple[list[dict[str, Any]], int]:
    """The items, less those that let length predict the label, and how many were left out.

    Within each ``item_group``, the items whose ``chosen_longer`` is known fall into four cells
    (label 1 or 2, the chosen reply longer or shorter); each cell keeps as many items as the
    smallest holds, drawn at random (by ``seed``). Items whose replies are the same length
    (``chosen_longer`` None) are all kept. The order is kept."""
    rng = random.Random(seed)
    cells: dict[tuple[str, int, bool], list[int]] = {}
    for index, item in enumerate(items):
        longer = item.get("chosen_longer")
        if longer is not None:
            key = (item_group(item), int(item["label"]), bool(longer))
            cells.setdefault(key, []).append(index)
    keep = {i for i, item in enumerate(items) if item.get("chosen_longer") is None}
    for group in {g for g, _, _ in cells}:
        members = [
            cells.get((group, label, longer), []) for label in (1, 2) for longer in (True, False)
        ]
        size = min(len(m) for m in members)
        for m in members:
            keep.update(rng.sample(m, size))
    kept = [dict(item) for i, item in enumerate(items) if i in keep]
    return kept, len(items) - len(kept)


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


def length_cells(items: Sequence[Mapping[str, Any]]) -> dict[str, dict[str, int]]:
    """Per ``item_group``, how many items hold each label with the chosen reply longer,
    shorter or the same length: what the job's manifest records of what it trained on."""
    out: dict[str, dict[str, int]] = {}
    for item in items:
        longer = item.get("chosen_longer")
        stratum = "same" if longer is None else ("longer" if longer else "shorter")
        cell = out.setdefault(item_group(item), {})
        key = f"{int(item['label'])}/{stratum}"
        cell[key] = cell.get(key, 0) + 1
    return {g: dict(sorted(c.items())) for g, c in sorted(out.items())}
