"""The held-out pairs as a file ``reflectrm eval`` reads, and the figures the judge is held to
beside its evaluation: the length heuristic on the same pairs, with a paired bootstrap.

``export_heldout`` writes the split's pairs in the shared schema, ``subset`` naming the source
file, so that the evaluation report's per-subset table is the per-source one.
``compare_with_length`` reads an evaluation's ``results.jsonl`` and scores, per pair, the judge
(the mean over its two orders of "the verdict names the chosen response"; no verdict is a miss)
against "the longer response wins" (position-free: one answer per pair; equal lengths count as
half right), and bootstraps their paired difference over pairs.
"""

from __future__ import annotations

import gzip
import json
import random
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reflectrm.datasets import Pair, pair_to_row
from reflectrm.training.judge.split import SourcePairs, held_out_pairs


def source_label(name: str) -> str:
    return name.split(".", 1)[0]


def export_heldout(split: dict[str, Any], sources: Sequence[SourcePairs], out: Path) -> int:
    """Write the held-out pairs (checked against the split's hashes) to ``out``."""
    pairs = held_out_pairs(split, sources)
    out.parent.mkdir(parents=True, exist_ok=True)
    opener = gzip.open if out.suffix == ".gz" else open
    with opener(out, "wt", encoding="utf-8") as f:
        given = {source.name for source in sources}
        entries = [e for e in split["pairs"] if e["source"] in given]
        for entry, pair in zip(entries, pairs, strict=True):
            row = pair_to_row(pair)
            row["id"] = f"{source_label(entry['source'])}/{pair.id}"
            row["subset"] = source_label(entry["source"])
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return len(pairs)


def longer_is_chosen(pair: Pair) -> float:
    """The length heuristic's score on a pair: 1 if the chosen response is longer (in
    characters), 0 if shorter, 0.5 for equal lengths."""
    a, b = len(pair.chosen), len(pair.rejected)
    return 1.0 if a > b else 0.0 if a < b else 0.5


def judge_scores(results: Path, mode: str) -> dict[str, list[float]]:
    """Per pair id, the correctness (1/0) of each of the mode's judgments, one per order."""
    out: dict[str, list[float]] = defaultdict(list)
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") != "result" or row.get("mode") != mode:
            continue
        out[row["pair_id"]].append(float(row.get("winner") == row["chosen_position"]))
    return dict(out)


def result_subsets(results: Path) -> dict[str, str]:
    """Per pair id, the subset an evaluation's records give it (``meta.subset``)."""
    out: dict[str, str] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        subset = (row.get("meta") or {}).get("subset") if row.get("type") == "result" else None
        if subset:
            out[row["pair_id"]] = str(subset)
    return out


def compare_with_length(
    pairs: Sequence[Pair],
    results: Path,
    mode: str = "single",
    bootstrap: int = 2000,
    seed: int = 0,
) -> dict[str, Any]:
    """The judge against the length heuristic on the pairs it judged in both orders, with a
    paired bootstrap over pairs (95% percentile intervals)."""
    scores = judge_scores(results, mode)
    by_id = {p.id: p for p in pairs}
    ids = sorted(i for i, s in scores.items() if len(s) == 2 and i in by_id)
    judge = [sum(scores[i]) / 2 for i in ids]
    length = [longer_is_chosen(by_id[i]) for i in ids]
    # A pair's subset as the evaluation recorded it (its row's `subset`), else the pair's own.
    recorded = result_subsets(results)
    by_subset: dict[str, list[int]] = defaultdict(list)
    for k, i in enumerate(ids):
        by_subset[recorded.get(i) or by_id[i].meta.get("subset", "")].append(k)
    rng = random.Random(seed)
    n = len(ids)
    diffs, judge_boot, length_boot = [], [], []
    for _ in range(bootstrap):
        draw = [rng.randrange(n) for _ in range(n)]
        j = sum(judge[d] for d in draw) / n
        le = sum(length[d] for d in draw) / n
        judge_boot.append(j)
        length_boot.append(le)
        diffs.append(j - le)

    def interval(values: list[float]) -> list[float]:
        v = sorted(values)
        return [round(100 * v[int(0.025 * len(v))], 1), round(100 * v[int(0.975 * len(v)) - 1], 1)]

    def pct(values: Sequence[float]) -> float:
        return round(100 * sum(values) / len(values), 1) if values else float("nan")

    return {
        "mode": mode,
        "pairs": n,
        "judge_accuracy": pct(judge),
        "judge_ci": interval(judge_boot),
        "length_accuracy": pct(length),
        "length_ci": interval(length_boot),
        "difference": round(pct(judge) - pct(length), 1),
        "difference_ci": interval(diffs),
        "per_subset": {
            s: {
                "pairs": len(ks),
                "judge_accuracy": pct([judge[k] for k in ks]),
                "length_accuracy": pct([length[k] for k in ks]),
            }
            for s, ks in sorted(by_subset.items())
        },
        "bootstrap": bootstrap,
        "seed": seed,
    }


def markdown(result: dict[str, Any], title: str) -> str:
    lines = [
        f"**{title}**: {result['pairs']} pairs judged in both orders, mode `{result['mode']}`; "
        "a pair scores the mean of its two orders (no verdict is a miss); the length heuristic "
        '("the longer response wins", in characters; equal lengths half right) scores each '
        f"pair once. 95% intervals from a paired bootstrap over pairs ({result['bootstrap']} "
        "draws).",
        "",
        "| | accuracy [95% CI] |",
        "|---|---:|",
        f"| judge | {result['judge_accuracy']} [{result['judge_ci'][0]}, "
        f"{result['judge_ci'][1]}] |",
        f"| longer wins | {result['length_accuracy']} [{result['length_ci'][0]}, "
        f"{result['length_ci'][1]}] |",
        f"| judge − longer wins | {result['difference']:+} [{result['difference_ci'][0]:+}, "
        f"{result['difference_ci'][1]:+}] |",
        "",
        "| subset (pairs) | judge | longer wins |",
        "|---|---:|---:|",
    ]
    for name, s in result["per_subset"].items():
        row = f"| {name or '(none)'} ({s['pairs']}) | {s['judge_accuracy']} |"
        lines.append(f"{row} {s['length_accuracy']} |")
    return "\n".join(lines) + "\n"
