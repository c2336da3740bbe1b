"""Per-group accuracy of `reflectrm eval` results, side by side for several judges.

A verdict is right when it names the chosen response; a group is a pair's `source` in the pairs
file, else the part of its recorded `subset` before the first `/` (so `chat/alpacaeval-easy` is
`chat`). With `--split` (a held-out split file of `reflectrm train judge`, such as
`harness/reflectrm_harness/splits/judge-holdout-split.json`) it also counts, per source that split
covers, how many of the file's pairs that judge held out and how many were in its pool.

    env PYTHONPATH=service .venv/bin/python -m studies.judge_breakdown \
        --pairs runs/heldout-sample.jsonl.gz \
        --results default=docs/records/judge-training/qwen05b/smollm2-heldout-sample/results.jsonl \
        --results qwen05b=docs/records/judge-training/qwen05b/trap-heldout-sample/results.jsonl \
        --split harness/reflectrm_harness/splits/judge-holdout-split.json \
        --out docs/records/judge-training/qwen05b/breakdown-heldout
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from reflectrm_harness.evaluation.records import load


def read_pairs(path: Path) -> dict[str, dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return {row["id"]: row for row in map(json.loads, f)}


def group_of(pair: Mapping[str, Any] | None, subset: str | None) -> str:
    if pair is not None and pair.get("source"):
        return str(pair["source"])
    return (subset or "(none)").split("/", 1)[0]


def accuracy_by_group(
    verdicts: Iterable[tuple[str, bool]],
) -> dict[str, dict[str, float]]:
    """(group, right) per verdict -> per group: verdicts and the percentage right."""
    right: dict[str, list[bool]] = defaultdict(list)
    for group, ok in verdicts:
        right[group].append(ok)
    return {
        g: {"verdicts": len(v), "accuracy": round(100 * sum(v) / len(v), 1)}
        for g, v in sorted(right.items())
    }


def split_overlap(
    pairs: Mapping[str, Mapping[str, Any]], split: Mapping[str, Any]
) -> dict[str, dict[str, int]]:
    """Per source the split covers: the file's pairs that split held out, and the others."""
    held = {(e["source"].split(".", 1)[0], e["id"]) for e in split["pairs"]}
    covered = {name.split(".", 1)[0] for name in split["sources"]}
    out: dict[str, dict[str, int]] = {}
    for pid, row in pairs.items():
        source = str(row.get("source", ""))
        if source in covered:
            counts = out.setdefault(source, {"held_out": 0, "in_pool": 0})
            counts["held_out" if (source, pid) in held else "in_pool"] += 1
    return dict(sorted(out.items()))


def markdown(report: Mapping[str, Any]) -> str:
    judges = list(report["judges"])
    groups = sorted({g for j in judges for g in report["judges"][j]})
    lines = [
        f"`{report['command']}`",
        "",
        "| group | " + " | ".join(f"{j}: % right (verdicts)" for j in judges) + " |",
        "|---|" + "---:|" * len(judges),
    ]
    for g in groups:
        cells = []
        for j in judges:
            row = report["judges"][j].get(g)
            cells.append(f"{row['accuracy']} ({row['verdicts']})" if row else "–")
        lines.append(f"| {g} | " + " | ".join(cells) + " |")
    if report.get("split_overlap"):
        lines += ["", "| source | held out by the split | in its pool |", "|---|---:|---:|"]
        for source, c in report["split_overlap"].items():
            lines.append(f"| {source} | {c['held_out']} | {c['in_pool']} |")
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--pairs", type=Path, required=True, help="the pairs file evaluated")
    p.add_argument("--results", action="append", required=True, help="NAME=results.jsonl")
    p.add_argument("--split", type=Path, help="a held-out split file")
    p.add_argument("--out", type=Path, required=True, help="a folder: breakdown.json, .md")
    args = p.parse_args(argv)
    pairs = read_pairs(args.pairs)
    report: dict[str, Any] = {
        "command": "python -m studies.judge_breakdown " + " ".join(argv or sys.argv[1:]),
        "judges": {},
    }
    for spec in args.results:
        name, _, path = spec.partition("=")
        records = load(Path(path)).records
        report["judges"][name] = accuracy_by_group(
            (group_of(pairs.get(r.pair_id), r.meta.get("subset")), r.winner == r.chosen_position)
            for r in records
            if r.pair_id in pairs
        )
    if args.split:
        report["split_overlap"] = split_overlap(pairs, json.loads(args.split.read_text()))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "breakdown.json").write_text(json.dumps(report, indent=1) + "\n")
    (args.out / "breakdown.md").write_text(markdown(report))
    print(markdown(report))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
