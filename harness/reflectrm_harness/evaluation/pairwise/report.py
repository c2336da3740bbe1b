"""From a results file to the report: every number in JSON, the paper's tables in Markdown, a chart.

Known benchmarks get the paper's tables; a generic dataset (a user's own pairs) gets its own
table: accuracy, positional consistency and agreement with 95% intervals, per-subset accuracy and,
where pairs share a ``group_id``, the group metric. Every mode judged in both orders with recorded
scores also gets a position-debiased ``swap`` row (``debiased_winner``) beside it, computed from
the same two judgments. Everything here reads only the saved records, so re-scoring a finished run
(``--score-only``) reproduces the report exactly, without the datasets or the model.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reflectrm.judging import defaults
from reflectrm.judging.debias import average_scores, winner_of
from reflectrm_harness.evaluation.length import judge_figures, longer_of
from reflectrm_harness.evaluation.names import (
    BENCHMARKS,
    DISPLAY_NAMES,
    JUDGEBENCH,
    MAIN_BENCHMARKS,
)
from reflectrm_harness.evaluation.pairwise.runner import BASELINE_MODE, EVAL_MODES, mode_label
from reflectrm_harness.evaluation.records import Loaded, Record, fingerprint
from reflectrm_harness.evaluation.reporting import (
    MISSING,
    bars,
    ci,
    figure,
    fmt,
    fmt_cell,
    fmt_delta,
    number,
    write_files,
)
from reflectrm_harness.evaluation.scoring import (
    Item,
    Judged,
    agreement,
    bootstrap,
    both_correct,
    credit,
    groups_of,
    is_generic,
    judgebench_two_order,
    metric_of,
    score,
)

ACCURACY = "accuracy"
CONSISTENCY = "consistency"
AGREEMENT = "agreement"
METRIC_NAMES = (ACCURACY, CONSISTENCY, AGREEMENT)
# Rows of the paper's tables, by mode name.
TABLE1_MODES = ("single", "vote", "vote_matched", "reflect")
TABLE5_MODES = ("reflect", "random_anchor", "random_winners", "anchor_only", "vote_matched")
# A mode's position-debiased row: "<mode>+swap".
SWAP = "+swap"


def swap_of(mode: str) -> str:
    return mode + SWAP


def display(benchmark: str) -> str:
    return DISPLAY_NAMES.get(benchmark, benchmark)


def label_of(mode: str, n: int) -> str:
    if mode.endswith(SWAP) and mode[: -len(SWAP)] in EVAL_MODES:
        return f"{mode_label(mode[: -len(SWAP)], n)}, swap-debiased"
    return mode_label(mode, n) if mode in EVAL_MODES else mode


@dataclass(frozen=True)
class PairResult:
    """A pair's judgments in one mode: the seeded random order, and the swap if it was run."""

    benchmark: str
    pair_id: str
    meta: Mapping[str, str]
    primary: Judged | None
    swapped: Judged | None
    lengths: tuple[int, int] | None = None  # characters of the chosen and the rejected response


def _judged(r: Record) -> Judged:
    # A judgment that failed for good (prompt too long) is scored like a no-verdict answer.
    return Judged(r.chosen_position, r.winner if r.status == "verdict" else None)


def _by_pair(records: Sequence[Record]) -> dict[tuple[str, str, str], dict[bool, Record]]:
    """(mode, benchmark, pair) -> {primary: record}, in first-seen order."""
    grouped: dict[tuple[str, str, str], dict[bool, Record]] = {}
    for r in records:
        grouped.setdefault((r.mode, r.benchmark, r.pair_id), {})[r.primary] = r
    return grouped


def _has_scores(r: Record) -> bool:
    return r.scores is not None or r.status == "error"


# The scores of an order that ended in an error: no preference, as a no-verdict judgment's.
NO_VERDICT_SCORES = (0.5, 0.5)


def debiased_winner(first: Record, second: Record) -> int | None:
    """The service's ``debias: "swap"`` rule (``reflectrm.judging.debias``) on two recorded
    orders of a pair: their scores averaged (the second put back in the first's numbering), the
    higher average wins, a tie is no verdict. An order without scores counts as (0.5, 0.5), so
    it pulls the average towards a tie instead of letting the other order's position bias stand
    alone. The winner is in the first order's numbering."""
    scores = average_scores(first.scores or NO_VERDICT_SCORES, second.scores or NO_VERDICT_SCORES)
    return winner_of(scores)


def swap_pair(first: Record, second: Record) -> PairResult:
    """A pair's position-debiased result from its two orders (``debiased_winner``): one verdict
    for the pair, the same response in both orders, so it is told as a judgment in each order."""
    winner = debiased_winner(first, second)  # in the primary order's numbering
    return PairResult(
        first.benchmark,
        first.pair_id,
        first.meta,
        Judged(first.chosen_position, winner),
        Judged(second.chosen_position, None if winner is None else 3 - winner),
        first.lengths,
    )


def pair_results(records: Sequence[Record]) -> dict[str, dict[str, list[PairResult]]]:
    """mode -> benchmark -> pairs, in first-seen order. A mode's swap row ("<mode>+swap") holds
    the pairs it has in both orders, when both records carry scores."""
    out: dict[str, dict[str, list[PairResult]]] = {}
    for (mode, benchmark, pair_id), by_order in _by_pair(records).items():
        first = by_order.get(True)
        second = by_order.get(False)
        meta = (first or second).meta  # type: ignore[union-attr]
        lengths = (first or second).lengths  # type: ignore[union-attr]
        out.setdefault(mode, {}).setdefault(benchmark, []).append(
            PairResult(
                benchmark,
                pair_id,
                meta,
                _judged(first) if first else None,
                _judged(second) if second else None,
                lengths,
            )
        )
        if first and second and _has_scores(first) and _has_scores(second):
            out.setdefault(swap_of(mode), {}).setdefault(benchmark, []).append(
                swap_pair(first, second)
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
    """The known benchmarks present, in display order."""
    present = {b for per in by_mode.values() for b in per}
    return [b for b in BENCHMARKS if b in present]


def _generic_in(by_mode: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The generic datasets present, in first-seen order."""
    seen = dict.fromkeys(b for per in by_mode.values() for b in per if is_generic(b))
    return list(seen)


def _modes_in(by_mode: Mapping[str, Any]) -> list[str]:
    """Modes in the paper's order, each mode's swap row right after it, then any others."""
    known = [m for base in EVAL_MODES for m in (base, swap_of(base)) if m in by_mode]
    return known + sorted(m for m in by_mode if m not in known)


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
    benchmarks = benchmarks + _generic_in(by_mode)  # generic datasets: scored, never averaged
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
                "value": number(s.value),
                "n": s.n,
                "ci95": ci(boot),
                "details": {k: number(v) for k, v in sorted(s.details.items())},
            }
            if base is not None and mode != BASELINE_MODE and b in base and delta is not None:
                base_score = score(b, list(items(metric, base[b]).values()))
                row["delta_vs_single"] = {
                    "value": number(s.value - base_score.value),
                    "ci95_paired": ci(delta),
                    "n_paired": n_paired,
                }
            if is_generic(b):
                grouped = _groups_row(b, items(metric, pairs), resamples, seed)
                if grouped is not None:
                    row["groups"] = grouped
            rows[b] = row
            if b in averaged:
                score_samples.append(boot)
                if delta is not None:
                    delta_samples.append(delta)
        entry: dict[str, Any] = {"benchmarks": rows}
        complete = all(b in rows for b in averaged) and averaged
        if complete:
            entry["average"] = {
                "value": number(statistics.fmean(rows[b]["value"] for b in averaged)),
                "over": averaged,
                "ci95": ci(np.mean(score_samples, axis=0)),
            }
            if len(delta_samples) == len(averaged):
                entry["average"]["delta_vs_single"] = {
                    "value": number(
                        statistics.fmean(rows[b]["delta_vs_single"]["value"] for b in averaged)
                    ),
                    "ci95_paired": ci(np.mean(delta_samples, axis=0)),
                }
        table[mode] = entry
    return table


def _groups_row(
    dataset: str, pair_items: Mapping[str, Item], resamples: int, seed: int
) -> dict[str, Any] | None:
    """The group metric of a generic dataset's pairs that share a group_id, or None."""
    groups = groups_of(pair_items)
    if not groups:
        return None
    s = score(dataset, groups)
    boot = bootstrap(dataset, {"g": groups}, resamples, seed)["g"]
    return {"value": number(s.value), "n": s.n, "ci95": ci(boot)}


def position_table(by_mode: Mapping[str, Mapping[str, list[PairResult]]]) -> dict[str, Any]:
    """Per mode and dataset, over every judgment (both orders): the share of verdicts naming
    the response shown first, and of judgments without a verdict. A swap row names the same
    response in both orders, so its first-shown share is 50% by construction."""
    out: dict[str, Any] = {}
    for mode in _modes_in(by_mode):
        per: dict[str, Any] = {}
        for b, pairs in by_mode[mode].items():
            judged = [j for p in pairs for j in (p.primary, p.swapped) if j is not None]
            verdicts = [j.winner for j in judged if j.winner is not None]
            per[b] = {
                "judgments": len(judged),
                "first_position_rate": number(100 * verdicts.count(1) / len(verdicts))
                if verdicts
                else None,
                "no_verdict_rate": number(100 * (len(judged) - len(verdicts)) / len(judged))
                if judged
                else None,
            }
        out[mode] = per
    return out


def _percent(x: float | None) -> float | None:
    return None if x is None else number(100 * x)


def _length_row(pairs: Sequence[PairResult], resamples: int, seed: int) -> dict[str, Any]:
    """``judge_figures`` of pairs judged in both orders with their lengths, in percent."""
    orders = [
        (
            (p.primary.chosen_position, p.primary.winner),  # type: ignore[union-attr]
            (p.swapped.chosen_position, p.swapped.winner),  # type: ignore[union-attr]
        )
        for p in pairs
    ]
    f = judge_figures(orders, [longer_of(p.lengths) for p in pairs], seed=seed, draws=resamples)
    low, high = f.get("length_balanced_ci") or (None, None)
    return {
        "value": _percent(f.get("length_balanced")),
        "ci95": [_percent(low), _percent(high)],
        "pairs": f["pairs"],
        "accuracy": _percent(f["accuracy"]),
        "better_longer": {
            "pairs": f["better_longer"]["pairs"],
            "accuracy": _percent(f["better_longer"]["accuracy"]),
        },
        "better_shorter": {
            "pairs": f["better_shorter"]["pairs"],
            "accuracy": _percent(f["better_shorter"]["accuracy"]),
        },
        "equal_length": f["equal_length"],
        "slot1_share": _percent(f["slot1_share"]),
        "both_right": _percent(f["both_right"]),
    }


def length_table(
    by_mode: Mapping[str, Mapping[str, list[PairResult]]], resamples: int, seed: int
) -> dict[str, Any]:
    """Per mode and dataset, over the pairs judged in both orders whose records carry the
    responses' lengths: length-balanced accuracy with its 95% interval, beside the plain accuracy
    of the same pairs (each pair the mean of its orders; no verdict is a miss), both strata, the
    slot-1 share and the share right in both orders; per subset too when there are several.
    Empty for results files written before the lengths were recorded."""
    out: dict[str, Any] = {}
    for mode in _modes_in(by_mode):
        per: dict[str, Any] = {}
        for b, pairs in by_mode[mode].items():
            both = [p for p in pairs if p.primary and p.swapped and p.lengths is not None]
            if not both:
                continue
            row = _length_row(both, resamples, seed)
            subsets: dict[str, list[PairResult]] = {}
            for p in both:
                subsets.setdefault(p.meta.get("subset", "all"), []).append(p)
            if len(subsets) > 1:
                row["subsets"] = {
                    k: _length_row(v, resamples, seed) for k, v in sorted(subsets.items())
                }
            per[b] = row
        if per:
            out[mode] = per
    return out


def _mean_of(records: Sequence[Record], get: Callable[[Record], float]) -> float | None:
    return number(statistics.fmean(get(r) for r in records)) if records else None


def _swap_cost(
    mode: str, records: Sequence[Record], swap_pairs: Sequence[PairResult]
) -> dict[str, Any]:
    """A swap row's cost per debiased answer: the two judgments it is made of, summed (latency is
    not given: the harness ran the two orders as separate judgments)."""
    by_key = {(r.benchmark, r.pair_id, r.primary): r for r in records if r.mode == mode}
    both = [
        (by_key[(p.benchmark, p.pair_id, True)], by_key[(p.benchmark, p.pair_id, False)])
        for p in swap_pairs
    ]
    ok = [(a, b) for a, b in both if a.status != "error" and b.status != "error"]
    judged = [j for p in swap_pairs for j in (p.primary, p.swapped) if j is not None]
    verdicts = [j.winner for j in judged if j.winner is not None]
    outputs = sum((r.outputs or 0) for a, b in ok for r in (a, b) if r.parse_failures is not None)
    failures = sum(
        (r.parse_failures or 0) for a, b in ok for r in (a, b) if r.parse_failures is not None
    )

    def total(get: Callable[[Record], float]) -> float | None:
        return number(statistics.fmean(get(a) + get(b) for a, b in ok)) if ok else None

    return {
        "judgments": len(swap_pairs),
        "generated_tokens": total(lambda r: r.generated_tokens),
        "prompt_tokens": total(lambda r: r.prompt_tokens),
        "engine_requests": total(lambda r: r.engine_requests),
        "latency_s": None,
        "early_exit_rate": None,
        "parse_failure_rate": number(100 * failures / outputs) if outputs else None,
        "no_verdict_rate": number(100 * (len(judged) - len(verdicts)) / len(judged))
        if judged
        else None,
        "first_position_rate": number(100 * verdicts.count(1) / len(verdicts))
        if verdicts
        else None,
        "errors": sum(a.status == "error" or b.status == "error" for a, b in both),
    }


def cost_table(
    records: Sequence[Record], by_pair: Mapping[str, Mapping[str, list[PairResult]]] | None = None
) -> dict[str, Any]:
    """Per mode, over every judgment (both orders): tokens, engine requests, latency, failures.
    A swap row (from ``by_pair``) is costed per debiased answer: its two judgments summed."""
    by_mode: dict[str, list[Record]] = {}
    for r in records:
        by_mode.setdefault(r.mode, []).append(r)
    swaps = {m: v for m, v in (by_pair or {}).items() if m.endswith(SWAP)}
    out: dict[str, Any] = {}
    for mode in _modes_in({**by_mode, **swaps}):
        if mode in swaps and mode not in by_mode:
            pairs = [p for per in swaps[mode].values() for p in per]
            out[mode] = _swap_cost(mode[: -len(SWAP)], records, pairs)
            continue
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
            "early_exit_rate": number(100 * statistics.fmean(exits)) if exits else None,
            "parse_failure_rate": number(100 * failures / outputs) if outputs else None,
            "no_verdict_rate": number(100 * sum(r.status == "no_verdict" for r in rs) / len(rs)),
            # Position bias at a glance: an unbiased judge says "Response 1" about half the time.
            "first_position_rate": number(100 * verdicts.count(1) / len(verdicts))
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
    n = settings.get("num_candidates") or defaults.NUM_CANDIDATES
    datasets = _benchmarks_in(by_mode) + _generic_in(by_mode)
    report: dict[str, Any] = {
        "results_file": str(results_path),
        "settings": settings,
        "runs": list(loaded.runs),
        "judgments": len(records),
        "benchmarks": _benchmarks_in(by_mode),
        "modes": {m: label_of(m, n) for m in _modes_in(by_mode)},
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
            for b in datasets
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
            "notes": {b: metric_of(b).note for b in datasets},
        },
        ACCURACY: metric_table(ACCURACY, by_mode, resamples, seed),
        CONSISTENCY: metric_table(CONSISTENCY, by_mode, resamples, seed),
        AGREEMENT: metric_table(AGREEMENT, by_mode, resamples, seed),
        "cost": cost_table(records, by_mode),
    }
    # Added only when present, so reports of earlier results files keep their exact form.
    generic = _generic_in(by_mode)
    if generic:
        report["datasets"] = generic
        report["subsets"] = {d: _subset_counts(by_mode, d) for d in generic}
        if any(
            "groups" in entry["benchmarks"].get(d, {})
            for entry in report[ACCURACY].values()
            for d in generic
        ):
            report["scoring"]["groups"] = GROUPS_NOTE
    if any(m.endswith(SWAP) for m in by_mode):
        report["scoring"]["swap"] = SWAP_NOTE
    if generic or any(m.endswith(SWAP) for m in by_mode):
        report["position"] = position_table(by_mode)
    lengths = length_table(by_mode, resamples, seed)
    if lengths:
        report["length"] = lengths
        report["scoring"]["length"] = LENGTH_NOTE
    work = engine_work(loaded.runs)
    if work:
        report["engine_work"] = work
    return report


def _subset_counts(by_mode: Mapping[str, Mapping[str, list[PairResult]]], dataset: str) -> dict:
    """Pairs per subset of a dataset (each pair once, whichever modes judged it)."""
    metas = {p.pair_id: p.meta for per in by_mode.values() for p in per.get(dataset, [])}
    counts: dict[str, int] = {}
    for meta in metas.values():
        subset = meta.get("subset", "all")
        counts[subset] = counts.get(subset, 0) + 1
    return dict(sorted(counts.items()))


GROUPS_NOTE = (
    "generic datasets: pairs sharing a `group_id` form a group (one chosen response against "
    "several rejected ones); a group counts when the chosen response wins every one of its pairs "
    "(for consistency: in both orders); 95% bootstrap interval over groups"
)
LENGTH_NOTE = (
    "length-balanced accuracy, over pairs judged in both orders: a pair scores the mean of its "
    "two orders (no verdict is a miss); the pairs whose chosen response is longer (in characters) "
    "and those where it is shorter are scored apart (equal lengths in neither) and the two "
    "accuracies averaged, so a rule that only looks at length scores 50; 95% bootstrap interval "
    "resampling pairs within each stratum; slot 1 = the share of verdicts naming the response "
    "shown first"
)
SWAP_NOTE = (
    "a mode's swap-debiased row uses the two orders' judgments of each pair already made: their "
    "scores, put in one numbering, are averaged; the higher average wins, a tie is no verdict "
    "(an order without a verdict counts as 0.5/0.5). Its verdict is the same in both orders, so "
    "it is consistent whenever it is right, and it names the first-shown response in exactly "
    "half of its verdicts; its cost is the two judgments (per debiased answer), no extra engine "
    "work"
)


def engine_work(runs: Sequence[Mapping[str, Any]]) -> dict[str, Any] | None:
    """The engine work the invocations really asked for (in-process runs count it; with shared
    candidates it is less than the sum of the per-judgment costs, which are each mode's own)."""
    ends = [r for r in runs if r.get("type") == "run_end" and r.get("engine_work")]
    if not ends:
        return None
    totals: dict[str, Any] = {"invocations": len(ends)}
    for key in ("engine_requests", "prompt_tokens", "generated_tokens"):
        totals[key] = sum(int(r["engine_work"].get(key, 0)) for r in ends)
    totals["judged"] = sum(int(r.get("judged", 0)) for r in ends)
    totals["share_samples"] = sorted({bool(r.get("share_samples")) for r in ends})
    return totals


# --- Markdown -------------------------------------------------------------------------------


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
    head = ["Mode", *(display(b) for b in cols), "Avg", "Δ avg vs single [95% CI]"]
    head += [display(b) for b in extra]
    lines = [f"**{title}**", "", "| " + " | ".join(head) + " |"]
    lines.append("|" + "---|" * 1 + "---:|" * (len(head) - 1))
    for mode in rows:
        entry = table[mode]
        cells = [report["modes"].get(mode, mode)]
        cells += [fmt(entry["benchmarks"].get(b, {}).get("value")) for b in cols]
        avg = entry.get("average", {})
        cells.append(fmt(avg.get("value")))
        cells.append("–" if mode == BASELINE_MODE else fmt_delta(avg.get("delta_vs_single")))
        cells += [fmt(entry["benchmarks"].get(b, {}).get("value")) for b in extra]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _per_benchmark_deltas(report: Mapping[str, Any], metric: str) -> str:
    table = report[metric]
    benchmarks = report["benchmarks"]
    head = ["Mode", *(f"{display(b)} Δ" for b in benchmarks)]
    lines = ["| " + " | ".join(head) + " |", "|---|" + "---:|" * len(benchmarks)]
    for mode, entry in table.items():
        if mode == BASELINE_MODE:
            continue
        cells = [report["modes"].get(mode, mode)]
        deltas = [entry["benchmarks"].get(b, {}).get("delta_vs_single") for b in benchmarks]
        cells += [fmt_delta(d) for d in deltas]
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
            fmt(c["generated_tokens"]),
            fmt(c["prompt_tokens"]),
            fmt(c["engine_requests"]),
            fmt(c["latency_s"]),
            fmt(c["early_exit_rate"]),
            fmt(c["parse_failure_rate"]),
            fmt(c["no_verdict_rate"]),
            fmt(c["first_position_rate"]),
            str(c["errors"]),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _generic_markdown(report: Mapping[str, Any], dataset: str) -> str:
    """One generic dataset: every mode (each swap row after its plain row), then per subset."""
    acc, cons, agree = (report[m] for m in METRIC_NAMES)
    position = report.get("position", {})
    cost = report["cost"]
    modes = [m for m in acc if dataset in acc[m]["benchmarks"]]
    has_groups = any("groups" in acc[m]["benchmarks"][dataset] for m in modes)
    head = ["Mode", "accuracy [95% CI]", "Δ vs single [95% CI]", "consistency [95% CI]"]
    head += ["agreement", *(["groups [95% CI]"] if has_groups else [])]
    head += ["says Response 1 %", "no verdict %", "gen. tokens"]
    sizes = report["pairs"][dataset]
    lines = [
        f"**{display(dataset)}** ({sizes['judged']} pairs, {sizes['both_orders']} in both "
        f"orders; {report['scoring']['notes'][dataset]})",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * (len(head) - 1),
    ]
    for mode in modes:
        row = acc[mode]["benchmarks"][dataset]
        pos = position.get(mode, {}).get(dataset, {})
        cells = [
            report["modes"].get(mode, mode),
            fmt_cell(row),
            "–" if mode == BASELINE_MODE else fmt_delta(row.get("delta_vs_single")),
            fmt_cell(cons.get(mode, {}).get("benchmarks", {}).get(dataset)),
            fmt(agree.get(mode, {}).get("benchmarks", {}).get(dataset, {}).get("value")),
        ]
        if has_groups:
            cells.append(fmt_cell(row.get("groups")))
        cells += [
            fmt(pos.get("first_position_rate")),
            fmt(pos.get("no_verdict_rate")),
            fmt(cost.get(mode, {}).get("generated_tokens")),
        ]
        lines.append("| " + " | ".join(cells) + " |")
    plain = [m for m in modes if not m.endswith(SWAP)]
    lines += ["", _subset_markdown(report, dataset, plain)]
    return "\n".join(lines)


MAX_SUBSETS_SHOWN = 20


def _subset_markdown(report: Mapping[str, Any], dataset: str, modes: Sequence[str]) -> str:
    """Accuracy per subset (the largest ones first), one column per plain mode (every row,
    swap rows included, is in report.json)."""
    acc = report[ACCURACY]
    counts = report.get("subsets", {}).get(dataset, {})
    if len(counts) < 2:
        return ""
    shown = sorted(counts, key=lambda k: (-counts[k], k))[:MAX_SUBSETS_SHOWN]
    head = ["subset (pairs)", *(report["modes"].get(m, m) for m in modes)]
    lines = [
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * len(modes),
    ]
    for subset in shown:
        cells = [f"{subset} ({counts[subset]})"]
        cells += [fmt(acc[m]["benchmarks"][dataset].get("details", {}).get(subset)) for m in modes]
        lines.append("| " + " | ".join(cells) + " |")
    more = len(counts) - len(shown)
    if more:
        lines.append(f"\n{more} smaller subsets are in report.json.")
    return "Accuracy per subset (plain rows; all rows in report.json):\n\n" + "\n".join(lines)


def _subset_cell(row: Mapping[str, Any] | None) -> str:
    return MISSING if row is None else f"{fmt_cell(row)} / {fmt(row['accuracy'])}"


def _length_markdown(report: Mapping[str, Any]) -> str:
    """Per dataset: every mode's length-balanced accuracy beside the plain accuracy of the same
    pairs, the strata, the slot-1 share and right in both orders; then per subset (plain rows)."""
    table = report["length"]
    head = ["Mode", "accuracy", "length-balanced [95% CI]", "chosen longer (pairs)"]
    head += ["chosen shorter (pairs)", "slot 1 %", "right in both orders %"]
    lines = ["**Length-balanced accuracy** (pairs judged in both orders)"]
    for dataset in report["pairs"]:
        modes = [m for m in table if dataset in table[m]]
        if not modes:
            continue
        first = table[modes[0]][dataset]
        lines += [
            "",
            f"{display(dataset)} ({first['pairs']} pairs, {first['equal_length']} of equal length)",
            "",
            "| " + " | ".join(head) + " |",
            "|---|" + "---:|" * (len(head) - 1),
        ]
        for mode in modes:
            row = table[mode][dataset]
            longer, shorter = row["better_longer"], row["better_shorter"]
            cells = [
                report["modes"].get(mode, mode),
                fmt(row["accuracy"]),
                fmt_cell(row),
                f"{fmt(longer['accuracy'])} ({longer['pairs']})",
                f"{fmt(shorter['accuracy'])} ({shorter['pairs']})",
                fmt(row["slot1_share"]),
                fmt(row["both_right"]),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        plain = [m for m in modes if not m.endswith(SWAP) and "subsets" in table[m][dataset]]
        if plain:
            subsets = table[plain[0]][dataset]["subsets"]
            shown = sorted(subsets, key=lambda k: (-subsets[k]["pairs"], k))[:MAX_SUBSETS_SHOWN]
            lines += [
                "",
                "Per subset: length-balanced [95% CI] / accuracy of the same pairs (– where a "
                "subset lacks one of the strata):",
                "",
                "| subset (pairs) | " + " | ".join(report["modes"].get(m, m) for m in plain) + " |",
                "|---|" + "---:|" * len(plain),
            ]
            for subset in shown:
                cells = [f"{subset} ({subsets[subset]['pairs']})"]
                cells += [_subset_cell(table[m][dataset]["subsets"].get(subset)) for m in plain]
                lines.append("| " + " | ".join(cells) + " |")
            more = len(subsets) - len(shown)
            if more:
                lines.append(f"\n{more} smaller subsets are in report.json.")
    return "\n".join(lines)


def markdown(report: Mapping[str, Any]) -> str:
    s = report["settings"]
    sizes = ", ".join(
        f"{display(b)} {v['judged']} pairs ({v['both_orders']} in both orders)"
        for b, v in report["pairs"].items()
    )
    swap_modes = [m for m in report["modes"] if m.endswith(SWAP)]
    parts = [
        f"Model `{s.get('model')}`, template {s.get('template_version')}, N = "
        f"{s.get('num_candidates')} candidates, max_tokens {s.get('max_tokens')}, seed "
        f"{s.get('seed')}. {report['judgments']} judgments: {sizes}.",
        "",
        "Scores in percent. `Δ` is the difference to the single-judgment row with a paired 95% "
        "bootstrap interval; `~` marks a difference whose interval contains 0 (within noise).",
    ]
    if report["benchmarks"]:
        parts += [
            "",
            _metric_markdown(
                report, ACCURACY, TABLE1_MODES, "Accuracy (layout of the paper's Table 1)"
            ),
            "",
            _metric_markdown(
                report,
                CONSISTENCY,
                list(EVAL_MODES),
                "Positional consistency: correct in both orders (layout of the paper's Table 2)",
            ),
            "",
            _metric_markdown(
                report,
                AGREEMENT,
                list(EVAL_MODES),
                "Agreement between the two orders (right or wrong)",
            ),
            "",
            _metric_markdown(
                report, ACCURACY, TABLE5_MODES, "Ablations (layout of the paper's Table 5)"
            ),
        ]
        if swap_modes:
            interleaved = [m for base in EVAL_MODES for m in (base, swap_of(base))]
            parts += [
                "",
                _metric_markdown(
                    report,
                    ACCURACY,
                    interleaved,
                    "Accuracy, plain and swap-debiased (both orders' scores averaged)",
                ),
            ]
        parts += [
            "",
            "**Per-benchmark accuracy differences to the single-judgment row**",
            "",
            _per_benchmark_deltas(report, ACCURACY),
        ]
    for dataset in report.get("datasets", []):
        parts += ["", _generic_markdown(report, dataset)]
    parts += [
        "",
        "**Cost per judgment** (means over every judgment of the mode, both orders; latency "
        "measured under the run's concurrency"
        + ("; a swap row's cost is its two judgments, per debiased answer" if swap_modes else "")
        + ")",
        "",
        _cost_markdown(report),
    ]
    work = report.get("engine_work")
    if work:
        parts += [
            "",
            f"Engine work of the run ({work['invocations']} invocation(s), "
            f"{work['judged']} judgments): {work['engine_requests']} engine requests, "
            f"{work['generated_tokens']} generated and {work['prompt_tokens']} prompt tokens "
            f"(stage-1 samples shared across modes: {'/'.join(map(str, work['share_samples']))}).",
        ]
    notes = "; ".join(f"{display(b)}: {n}" for b, n in report["scoring"]["notes"].items())
    parts += ["", f"Scoring: {notes}."]
    if "length" in report:
        parts += ["", _length_markdown(report)]
    for key in ("swap", "groups", "length"):
        if key in report["scoring"]:
            parts += ["", f"{key.capitalize()}: {report['scoring'][key]}."]
    return "\n".join(p for p in parts if p is not None).replace("\n\n\n", "\n\n") + "\n"


# --- chart ----------------------------------------------------------------------------------


def chart(report: Mapping[str, Any], path: Path) -> None:
    """Grouped bars: accuracy and positional consistency per benchmark (and average), per mode."""
    metrics = [
        (
            ACCURACY,
            "Accuracy (%); Avg leaves out JudgeBench, as the paper's does"
            if report["benchmarks"]
            else "Accuracy (%)",
        ),
        (CONSISTENCY, "Positional consistency: correct in both orders (%)"),
    ]
    modes = list(report["modes"])
    with figure(path, 2, (14, 5.4), dpi=120, rect=(0, 0.1, 1, 1)) as (fig, axes):
        for ax, (metric, title) in zip(axes, metrics, strict=True):
            table = report[metric]
            scored = {b for entry in table.values() for b in entry["benchmarks"]}
            shown = [*report["benchmarks"], *report.get("datasets", [])]
            groups = [b for b in shown if b in scored]
            averaged = bool(report["benchmarks"])
            labels = [display(b) for b in groups] + (["Avg"] if averaged else [])
            width = 0.8 / max(1, len(modes))
            for i, mode in enumerate(modes):
                entry = table.get(mode)
                if entry is None:
                    continue
                cells = [entry["benchmarks"].get(b) for b in groups]
                cells += [entry.get("average")] if averaged else []
                values, lows, highs = bars(cells)
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


def write(report: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    return write_files(report, out_dir, "report", markdown, chart)
