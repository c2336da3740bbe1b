"""docs/results.md's tables below its first section, each rendered from a saved run record
(docs/records/<run>/): the runs' own reports (``report.md``, which ``reflectrm eval
--score-only`` rewrites byte for byte from the saved judgments), their ``report.json``,
``vs-length.json``, ``group-report.json`` and ``compare.json``. Each table sits between the
page's markers ``<!-- results-<name>: start -->`` and ``<!-- results-<name>: end -->``;
tests/unit/test_results_tables.py fails when one no longer matches its record.

    .venv/bin/python -m scripts.results_tables [--write]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.generated import (
    page_markers,
    pct_ci,
    report_rows,
    report_table,
    table_row,
    write_tables,
)

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records"
PAGE = ROOT / "docs" / "results.md"
TWELVE = RECORDS / "eval-base-all-modes-12-pairs" / "report.md"
SEVENTY_SIX = RECORDS / "eval-base-three-modes-76-pairs" / "report.md"
PANDALM = RECORDS / "eval-base-pandalm-50-pairs" / "report.json"
SHARED = RECORDS / "eval-shared-stage1-vs-per-mode" / "compare.json"
GROUPS = RECORDS / "group-designs-rmbench" / "rmbench-single" / "group-report.json"
# (row label, record folder under judge-training/) of the `smollm2` judge's held-out table
SMOLLM2_ROWS = (
    ("the `smollm2` judge", "verdict/heldout"),
    ("the run alone (format, no preference; {pairs} pairs)", "heldout-bf16"),
    ("the base model, untrained ({pairs} pairs)", "probe/heldout-base"),
)


def markers(name: str) -> tuple[str, str]:
    return page_markers("results", name)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _signed(value: float, low: float, high: float) -> str:
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


def smollm2_heldout() -> str:
    """The judge, the run it builds on and the untrained base on held-out pairs, both orders:
    accuracy and "longer wins" from the record's ``vs-length.json``, the rest from ``report.json``
    (single mode)."""
    lines = [
        table_row(
            [
                "",
                "accuracy, mean of both orders [95% CI]",
                '"longer wins"',
                "judge − longer wins",
                "says Response 1",
                "right in both orders",
                "parsed",
                "gen. tokens",
            ]
        ),
        table_row(["---"] + ["---:"] * 7),
    ]
    for label, folder in SMOLLM2_ROWS:
        record = RECORDS / "judge-training" / folder
        vs = _load(record / "vs-length.json")
        report = _load(record / "report.json")
        cost = report["cost"]["single"]
        both = report["consistency"]["single"]["benchmarks"]["heldout"]["value"]
        parsed = 100.0 - cost["parse_failure_rate"]
        judged = parsed > 0
        accuracy = pct_ci({"value": vs["judge_accuracy"], "ci95": vs["judge_ci"]})
        first = cost["first_position_rate"]
        lines.append(
            table_row(
                [
                    label.format(pairs=vs["pairs"]),
                    (f"**{accuracy}**" if folder == "verdict/heldout" else accuracy)
                    if judged
                    else "no output parsed",
                    f"{vs['length_accuracy']:.1f}",
                    _signed(vs["difference"], *vs["difference_ci"]) if judged else "",
                    "–" if first is None else f"{first:.1f}%",
                    f"{both:.1f}%" if both else "0%",
                    f"{parsed:.0f}%",
                    f"{cost['generated_tokens']:.1f}",
                ]
            )
        )
    return "\n".join(lines) + "\n"


def twelve_accuracy() -> str:
    return report_table(TWELVE, "**Accuracy (layout of the paper's Table 1)")


def twelve_consistency() -> str:
    return report_table(TWELVE, "**Positional consistency")


def twelve_ablations() -> str:
    return report_table(TWELVE, "**Ablations")


def twelve_cost() -> str:
    columns = [
        "Mode",
        "gen. tokens",
        "prompt tokens",
        "engine requests",
        "latency s",
        "early exit %",
        "parse failures %",
        "no verdict %",
        "says Response 1 %",
    ]
    return report_table(TWELVE, "**Cost per judgment**", columns)


def seventy_six() -> str:
    """The 76-pair run's accuracy table, with each mode's consistency average and its share of
    verdicts naming Response 1 beside it (the report's consistency and cost tables)."""
    accuracy = report_rows(SEVENTY_SIX, "**Accuracy (layout")
    consistency = report_rows(SEVENTY_SIX, "**Positional consistency")
    cost = report_rows(SEVENTY_SIX, "**Cost per judgment**")
    avg = {r[0]: r[consistency[0].index("Avg")] for r in consistency[2:]}
    first = {r[0]: r[cost[0].index("says Response 1 %")] for r in cost[2:]}
    lines = [
        table_row(accuracy[0] + ["consistency avg", "says Response 1"]),
        table_row(accuracy[1] + ["---:", "---:"]),
    ]
    lines += [table_row([*r, avg[r[0]], f"{first[r[0]]}%"]) for r in accuracy[2:]]
    return "\n".join(lines) + "\n"


def pandalm() -> str:
    """Plain and swap-debiased rows of the 50 PandaLM pairs; the last column is accuracy over
    the pairs that got a verdict (accuracy / the decided share)."""
    report = _load(PANDALM)
    lines = [
        table_row(
            [
                "Mode",
                "accuracy [95% CI]",
                "consistency",
                "same winner in both orders",
                "says Response 1",
                "no verdict",
                "accuracy over decided pairs",
            ]
        ),
        table_row(["---"] + ["---:"] * 6),
    ]
    for key, label in report["modes"].items():
        if key.endswith("+swap"):
            continue
        swap = f"{key}+swap"
        for mode, name in ((key, label), (swap, "… swap-debiased")):
            if mode not in report["accuracy"]:
                continue
            acc = report["accuracy"][mode]["benchmarks"]["pandalm"]
            cons = report["consistency"][mode]["benchmarks"]["pandalm"]
            agree = report["agreement"][mode]["benchmarks"]["pandalm"]
            cost = report["cost"][mode]
            decided = 1.0 - cost["no_verdict_rate"] / 100.0
            over = f"{acc['value'] / decided:.1f}" if decided else "–"
            if cost["no_verdict_rate"]:
                over += f" ({round(acc['n'] * decided)} pairs)"
            lines.append(
                table_row(
                    [
                        name,
                        pct_ci(acc),
                        f"{cons['value']:.1f}",
                        f"{agree['value']:.1f}%",
                        f"{cost['first_position_rate']:.1f}%",
                        f"{cost['no_verdict_rate']:.1f}%",
                        over,
                    ]
                )
            )
    return "\n".join(lines) + "\n"


def shared_stage1() -> str:
    """Engine work of the same judgments with stage-1 samples asked per mode and shared."""
    work = _load(SHARED)["engine_work"]
    before, after = work["first"], work["second"]
    judgments = _load(SHARED)["records"]["in_both"]
    lines = [
        table_row(
            [
                f"engine work of the {judgments} judgments",
                "per mode (`--no-share-samples`)",
                "shared (default)",
                "after / before",
            ]
        ),
        "|---|---:|---:|---:|",
    ]
    for key, label in (
        ("engine_requests", "engine requests"),
        ("generated_tokens", "generated tokens"),
        ("prompt_tokens", "prompt tokens"),
        ("seconds", "wall seconds (another engine shared the cores)"),
    ):
        lines.append(
            table_row(
                [label, f"{before[key]:,}", f"{after[key]:,}", f"{after[key] / before[key]:.2f}"]
            )
        )
    return "\n".join(lines) + "\n"


def group_designs(path: Path = GROUPS) -> str:
    """Per design and debias: best-of-N, Kendall τ-b, all above (interval shown unless it is
    [0, 0]), RM-Bench accuracy and its paired Δ to round robin, work per group."""
    report = _load(path)
    lines = [
        table_row(
            [
                "design",
                "debias",
                "best-of-N",
                "τ-b (×100)",
                "all above",
                "RM-Bench acc.",
                "Δ RM-Bench acc. vs round robin",
                "judgments",
                "gen. tokens",
                "prompt tokens",
            ]
        ),
        table_row(["---", "---"] + ["---:"] * 8),
    ]

    for row in report["rows"].values():
        above = row["all_above"]
        delta = row["rmbench_accuracy"].get("delta_vs_round_robin")
        lines.append(
            table_row(
                [
                    f"`{row['strategy']}`",
                    row["debias"],
                    pct_ci(row["best_of_n"], scale=100),
                    pct_ci(row["kendall_tau"], scale=100),
                    f"{above['value'] * 100:.1f}"
                    if above["ci95"] == [0.0, 0.0]
                    else pct_ci(above, scale=100),
                    pct_ci(row["rmbench_accuracy"]),
                    _signed(delta["value"], *delta["ci95_paired"]) if delta else "–",
                    f"{row['judgments']['value']:.1f}",
                    f"{row['generated_tokens']['value']:,.0f}",
                    f"{row['prompt_tokens']['value']:,.0f}",
                ]
            )
        )
    chance = report["chance"]["pooled"]
    lines.append(
        table_row(
            [
                "chance",
                "",
                f"{chance['best_of_n'] * 100:.1f}",
                f"{chance['kendall_tau'] * 100:g}",
                f"{chance['all_above'] * 100:.1f}",
                f"{chance['rmbench_accuracy']:g}",
                "",
                "",
                "",
                "",
            ]
        )
    )
    return "\n".join(lines) + "\n"


TABLES: dict[str, Callable[[], str]] = {
    "smollm2-heldout": smollm2_heldout,
    "twelve-accuracy": twelve_accuracy,
    "twelve-consistency": twelve_consistency,
    "twelve-ablations": twelve_ablations,
    "twelve-cost": twelve_cost,
    "seventy-six": seventy_six,
    "pandalm": pandalm,
    "shared-stage1": shared_stage1,
    "group-designs": group_designs,
}


def main() -> None:
    write_tables(__doc__, PAGE, markers, TABLES)


if __name__ == "__main__":
    main()
