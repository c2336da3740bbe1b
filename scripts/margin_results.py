"""The table of docs/results.md's first section, rendered from the saved `reflectrm eval`
reports of the judges pooled over both orders (docs/records/<run>/report.json), never typed
by hand. tests/unit/test_margin_results.py fails when the page no longer holds it.

    .venv/bin/python -m scripts.margin_results [--write]

With ``--write`` the table replaces the one between the page's markers.
"""

from __future__ import annotations

import json
from pathlib import Path

from scripts.generated import pct_ci, replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records"
# (row label, record folder, dataset label, mode row)
ROWS: tuple[tuple[str, str, str, str], ...] = (
    ("default, held-out split", "default-judge-heldout", "heldout", "margin+swap"),
    ("default, non-answer trap", "default-judge-trap-correctness", "trap", "margin+swap"),
    ("default, correctness set", "default-judge-trap-correctness", "correctness", "margin+swap"),
    ("default, RewardBench Chat + Chat Hard", "default-judge-rewardbench-chat", "rb-chat",
     "margin+swap"),
    ("`qwen05b`, non-answer trap", "qwen05b-trap-correctness-margin-single", "trap",
     "margin+swap"),
    ("`qwen05b`, correctness set", "qwen05b-trap-correctness-margin-single", "correctness",
     "margin+swap"),
    ("`smollm2`, non-answer trap", "smollm2-trap-correctness-margin-single", "trap",
     "margin+swap"),
    ("`smollm2`, correctness set", "smollm2-trap-correctness-margin-single", "correctness",
     "margin+swap"),
)  # fmt: skip
START, END = "<!-- margin-results: start -->", "<!-- margin-results: end -->"


def row(label: str, folder: str, dataset: str, mode: str) -> str | None:
    path = RECORDS / folder / "report.json"
    if not path.is_file():
        return None
    report = json.loads(path.read_text())
    acc = report["accuracy"][mode]["benchmarks"].get(dataset)
    length = report["length"][mode].get(dataset)
    position = report["position"][mode].get(dataset, {})
    one = report["position"][mode.removesuffix("+swap")].get(dataset, {})
    if acc is None:
        return None
    cells = [
        label,
        str(acc["n"]),
        pct_ci(acc),
        pct_ci(length),
        f"{position.get('no_verdict_rate', 0.0):.1f}",
        f"{one.get('first_position_rate', 0.0):.1f}",
        f"[record](records/{folder}/report.md)",
    ]
    return table_row(cells)


def render() -> str:
    head = (
        "| judge, pairs | pairs | accuracy, pooled [95% CI] | length-balanced [95% CI] | "
        "no winner % | one order: names Response 1 % | record |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---|"]
    lines += [r for r in (row(*spec) for spec in ROWS) if r is not None]
    return "\n".join(lines) + "\n"


def write(page: Path = ROOT / "docs" / "results.md") -> None:
    replace_between(page, START, END, render())


if __name__ == "__main__":
    import sys

    if "--write" in sys.argv:
        write()
    else:
        print(render(), end="")
