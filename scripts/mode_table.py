"""docs/modes.md's tables: the default judge in single, margin and reflect mode on the same pairs,
rendered from the saved `reflectrm eval` record (docs/records/default-judge-modes: one
invocation per mode, each with its own engine, so no mode reads another's prefix cache).
tests/unit/test_mode_table.py fails when the page no longer holds them.

Reflect judged a nested sample of the pairs the other two modes judged (the eval's ``--limit``
samples nest). ``--same-pairs`` writes ``same-pairs/results.jsonl``: every mode's judgments of
the pairs each mode judged in both orders; ``reflectrm eval --score-only --out-dir`` on it
scores them, and the first tables compare the three modes there.

    .venv/bin/python -m scripts.mode_table --same-pairs
    .venv/bin/reflectrm eval --score-only --out-dir docs/records/default-judge-modes/same-pairs
    .venv/bin/python -m scripts.mode_table [--write]

Judgments per second are each mode's judgments in flight over its mean latency (Little's law;
on the two finished runs it gives their wall-clock rate to three digits, and the reflect run was
stopped before its sample's end, so it has no wall-clock rate of its own).
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
SAME_PAIRS = "same-pairs"
PAGE = ROOT / "docs" / "modes.md"
START, END = "<!-- mode-table: start -->", "<!-- mode-table: end -->"
MODES = ("single", "margin", "reflect")
DATASETS = {
    "heldout": "held-out split (general chat)",
    "trap": "non-answer trap",
    "correctness": "correctness set",
}


def speeds(report: Mapping[str, Any]) -> dict[str, float]:
    """Judgments per second of each mode's own run: its concurrency over its mean latency."""
    flight = {}
    for run in report["runs"]:
        if run.get("type") == "run" and len(run.get("modes", ())) == 1:
            flight[run["modes"][0]] = int(run["concurrency"])
    out: dict[str, float] = {}
    for mode, n in flight.items():
        latency = report["cost"].get(mode, {}).get("latency_s")
        if latency:
            out[mode] = n / latency
    return out


def pair_keys(row: Mapping[str, Any]) -> tuple[str, str]:
    return str(row["benchmark"]), str(row["pair_id"])


def same_pairs(results: Path) -> list[dict[str, Any]]:
    """The results file's ``run`` and ``run_end`` rows, and the judgments of the pairs that
    every mode in it judged in both orders."""
    rows = [json.loads(line) for line in results.read_text().splitlines() if line.strip()]
    judged = [r for r in rows if r.get("type") == "result"]
    modes = {r["mode"] for r in judged}
    orders: dict[tuple[str, str], set[tuple[str, int]]] = {}
    for r in judged:
        orders.setdefault(pair_keys(r), set()).add((r["mode"], int(r["chosen_position"])))
    everyone = {m_o for m in modes for m_o in ((m, 1), (m, 2))}
    common = {k for k, seen in orders.items() if seen >= everyone}
    return [r for r in rows if r.get("type") != "result" or pair_keys(r) in common]


def distinct_analyses(results: Path) -> dict[str, float]:
    """Mean distinct analyses per judgment, by mode, where the records count them."""
    counts: dict[str, list[int]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "result" and row.get("distinct_analyses") is not None:
            counts.setdefault(row["mode"], []).append(int(row["distinct_analyses"]))
    return {m: statistics.fmean(v) for m, v in counts.items()}


def outcome(chosen_scores: list[float]) -> str:
    """A pair's pooled outcome from its chosen response's score in each order."""
    mean = sum(chosen_scores) / len(chosen_scores)
    return "right" if mean > 0.5 else "tie" if mean == 0.5 else "wrong"


def same_as_single(results: Path) -> dict[str, tuple[int, int]]:
    """Per mode, the pairs whose pooled outcome (right, tie, wrong) is single's, and the pairs."""
    chosen: dict[tuple[str, str], dict[str, list[float]]] = {}
    for line in results.read_text().splitlines():
        row = json.loads(line)
        if row.get("type") == "result" and row.get("scores"):
            score = float(row["scores"][int(row["chosen_position"]) - 1])
            chosen.setdefault(pair_keys(row), {}).setdefault(row["mode"], []).append(score)
    out: dict[str, tuple[int, int]] = {}
    for mode in MODES:
        both = [m for m in chosen.values() if "single" in m and mode in m]
        same = sum(outcome(m["single"]) == outcome(m[mode]) for m in both)
        out[mode] = (same, len(both))
    return out


def tables(record: Path, modes: tuple[str, ...], runs: Mapping[str, Any]) -> list[str]:
    """Per dataset, each of ``modes`` pooled over both orders, then the engine work per
    judgment. Judgments per second
    are those of each mode's own run (``runs``: the whole record's report)."""
    report = json.loads((record / "report.json").read_text())
    modes = tuple(m for m in modes if m in report["modes"])
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
    speed = speeds(runs)
    distinct = distinct_analyses(record / "results.jsonl")
    lines += [
        "**Engine work**, per judgment (one pair in one order), over the pairs above; "
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
    return lines


def render(record: Path = RECORD) -> str:
    runs = json.loads((record / "report.json").read_text())
    lines: list[str] = []
    if (record / SAME_PAIRS / "report.json").is_file():
        lines += [
            "### The three modes on the same pairs",
            "",
            "The pairs every mode judged in both orders ([same-pairs](records/"
            f"{record.name}/{SAME_PAIRS}/report.md)):",
            "",
            *tables(record / SAME_PAIRS, MODES, runs),
            "",
            "Pairs whose pooled outcome (right, tie or wrong: the chosen response's mean score "
            "over the two orders above 0.5, at it, or below) is single's: "
            + ", ".join(
                f"`{m}` {same} of {n}"
                for m, (same, n) in same_as_single(record / SAME_PAIRS / "results.jsonl").items()
                if m != "single"
            )
            + ".",
            "",
            "### Single and margin on all the pairs",
            "",
        ]
    lines += tables(record, ("single", "margin"), runs)
    return "\n".join(lines) + "\n"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--write", action="store_true", help="replace the page's tables")
    p.add_argument("--record", type=Path, default=RECORD)
    p.add_argument(
        "--same-pairs",
        action="store_true",
        help=f"write {SAME_PAIRS}/results.jsonl (the pairs every mode judged) and stop",
    )
    args = p.parse_args()
    if args.same_pairs:
        out = args.record / SAME_PAIRS / "results.jsonl"
        out.parent.mkdir(exist_ok=True)
        rows = same_pairs(args.record / "results.jsonl")
        out.write_text("".join(json.dumps(r) + "\n" for r in rows))
        print(f"{sum(r.get('type') == 'result' for r in rows)} judgments written to {out}")
        return
    body = render(args.record)
    if args.write:
        replace_between(PAGE, START, END, body)
    else:
        print(body, end="")


if __name__ == "__main__":
    main()
