"""docs/modes.md's tables: the default judge in single, margin and reflect mode on the same pairs,
rendered from the saved `reflectrm eval` record (docs/records/default-judge-modes: one
invocation per mode, each with its own engine, so no mode reads another's prefix cache).
tests/unit/test_mode_table.py fails when the page no longer holds them.

    .venv/bin/python -m scripts.mode_table [--write]
"""

from __future__ import annotations

import argparse
import json
import statistics
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from scripts.generated import pct_ci, replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "default-judge-modes"
PAGE = ROOT / "docs" / "modes.md"
START, END = "<!-- mode-table: start -->", "<!-- mode-table: end -->"
MODES = ("single", "margin", "reflect")
DATASETS = {
    "heldout": "held-out split (general chat)",
    "trap": "non-answer trap",
    "correctness": "correctness set",
}


def speeds(report: Mapping[str, Any]) -> dict[str, float]:
    """Judgments per second of each mode's own invocation (judged over its wall time)."""
    out: dict[str, float] = {}
    mode = None
    for run in report["runs"]:
        if run.get("type") == "run":
            mode = run["modes"][0] if len(run["modes"]) == 1 else None
        elif run.get("type") == "run_end" and mode and run.get("seconds"):
            out[mode] = run["judged"] / run["seconds"]
    return out


def distinct_analyses(results: Path) -> dict[str, float]:
    """Mean distinct analyses per judgment, by mode, where the records count them."""
    counts: dict[str, list[int]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "result" and row.get("distinct_analyses") is not None:
            counts.setdefault(row["mode"], []).append(int(row["distinct_analyses"]))
    return {m: statistics.fmean(v) for m, v in counts.items()}


def render(record: Path = RECORD) -> str:
    report = json.loads((record / "report.json").read_text())
    modes = [m for m in MODES if m in report["modes"]]
    lines: list[str] = []
    for ds, label in DATASETS.items():
        pooled = [f"{m}+swap" for m in modes]
        if not any(ds in report["accuracy"][p]["benchmarks"] for p in pooled):
            continue
        lines += [
            f"**{label}** (`{ds}`), each pair in both orders, the two orders' scores pooled:",
            "",
            table_row(
                [
                    "mode",
                    "pairs",
                    "accuracy [95% CI]",
                    "length-balanced [95% CI]",
                    "exact ties %",
                    "one order: names Response 1 %",
                ]
            ),
            table_row(["---"] + ["---:"] * 5),
        ]
        for m in modes:
            acc = report["accuracy"][f"{m}+swap"]["benchmarks"].get(ds)
            if acc is None:
                continue
            length = report["length"][f"{m}+swap"].get(ds)
            ties = report["position"][f"{m}+swap"].get(ds, {}).get("no_verdict_rate")
            first = report["position"][m].get(ds, {}).get("first_position_rate")
            lines.append(
                table_row(
                    [
                        f"`{m}`",
                        str(acc["n"]),
                        pct_ci(acc),
                        pct_ci(length),
                        "–" if ties is None else f"{ties:.1f}",
                        "–" if first is None else f"{first:.1f}",
                    ]
                )
            )
        lines.append("")
    speed = speeds(report)
    distinct = distinct_analyses(record / "results.jsonl")
    lines += [
        "**Engine work**, per judgment (one pair in one order), over all the pairs above; "
        "judgments per second of the mode's own run (8 in flight, its own engine):",
        "",
        table_row(
            [
                "mode",
                "judgments",
                "judgments/s",
                "engine requests",
                "prompt tokens",
                "generated tokens",
                "distinct analyses",
            ]
        ),
        table_row(["---"] + ["---:"] * 6),
    ]
    for m in modes:
        cost = report["cost"][m]
        lines.append(
            table_row(
                [
                    f"`{m}`",
                    str(cost["judgments"]),
                    f"{speed[m]:.3f}" if m in speed else "–",
                    f"{cost['engine_requests']:.2f}",
                    f"{cost['prompt_tokens']:,.0f}",
                    f"{cost['generated_tokens']:,.1f}",
                    f"{distinct[m]:.2f} of 8" if m in distinct else "–",
                ]
            )
        )
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="replace the page's tables")
    p.add_argument("--record", type=Path, default=RECORD)
    args = p.parse_args()
    body = render(args.record)
    if args.write:
        replace_between(PAGE, START, END, body)
    else:
        print(body, end="")


if __name__ == "__main__":
    main()
