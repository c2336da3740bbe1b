"""From a results file to the report: every number in JSON, the paper's tables in Markdown, a chart.

Everything here reads only the saved records, so re-scoring a finished run (``--score-only``)
reproduces the report exactly, without the datasets or the model.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reflectrm.evaluation.names import (
    BENCHMARKS,
    DISPLAY_NAMES,
    JUDGEBENCH,
    MAIN_BENCHMARKS,
)
from reflectrm.evaluation.records import Loaded, Record, fingerprint
from reflectrm.evaluation.runner import BASELINE_MODE, MODES, mode_label
from reflectrm.evaluation.scoring import (
    METRICS,
    Item,
    Judged,
    agreement,
    bootstrap,
    both_correct,
    credit,
    interval,
    judgebench_two_order,
    score,
)

log = logging.getLogger(__name__)

ACCURACY = "accuracy"
CONSISTENCY = "consistency"
AGREEMENT = "agreement"
METRIC_NAMES = (ACCURACY, CONSISTENCY, AGREEMENT)
# Rows of the paper's tables, by mode name.
TABLE1_MODES = ("single", "vote", "vote_matched", "reflect")
TABLE5_MODES = ("reflect", "random_anchor", "random_winners", "anchor_only", "vote_matched")


@dataclass(frozen=True)
class PairResult:
    """A pair's judgments in one mode: the seeded random order, and the swap if it was run."""

    benchmark: str
    pair_id: str
    meta: Mapping[str, str]
    primary: Judged | None
    swapped: Judged | None


def _judged(r: Record) -> Judged:
    # A judgment that failed for good (prompt too long) is scored like a no-verdict answer.
    return Judged(r.chosen_position, r.winner if r.status == "verdict" else None)


def pair_results(records: Sequence[Record]) -> dict[str, dict[str, list[PairResult]]]:
    """mode -> benchmark -> pairs, in first-seen order."""
    grouped: dict[tuple[str, str, str], dict[bool, Record]] = {}
    for r in records:
        grouped.setdefault((r.mode, r.benchmark, r.pair_id), {})[r.primary] = r
    out: dict[str, dict[str, list[PairResult]]] = {}
    for (mode, benchmark, pair_id), by_order in grouped.items():
        first = by_order.get(True)
        second = by_order.get(False)
        meta = (first or second).meta  # type: ignore[union-attr]
        out.setdefault(mode, {}).setdefault(benchmark, []).append(
            PairResult(
                benchmark,
                pair_id,
                meta,
                _judged(first) if first else None,
                _judged(second) if second else None,
            )
        )
    return out


def outcome(metric: str, p: PairResult) -> float | None:
    """A pair's value for a metric, or None when the pair lacks the orders it needs."""
    if metric == ACCURACY:
        if p.primary is None:
            return None
        if p.benchmark == JUDGEBENCH and p.swapped is not None:
            return judgebench_two_order(p.primary, p.swapped)
        return credit(p.primary, p.benchmark)
    if p.primary is None or p.swapped is None:
        return None
    return (
        both_correct(p.primary, p.swapped)
        if metric == CONSISTENCY
        else agreement(p.primary, p.swapped)
    )


def items(metric: str, pairs: Sequence[PairResult]) -> dict[str, Item]:
    out = {}
    for p in pairs:
        value = outcome(metric, p)
        if value is not None:
            out[p.pair_id] = (p.meta, value)
    return out


# --- the numbers ----------------------------------------------------------------------------


def _num(x: float) -> float | None:
    return None if x is None or not math.isfinite(x) else round(x, 2)


def _ci(samples: np.ndarray) -> list[float | None]:
    low, high = interval(samples)
    return [_num(low), _num(high)]


def _paired(
    benchmark: str,
    metric: str,
    mode_pairs: Sequence[PairResult],
    base_pairs: Sequence[PairResult] | None,
    resamples: int,
    seed: int,
) -> tuple[np.ndarray, np.ndarray | None, int]:
    """Bootstrap samples of a mode's score and of its difference to the baseline, over the
    pairs both have (paired); without a baseline, over the mode's own pairs."""
    mine = items(metric, mode_pairs)
    if base_pairs is None:
        keys = list(mine)
        samples = bootstrap(benchmark, {"m": [mine[k] for k in keys]}, resamples, seed)
        return samples["m"], None, len(keys)
    base = items(metric, base_pairs)
    keys = [k for k in mine if k in base]
    aligned = {"m": [mine[k] for k in keys], "b": [base[k] for k in keys]}
    samples = bootstrap(benchmark, aligned, resamples, seed)
    return samples["m"], samples["m"] - samples["b"], len(keys)


def _benchmarks_in(by_mode: Mapping[str, Mapping[str, Any]]) -> list[str]:
    present = {b for per in by_mode.values() for b in per}
    return [b for b in BENCHMARKS if b in present]


def _modes_in(by_mode: Mapping[str, Any]) -> list[str]:
    return [m for m in MODES if m in by_mode] + sorted(m for m in by_mode if m not in MODES)


def metric_table(
    metric: str,
    by_mode: Mapping[str, Mapping[str, list[PairResult]]],
    resamples: int,
    seed: int,
) -> dict[str, Any]:
    """Per mode: each benchmark's official score with its 95% CI, the average, and the paired
    difference to the single-judgment row (per benchmark and on the average)."""
    benchmarks = _benchmarks_in(by_mode)
    averaged = [b for b in benchmarks if b in MAIN_BENCHMARKS] if metric == ACCURACY else benchmarks
    base = by_mode.get(BASELINE_MODE)
    table: dict[str, Any] = {}
    for mode in _modes_in(by_mode):
        rows: dict[str, Any] = {}
        score_samples: list[np.ndarray] = []
        delta_samples: list[np.ndarray] = []
        for b in benchmarks:
            pairs = by_mode[mode].get(b, [])
            s = score(b, list(items(metric, pairs).values()))
            if s.n == 0:
                continue
            base_pairs = None if base is None or mode == BASELINE_MODE else base.get(b)
            boot, delta, n_paired = _paired(b, metric, pairs, base_pairs, resamples, seed)
            row: dict[str, Any] = {
                "value": _num(s.value),
                "n": s.n,
                "ci95": _ci(boot),
                "details": {k: _num(v) for k, v in sorted(s.details.items())},
            }
            if base is not None and mode != BASELINE_MODE and b in base and delta is not None:
                base_score = score(b, list(items(metric, base[b]).values()))
                row["delta_vs_single"] = {
                    "value": _num(s.value - base_score.value),
                    "ci95_paired": _ci(delta),
                    "n_paired": n_paired,
                }
            rows[b] = row
            if b in averaged:
                score_samples.append(boot)
                if delta is not None:
                    delta_samples.append(delta)
        entry: dict[str, Any] = {"benchmarks": rows}
        complete = all(b in rows for b in averaged) and averaged
        if complete:
            entry["average"] = {
                "value": _num(statistics.fmean(rows[b]["value"] for b in averaged)),
                "over": averaged,
                "ci95": _ci(np.mean(score_samples, axis=0)),
            }
            if len(delta_samples) == len(averaged):
                entry["average"]["delta_vs_single"] = {
                    "value": _num(
                        statistics.fmean(rows[b]["delta_vs_single"]["value"] for b in averaged)
                    ),
                    "ci95_paired": _ci(np.mean(delta_samples, axis=0)),
                }
        table[mode] = entry
    return table


def _mean_of(records: Sequence[Record], get: Callable[[Record], float]) -> float | None:
    return _num(statistics.fmean(get(r) for r in records)) if records else None


def cost_table(records: Sequence[Record]) -> dict[str, Any]:
    """Per mode, over every judgment (both orders): tokens, engine requests, latency, failures."""
    by_mode: dict[str, list[Record]] = {}
    for r in records:
        by_mode.setdefault(r.mode, []).append(r)
    out: dict[str, Any] = {}
    for mode in _modes_in(by_mode):
        rs = by_mode[mode]
        ok = [r for r in rs if r.status != "error"]
        outputs = sum(r.outputs or 0 for r in ok if r.parse_failures is not None)
        failures = sum(r.parse_failures or 0 for r in ok if r.parse_failures is not None)
        exits = [r.early_exit for r in ok if r.early_exit is not None]
        verdicts = [r.winner for r in rs if r.status == "verdict"]
        out[mode] = {
            "judgments": len(rs),
            "generated_tokens": _mean_of(ok, lambda r: r.generated_tokens),
            "prompt_tokens": _mean_of(ok, lambda r: r.prompt_tokens),
            "engine_requests": _mean_of(ok, lambda r: r.engine_requests),
            "latency_s": _mean_of(ok, lambda r: r.latency_ms / 1000),
            "early_exit_rate": _num(100 * statistics.fmean(exits)) if exits else None,
            "parse_failure_rate": _num(100 * failures / outputs) if outputs else None,
            "no_verdict_rate": _num(100 * sum(r.status == "no_verdict" for r in rs) / len(rs)),
            # Position bias at a glance: an unbiased judge says "Response 1" about half the time.
            "first_position_rate": _num(100 * verdicts.count(1) / len(verdicts))
            if verdicts
            else None,
            "errors": sum(r.status == "error" for r in rs),
        }
    return out


def build(
    loaded: Loaded, results_path: Path, resamples: int = 1000, seed: int = 0
) -> dict[str, Any]:
    records = list(loaded.records)
    by_mode = pair_results(records)
    starts = [r for r in loaded.runs if r.get("type") == "run"]
    settings = fingerprint(starts[0]) if starts else {}
    n = settings.get("num_candidates") or 8
    report: dict[str, Any] = {
        "results_file": str(results_path),
        "settings": settings,
        "runs": list(loaded.runs),
        "judgments": len(records),
        "benchmarks": _benchmarks_in(by_mode),
        "modes": {m: mode_label(m, n) if m in MODES else m for m in _modes_in(by_mode)},
        "pairs": {
            b: {
                "judged": len({p.pair_id for per in by_mode.values() for p in per.get(b, [])}),
                "both_orders": max(
                    (
                        sum(p.swapped is not None and p.primary is not None for p in per.get(b, []))
                        for per in by_mode.values()
                    ),
                    default=0,
                ),
            }
            for b in _benchmarks_in(by_mode)
        },
        "scoring": {
            ACCURACY: "official metric of each benchmark over pairs judged once in a seeded random "
            "order (JudgeBench with both orders: its official two-order rule); average = mean of "
            "RewardBench, RM-Bench, RMB and PPE present in every row",
            CONSISTENCY: "the benchmark's metric over pairs judged in both orders, a pair counting "
            "only when the preferred response wins in both (the paper's definition); average = "
            "mean over all benchmarks present",
            AGREEMENT: "the same response won in both orders, right or wrong",
            "no_verdict": "scored as RewardBench's official scripts score an unparseable answer "
            "(0.5) and as a miss elsewhere; a judgment that failed for good (prompt too long) "
            "counts as no verdict",
            "intervals": f"95% percentile bootstrap over pairs, {resamples} resamples, "
            f"seed {seed}; "
            "differences to the single-judgment row are paired (same pairs, same draws)",
            "notes": {b: METRICS[b].note for b in _benchmarks_in(by_mode)},
        },
        ACCURACY: metric_table(ACCURACY, by_mode, resamples, seed),
        CONSISTENCY: metric_table(CONSISTENCY, by_mode, resamples, seed),
        AGREEMENT: metric_table(AGREEMENT, by_mode, resamples, seed),
        "cost": cost_table(records),
    }
    return report


# --- Markdown -------------------------------------------------------------------------------


def _fmt(x: float | None) -> str:
    return "–" if x is None else f"{x:.1f}"


def _fmt_delta(d: Mapping[str, Any] | None) -> str:
    if not d or d.get("value") is None:
        return "–"
    low, high = d.get("ci95_paired") or (None, None)
    ci = f" [{low:+.1f}, {high:+.1f}]" if low is not None and high is not None else ""
    noise = "" if low is None or high is None or low > 0 or high < 0 else " ~"
    return f"{d['value']:+.1f}{ci}{noise}"


def _metric_markdown(
    report: Mapping[str, Any], metric: str, modes: Sequence[str], title: str
) -> str:
    table = report[metric]
    benchmarks = report["benchmarks"]
    if metric == ACCURACY:
        # The paper's Table 1: the main benchmarks and their average, then JudgeBench apart.
        cols = [b for b in benchmarks if b in MAIN_BENCHMARKS]
        extra = [b for b in benchmarks if b not in MAIN_BENCHMARKS]
    else:
        cols, extra = list(benchmarks), []
    rows = [m for m in modes if m in table]
    if not rows:
        return ""
    head = ["Mode", *(DISPLAY_NAMES[b] for b in cols), "Avg", "Δ avg vs single [95% CI]"]
    head += [DISPLAY_NAMES[b] for b in extra]
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * 1 + "---:|" * (len(head) - 1))
    for mode in rows:
        entry = table[mode]
        cells = [report["modes"].get(mode, mode)]
        cells += [_fmt(entry["benchmarks"].get(b, {}).get("value")) for b in cols]
        avg = entry.get("average", {})
        cells.append(_fmt(avg.get("value")))
        cells.append("–" if mode == BASELINE_MODE else _fmt_delta(avg.get("delta_vs_single")))
        cells += [_fmt(entry["benchmarks"].get(b, {}).get("value")) for b in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _per_benchmark_deltas(report: Mapping[str, Any], metric: str) -> str:
    table = report[metric]
    benchmarks = report["benchmarks"]
    head = ["Mode", *(f"{DISPLAY_NAMES[b]} Δ" for b in benchmarks)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(benchmarks)]
    for mode, entry in table.items():
        if mode == BASELINE_MODE:
            continue
        cells = [report["modes"].get(mode, mode)]
        deltas = [entry["benchmarks"].get(b, {}).get("delta_vs_single") for b in benchmarks]
        cells += [_fmt_delta(d) for d in deltas]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) if len(lines) > 2 else ""


def _cost_markdown(report: Mapping[str, Any]) -> str:
    head = [
        "Mode",
        "judgments",
        "gen. tokens",
        "prompt tokens",
        "engine requests",
        "latency s",
        "early exit %",
        "parse failures %",
        "no verdict %",
        "says Response 1 %",
        "errors",
    ]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * (len(head) - 1)]
    for mode, c in report["cost"].items():
        cells = [
            report["modes"].get(mode, mode),
            str(c["judgments"]),
            _fmt(c["generated_tokens"]),
            _fmt(c["prompt_tokens"]),
            _fmt(c["engine_requests"]),
            _fmt(c["latency_s"]),
            _fmt(c["early_exit_rate"]),
            _fmt(c["parse_failure_rate"]),
            _fmt(c["no_verdict_rate"]),
            _fmt(c["first_position_rate"]),
            str(c["errors"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def markdown(report: Mapping[str, Any]) -> str:
    s = report["settings"]
    sizes = ", ".join(
        f"{DISPLAY_NAMES[b]} {v['judged']} pairs ({v['both_orders']} in both orders)"
        for b, v in report["pairs"].items()
    )
    parts = [
        f"Model `{s.get('model')}`, template {s.get('template_version')}, N = "
        f"{s.get('num_candidates')} candidates, max_tokens {s.get('max_tokens')}, seed "
        f"{s.get('seed')}. {report['judgments']} judgments: {sizes}.",
        "",
        "Scores in percent. `Δ` is the difference to the single-judgment row with a paired 95% "
        "bootstrap interval; `~` marks a difference whose interval contains 0 (within noise).",
        "",
        _metric_markdown(
            report, ACCURACY, TABLE1_MODES, "Accuracy (layout of the paper's Table 1)"
        ),
        "",
        _metric_markdown(
            report,
            CONSISTENCY,
            list(MODES),
            "Positional consistency: correct in both orders (layout of the paper's Table 2)",
        ),
        "",
        _metric_markdown(
            report, AGREEMENT, list(MODES), "Agreement between the two orders (right or wrong)"
        ),
        "",
        _metric_markdown(
            report, ACCURACY, TABLE5_MODES, "Ablations (layout of the paper's Table 5)"
        ),
        "",
        "**Per-benchmark accuracy differences to the single-judgment row**",
        "",
        _per_benchmark_deltas(report, ACCURACY),
        "",
        "**Cost per judgment** (means over every judgment of the mode, both orders; latency "
        "measured under the run's concurrency)",
        "",
        _cost_markdown(report),
    ]
    notes = "; ".join(f"{DISPLAY_NAMES[b]}: {n}" for b, n in report["scoring"]["notes"].items())
    parts += ["", f"Scoring: {notes}."]
    return "\n".join(p for p in parts if p is not None).replace("\n\n\n", "\n\n") + "\n"


# --- chart ----------------------------------------------------------------------------------


def _err(cell: Mapping[str, Any] | None, side: int) -> float:
    """Error-bar length below (0) or above (1) a bar, from its 95% interval."""
    if cell is None or cell.get("value") is None or cell["ci95"][side] is None:
        return 0.0
    return abs(cell["ci95"][side] - cell["value"])


def chart(report: Mapping[str, Any], path: Path) -> None:
    """Grouped bars: accuracy and positional consistency per benchmark (and average), per mode."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    metrics = [
        (ACCURACY, "Accuracy (%); Avg leaves out JudgeBench, as the paper's does"),
        (CONSISTENCY, "Positional consistency: correct in both orders (%)"),
    ]
    modes = list(report["modes"])
    fig, axes = plt.subplots(1, 2, figsize=(14, 5.4), sharey=True)
    for ax, (metric, title) in zip(axes, metrics, strict=True):
        table = report[metric]
        scored = {b for entry in table.values() for b in entry["benchmarks"]}
        groups = [b for b in report["benchmarks"] if b in scored]
        labels = [DISPLAY_NAMES[b] for b in groups] + ["Avg"]
        width = 0.8 / max(1, len(modes))
        for i, mode in enumerate(modes):
            entry = table.get(mode)
            if entry is None:
                continue
            cells = [entry["benchmarks"].get(b) for b in groups] + [entry.get("average")]
            values = [np.nan if c is None or c.get("value") is None else c["value"] for c in cells]
            lows = [_err(c, 0) for c in cells]
            highs = [_err(c, 1) for c in cells]
            x = np.arange(len(labels)) + (i - (len(modes) - 1) / 2) * width
            ax.bar(
                x,
                values,
                width,
                label=report["modes"][mode],
                yerr=[lows, highs],
                capsize=2,
                error_kw={"elinewidth": 0.7, "ecolor": "0.35"},
            )
        ax.set_xticks(np.arange(len(labels)), labels)
        ax.set_title(title)
        ax.axhline(50 if metric == ACCURACY else 25, color="grey", lw=0.8, ls="--")
        ax.set_ylim(0, 100)
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="lower center", ncol=4, fontsize=8, frameon=False)
    s = report["settings"]
    fig.suptitle(
        f"{s.get('model')}: N={s.get('num_candidates')}, max_tokens={s.get('max_tokens')} "
        "(dashed: chance; bars: 95% bootstrap CI)",
        fontsize=10,
    )
    fig.tight_layout(rect=(0, 0.1, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)


def write(report: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = {
        "json": out_dir / "report.json",
        "markdown": out_dir / "report.md",
        "chart": out_dir / "report.png",
    }
    paths["json"].write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n")
    paths["markdown"].write_text(markdown(report))
    try:
        chart(report, paths["chart"])
    except ImportError:
        log.warning("no chart: matplotlib is missing (pip install 'reflectrm[eval]')")
        del paths["chart"]
    return paths
