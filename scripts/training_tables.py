"""docs/training.md's figure tables of the `smollm2` judge's training, each rendered from its
saved record under docs/records/judge-training/ (the run's training log, the eval reports and
their ``vs-length*.json``, the verdict layer's ``verdict-report.json``, the group report). Each
table sits between the page's markers ``<!-- training-<name>: start -->`` and ``<!--
training-<name>: end -->``; tests/unit/test_training_tables.py fails when one no longer matches
its record.

    .venv/bin/python -m scripts.training_tables [--write]
"""

from __future__ import annotations

import json
import statistics
from collections.abc import Callable
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path
from typing import Any

from scripts.generated import page_markers, pct_ci, table_row, write_tables

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records" / "judge-training"
VERDICT = RECORDS / "verdict"
PAGE = ROOT / "docs" / "training.md"
# the step ranges the run's mean decision loss is shown over (the run ended at step 142)
STEP_RANGES = ((1, 20), (21, 40), (41, 60), (61, 80), (81, 100), (101, 120), (121, 142))
MODES = (
    ("single", "`single` (greedy)"),
    ("vote", "`vote` @8"),
    ("reflect", "`reflect` (ReflectRM)"),
)
OOD = (
    ("rewardbench", "RewardBench"),
    ("rm-bench", "RM-Bench"),
    ("rmb", "RMB"),
    ("judgebench", "JudgeBench"),
)


def markers(name: str) -> tuple[str, str]:
    return page_markers("training", name)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _signed(value: float, low: float, high: float) -> str:
    return f"{value:+.1f} [{low:+.1f}, {high:+.1f}]"


def _ci(value: float, ci: list[float]) -> str:
    return pct_ci({"value": value, "ci95": ci})


def _half_up(share: float, scale: int = 100, digits: int = 1) -> str:
    """``share`` times ``scale``, rounded half up from the decimal the record holds (0.1415 is
    14.2, where binary floating point would give 14.1)."""
    exact = Decimal(str(share)) * scale
    return str(exact.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def _table(head: list[str], rows: list[list[str]], text_columns: int = 1) -> str:
    rule = ["---"] * text_columns + ["---:"] * (len(head) - text_columns)
    return "\n".join(table_row(r) for r in [head, rule, *rows]) + "\n"


def loss_by_steps(log: Path = RECORDS / "run" / "train-log.jsonl") -> str:
    """The run's mean decision loss over each range of steps of its training log."""
    steps = [json.loads(line) for line in log.read_text().splitlines() if line.strip()]
    cells = []
    for first, last in STEP_RANGES:
        losses = [s["decision_loss"] for s in steps if first <= s["step"] <= last]
        cells.append(f"{statistics.fmean(losses):.3f}")
    head = ["steps"] + [f"{a}-{b}" for a, b in STEP_RANGES]
    return _table(head, [["decision loss (mean)", *cells]])


def run_heldout() -> str:
    """The run alone, served in bf16 and in float32, on held-out pairs in both orders: the
    accuracy and "longer wins" of ``vs-length.json``, the rest from ``report.json``."""
    rows = []
    for label, folder in (
        ("bfloat16 (`auto` on this CPU)", "heldout-bf16"),
        ("float32", "heldout-f32"),
    ):
        vs = _load(RECORDS / folder / "vs-length.json")
        report = _load(RECORDS / folder / "report.json")
        cost = report["cost"]["single"]
        both = report["consistency"]["single"]["benchmarks"]["heldout"]["value"]
        rows.append(
            [
                label,
                str(vs["pairs"]),
                _ci(vs["judge_accuracy"], vs["judge_ci"]),
                _ci(vs["length_accuracy"], vs["length_ci"]),
                f"{cost['first_position_rate']:.1f}%",
                f"{both:.1f}%",
                f"{100 - cost['parse_failure_rate']:.0f}%",
                f"{cost['generated_tokens']:.1f}",
            ]
        )
    head = [
        "served as",
        "pairs (both orders)",
        "accuracy, mean of both orders [95% CI]",
        '"longer wins" on the same pairs',
        "says Response 1",
        "right in both orders",
        "parsed (enforcement off)",
        "gen. tokens",
    ]
    return _table(head, rows)


def verdict_development(report: Path = VERDICT / "verdict-report.json") -> str:
    """The verdict layer's development figures per scale (``by_scale``), beside the run alone
    and the markers' readout alone; the bf16 columns are the ``served`` ones."""
    found = _load(report)
    first_fit = _load(VERDICT / "first-fit" / "verdict-report.json")["scale"]

    def row(label: str, r: dict[str, Any], interval: bool) -> list[str]:
        served = r.get("served")
        acc = _half_up(r["accuracy"])
        if interval:
            low, high = (_half_up(x) for x in r["accuracy_95"])
            acc += f" [{low}, {high}]"
        return [
            label,
            acc,
            f"{_half_up(r['slot1_share'])}%",
            f"{_half_up(r['both_orders_right'])}%",
            _half_up(r["decision_loss"], 1, 3) if "decision_loss" in r else "–",
            _half_up(served["accuracy"]) if served else "",
            f"{_half_up(served['slot1_share'])}%" if served else "",
            f"{_half_up(served['both_orders_right'])}%" if served else "",
        ]

    rows = [
        row("the run alone (layer unbuilt)", found["run_alone"], True),
        row(
            "the readout alone (not a judge: the markers' states, read directly)",
            found["readout_alone"],
            False,
        ),
    ]
    for scale, r in sorted(found["by_scale"].items(), key=lambda kv: float(kv[0])):
        label = f"scale {scale}"
        if float(scale) == found["scale"]:
            rows.append(row(f"**{label} (chosen)**", r, True))
        else:
            suffix = " (the first fit's choice)" if float(scale) == first_fit else ""
            rows.append(row(label + suffix, r, False))
    items = found["run_alone"]["items"]
    head = [
        f"development items ({items})",
        "accuracy [95% CI]",
        "says Response 1",
        "right in both orders",
        "decision loss",
        "bf16: accuracy",
        "bf16: says Response 1",
        "bf16: both orders",
    ]
    return _table(head, rows)


def verdict_heldout() -> str:
    """The `smollm2` judge and the first fit on the held-out split: ``vs-length.json`` and the
    run's ``heldout-figures.json``; the swap row from the judge's ``report.json``."""
    judge = VERDICT / "heldout"
    first = VERDICT / "first-fit" / "heldout"

    def row(label: str, folder: Path, bold: bool) -> list[str]:
        vs = _load(folder / "vs-length.json")
        fig = _load(folder / "heldout-figures.json")
        low, high = fig["right_in_both_orders_95"]

        def b(text: str) -> str:
            return f"**{text}**" if bold else text

        return [
            label,
            str(vs["pairs"]),
            b(_ci(vs["judge_accuracy"], vs["judge_ci"])),
            _ci(vs["length_accuracy"], vs["length_ci"]),
            b(_signed(vs["difference"], *vs["difference_ci"])),
            b(f"{fig['says_response_1_percent']:.1f}%"),
            b(f"{fig['right_in_both_orders']:.1f}% [{low:.1f}, {high:.1f}]"),
            f"{fig['parsed_percent']:.0f}%",
            f"{fig['generated_tokens_per_judgment']:.1f}",
        ]

    report = _load(judge / "report.json")
    swap = report["accuracy"]["single+swap"]["benchmarks"]["heldout"]
    cost = report["cost"]["single+swap"]
    right, tie = swap["value"], cost["no_verdict_rate"]
    both = report["consistency"]["single+swap"]["benchmarks"]["heldout"]["value"]
    rows = [
        row("the run + the verdict layer (**the `smollm2` judge**)", judge, True),
        [
            "swap-debiased (the reward endpoints' default), same judgments",
            str(swap["n"]),
            f"right {right:.1f}%, wrong {100 - right - tie:.1f}%, tie {tie:.1f}%",
            "",
            "",
            f"{cost['first_position_rate']:.1f}%",
            f"{both:.1f}%",
            "",
            f"{cost['generated_tokens']:.1f}",
        ],
        row(
            "the first fit (768 tokens, scale 8; "
            "[records](records/judge-training/verdict/first-fit/heldout/))",
            first,
            False,
        ),
    ]
    head = [
        "",
        "pairs (both orders)",
        "accuracy, mean of both orders [95% CI]",
        '"longer wins", same pairs',
        "judge − longer wins",
        "says Response 1",
        "right in both orders",
        "parsed (enforcement off)",
        "gen. tokens",
    ]
    return _table(head, rows)


def verdict_modes(folder: Path = VERDICT / "modes") -> str:
    """Three modes on 20 held-out pairs: a pair scored as the mean of its two orders
    (``vs-length-<mode>.json``), the rest from ``report.json``."""
    report = _load(folder / "report.json")
    rows = []
    for mode, label in MODES:
        vs = _load(folder / f"vs-length-{mode}.json")
        cost = report["cost"][mode]
        both = report["consistency"][mode]["benchmarks"]["heldout"]["value"]
        rows.append(
            [
                label,
                _ci(vs["judge_accuracy"], vs["judge_ci"]),
                f"{vs['length_accuracy']:.1f}",
                f"{both:.1f}%",
                f"{cost['first_position_rate']:.1f}%",
                f"{cost['generated_tokens']:.1f}",
                f"{cost['prompt_tokens']:,.0f}",
                f"{cost['engine_requests']:.1f}",
            ]
        )
    head = [
        "mode",
        "accuracy [95% CI]",
        '"longer wins"',
        "right in both orders",
        "says Response 1",
        "gen. tokens a judgment",
        "prompt tokens a judgment",
        "engine requests",
    ]
    return _table(head, rows)


def verdict_groups(path: Path = VERDICT / "groups" / "group-report.json") -> str:
    """Per design and debias on RM-Bench groups: best-of-N, Kendall τ-b, RM-Bench accuracy and
    judgments per group, with the chance row."""
    report = _load(path)
    rows = [
        [
            f"`{r['strategy']}`",
            r["debias"],
            pct_ci(r["best_of_n"], scale=100),
            pct_ci(r["kendall_tau"], scale=100),
            pct_ci(r["rmbench_accuracy"]),
            f"{r['judgments']['value']:.1f}",
        ]
        for r in report["rows"].values()
    ]
    chance = report["chance"]["pooled"]
    rows.append(
        [
            "chance",
            "",
            f"{chance['best_of_n'] * 100:.1f}",
            f"{chance['kendall_tau'] * 100:g}",
            f"{chance['rmbench_accuracy']:g}",
            "",
        ]
    )
    head = ["design", "debias", "best-of-N", "τ-b (×100)", "RM-Bench acc.", "judgments a group"]
    return _table(head, rows, text_columns=2)


def verdict_ood(path: Path = VERDICT / "ood" / "report.json") -> str:
    """Each benchmark's official metric on the out-of-distribution samples, the mean of the
    four consistency figures, and the share of verdicts naming Response 1."""
    report = _load(path)
    acc = report["accuracy"]["single"]["benchmarks"]
    both = report["consistency"]["single"]["average"]["value"]
    first = report["cost"]["single"]["first_position_rate"]
    row = ["the `smollm2` judge"] + [pct_ci(acc[b]) for b, _ in OOD]
    row += [f"{both:.1f}%", f"{first:.1f}%"]
    head = ["", *(label for _, label in OOD), "correct in both orders (avg)", "says Response 1"]
    return _table(head, [row])


TABLES: dict[str, Callable[[], str]] = {
    "loss-by-steps": loss_by_steps,
    "run-heldout": run_heldout,
    "verdict-development": verdict_development,
    "verdict-heldout": verdict_heldout,
    "verdict-modes": verdict_modes,
    "verdict-groups": verdict_groups,
    "verdict-ood": verdict_ood,
}


def main() -> None:
    write_tables(__doc__, PAGE, markers, TABLES)


if __name__ == "__main__":
    main()
