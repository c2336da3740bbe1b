"""Compare two ``reflectrm eval`` results files of the same plan: are the judgments identical,
and how much engine work did each run ask for? Used to check that sharing stage-1 samples across
modes (the default) gives the same results as sampling per mode (``--no-share-samples``).

    .venv/bin/python studies/eval_compare.py runs/eval/per-mode runs/eval/shared

Each argument is an --out-dir (or its results.jsonl). Records are compared by key (dataset,
pair, mode, order) on every field but the measured latency; engine work is the sum of the
``run_end`` lines' counts (in-process runs).
"""

from __future__ import annotations

import argparse
import json
from collections import Counter
from pathlib import Path
from typing import Any

import reflectrm_harness.evaluation.records as records

IGNORED = ("latency_ms",)


def load(path: Path) -> tuple[dict[Any, dict[str, Any]], dict[str, int]]:
    if path.is_dir():
        path = path / "results.jsonl"
    loaded = records.load(path)
    rows = {}
    for r in loaded.records:
        row = r.to_json()
        for key in IGNORED:
            row.pop(key, None)
        rows[r.key] = row
    work: Counter[str] = Counter()
    for run in loaded.runs:
        if run.get("type") == "run_end":
            work.update(run.get("engine_work") or {})
            work["seconds"] += int(run.get("seconds", 0))
    return rows, dict(work)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("first", type=Path)
    parser.add_argument("second", type=Path)
    args = parser.parse_args()
    a, work_a = load(args.first)
    b, work_b = load(args.second)
    common = sorted(set(a) & set(b), key=str)
    same = [
        k for k in common if json.dumps(a[k], sort_keys=True) == json.dumps(b[k], sort_keys=True)
    ]
    differ = [k for k in common if k not in set(same)]
    by_mode = Counter(k.mode for k in differ)
    summary = {
        "records": {"first": len(a), "second": len(b), "in_both": len(common)},
        "identical": len(same),
        "different": len(differ),
        "different_by_mode": dict(by_mode),
        "same_winner": sum(a[k]["winner"] == b[k]["winner"] for k in common),
        "engine_work": {"first": work_a, "second": work_b},
        "examples": [
            {
                "key": [k.benchmark, k.pair_id, k.mode, k.chosen_position],
                "fields": {f: [a[k][f], b[k].get(f)] for f in a[k] if a[k][f] != b[k].get(f)},
            }
            for k in differ[:5]
        ],
    }
    print(json.dumps(summary, indent=2))
    return 0 if not differ and len(common) == len(a) == len(b) else 1


if __name__ == "__main__":
    raise SystemExit(main())
