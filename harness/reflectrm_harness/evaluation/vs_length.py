"""``reflectrm eval vs-length``: an evaluation's judge against length rules on the same pairs.

``compare_with_length`` reads an evaluation's ``results.jsonl`` (``records.load``) and the pairs
file it judged, and scores, per pair judged in both orders, the judge (the mean over its two
orders of "the verdict names the chosen response"; no verdict is a miss) against "the longer
response wins" (in characters; position-free: one answer per pair; equal lengths count as half
right), with paired bootstrap intervals over pairs (``scoring.draws``, ``scoring.interval``)
and the judge's length-balanced accuracy (``reflectrm_harness.evaluation.length``).

With training files (``fit_rule``), it also scores the **per-source length rule**: for each
source of the training pairs, the direction ("longer wins" or "shorter wins") that is right on
most of that source's pairs (a tie: longer wins). A training pair's source is its row's
``source`` (or ``benchmark``) field, and the file's label (its name up to the first dot) is a
source too, over all the file's pairs. An evaluated pair takes the rule of the first of these
that has one: its row's ``source``/``benchmark``, its recorded ``subset``, its row's ``subset``,
its id up to the first ``/`` (the held-out file of ``train heldout`` names each pair's file
there); otherwise the direction fitted on all training pairs. The judge is compared with it
paired (judge-correct minus rule-correct per pair, bootstrapped over pairs), and where the two
disagree (the judge names the same response in both orders, the rule names the other one) the
share of those pairs the judge gets right is given.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reflectrm_harness.datasets import pair_from_row, read_rows
from reflectrm_harness.evaluation import records
from reflectrm_harness.evaluation.common import say
from reflectrm_harness.evaluation.length import length_balanced, longer_of
from reflectrm_harness.evaluation.scoring import draws, interval

LONGER, SHORTER = "longer", "shorter"


def source_label(name: str) -> str:
    """A data file's label: its name up to the first dot (``x.jsonl.gz`` -> ``x``)."""
    return Path(name).name.split(".", 1)[0]


def longer_is_chosen(chosen: str, rejected: str) -> float:
    """The length heuristic's score on a pair: 1 if the chosen response is longer (in
    characters), 0 if shorter, 0.5 for equal lengths."""
    a, b = len(chosen), len(rejected)
    return 1.0 if a > b else 0.0 if a < b else 0.5


def rule_score(direction: str, lengths: tuple[int, int]) -> float:
    """A length rule's score on a pair of (chosen, rejected) lengths: 1 right, 0 wrong, 0.5 for
    equal lengths (the rule cannot tell them apart)."""
    longer = longer_of(lengths)
    if longer is None:
        return 0.5
    return 1.0 if longer == (direction == LONGER) else 0.0


# --- the per-source rule -------------------------------------------------------------------


@dataclass(frozen=True)
class Rule:
    """Per source, the length direction right on most of its training pairs."""

    by_source: dict[str, dict[str, Any]]
    overall: dict[str, Any]

    def direction(self, keys: Iterable[str | None]) -> tuple[str, str | None]:
        """The direction for the first key that has a rule, and that key (None: the overall
        direction)."""
        for key in keys:
            if key and key in self.by_source:
                return self.by_source[key]["direction"], key
        return self.overall["direction"], None


def _fitted(counts: Mapping[str, int]) -> dict[str, Any]:
    longer, shorter = counts.get(LONGER, 0), counts.get(SHORTER, 0)
    direction = LONGER if longer >= shorter else SHORTER
    decided = longer + shorter
    return {
        "direction": direction,
        "pairs": decided + counts.get("equal", 0),
        "better_longer": longer,
        "better_shorter": shorter,
        "equal_length": counts.get("equal", 0),
        "train_accuracy": round(100 * max(longer, shorter) / decided, 1) if decided else None,
    }


def fit_rule(train_files: Sequence[Path]) -> Rule:
    """The per-source length rule of the training pairs in ``train_files`` (shared schema)."""
    counts: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    total: dict[str, int] = defaultdict(int)
    for path in train_files:
        label = source_label(path.name)
        for _where, row in read_rows(path):
            longer = longer_of((len(str(row.get("chosen", ""))), len(str(row.get("rejected", "")))))
            stratum = "equal" if longer is None else LONGER if longer else SHORTER
            total[stratum] += 1
            for key in dict.fromkeys((row.get("source") or row.get("benchmark"), label)):
                if key:
                    counts[str(key)][stratum] += 1
    return Rule({k: _fitted(v) for k, v in sorted(counts.items())}, _fitted(total))


# --- the comparison ------------------------------------------------------------------------


def judge_orders(results: Path, mode: str) -> dict[str, dict[int, records.Record]]:
    """Per pair id, the mode's record in each order (by where the chosen response was shown)."""
    out: dict[str, dict[int, records.Record]] = defaultdict(dict)
    for r in records.load(results).records:
        if r.mode == mode:
            out[r.pair_id][r.chosen_position] = r
    return dict(out)


def _correct(r: records.Record) -> float:
    return float(r.status == "verdict" and r.winner == r.chosen_position)


def _picked_chosen(by_order: Mapping[int, records.Record]) -> bool | None:
    """True / False when the judge names the chosen / the rejected response in both orders;
    None when it does not name one response in both."""
    picks = {
        r.winner == r.chosen_position if r.status == "verdict" and r.winner else None
        for r in by_order.values()
    }
    return picks.pop() if len(picks) == 1 and None not in picks else None


def _pct(values: Sequence[float] | np.ndarray) -> float:
    return round(100 * float(np.mean(values)), 1) if len(values) else float("nan")


def _ci(samples: np.ndarray) -> list[float]:
    low, high = interval(100 * samples)
    return [round(low, 1), round(high, 1)]


def compare_with_length(
    pairs_file: Path,
    results: Path,
    mode: str = "single",
    bootstrap: int = 2000,
    seed: int = 0,
    rule: Rule | None = None,
) -> dict[str, Any]:
    """The judge against "the longer response wins" (and, given ``rule``, the per-source length
    rule) on the pairs it judged in both orders, with a paired bootstrap over pairs (95%
    percentile intervals, in percent)."""
    orders = judge_orders(results, mode)
    rows: dict[str, dict[str, Any]] = {}
    lengths: dict[str, tuple[int, int]] = {}
    for where, row in read_rows(pairs_file):
        pair = pair_from_row(row, where=where)
        rows[pair.id] = row
        lengths[pair.id] = (len(pair.chosen), len(pair.rejected))
    ids = sorted(i for i, o in orders.items() if len(o) == 2 and i in rows)
    judge = np.array([sum(_correct(r) for r in orders[i].values()) / 2 for i in ids])
    length = np.array([rule_score(LONGER, lengths[i]) for i in ids])
    # A pair's subset as the evaluation recorded it (its record's `subset`), else the row's own.
    subset = {}
    for i in ids:
        recorded = next(iter(orders[i].values())).meta.get("subset")
        subset[i] = str(recorded or rows[i].get("subset") or "")
    by_subset: dict[str, list[int]] = defaultdict(list)
    for k, i in enumerate(ids):
        by_subset[subset[i]].append(k)

    rule_of: dict[str, tuple[str, str | None]] = {}
    if rule is not None:
        for i in ids:
            row = rows[i]
            prefix = i.split("/", 1)[0] if "/" in i else None
            keys = (row.get("source") or row.get("benchmark"), subset[i], row.get("subset"), prefix)
            rule_of[i] = rule.direction(_str(k) for k in keys)
    ruled = np.array([rule_score(rule_of[i][0], lengths[i]) for i in ids]) if rule else None

    n = len(ids)
    boot: dict[str, list[float]] = defaultdict(list)
    for draw in draws(n, bootstrap, seed) if n else ():
        j, le = judge[draw].mean(), length[draw].mean()
        boot["judge"].append(j)
        boot["length"].append(le)
        boot["difference"].append(j - le)
        if ruled is not None:
            ru = ruled[draw].mean()
            boot["rule"].append(ru)
            boot["rule_difference"].append(j - ru)
    samples = {k: np.asarray(v) for k, v in boot.items()}
    empty = np.array([])

    def ci(name: str) -> list[float]:
        return _ci(samples.get(name, empty))

    balanced = length_balanced(
        judge.tolist(), [longer_of(lengths[i]) for i in ids], seed=seed, draws=bootstrap
    )
    out: dict[str, Any] = {
        "mode": mode,
        "pairs": n,
        "judge_accuracy": _pct(judge),
        "judge_ci": ci("judge"),
        "length_accuracy": _pct(length),
        "length_ci": ci("length"),
        "difference": round(_pct(judge) - _pct(length), 1),
        "difference_ci": ci("difference"),
        "judge_length_balanced": {
            "value": _round(balanced.get("length_balanced")),
            "ci95": [_round(x) for x in balanced.get("length_balanced_ci", (None, None))],
            "better_longer": {
                "pairs": balanced["better_longer"]["pairs"],
                "accuracy": _round(balanced["better_longer"]["accuracy"]),
            },
            "better_shorter": {
                "pairs": balanced["better_shorter"]["pairs"],
                "accuracy": _round(balanced["better_shorter"]["accuracy"]),
            },
            "equal_length": balanced["equal_length"],
        },
        "per_subset": {
            s: {
                "pairs": len(ks),
                "judge_accuracy": _pct(judge[ks]),
                "length_accuracy": _pct(length[ks]),
                **({"rule_accuracy": _pct(ruled[ks])} if ruled is not None else {}),
            }
            for s, ks in sorted(by_subset.items())
        },
        "bootstrap": bootstrap,
        "seed": seed,
    }
    if rule is not None and ruled is not None:
        disagree = [
            (k, picked)
            for k, i in enumerate(ids)
            if (picked := _picked_chosen(orders[i])) is not None
            and longer_of(lengths[i]) is not None
            and picked != bool(ruled[k])
        ]
        used: dict[str, int] = defaultdict(int)
        for i in ids:
            used[rule_of[i][1] or "(all training pairs)"] += 1
        out["rule"] = {
            "by_source": rule.by_source,
            "overall": rule.overall,
            "applied": dict(sorted(used.items())),
            "accuracy": _pct(ruled),
            "ci": ci("rule"),
            "difference": round(_pct(judge) - _pct(ruled), 1),
            "difference_ci": ci("rule_difference"),
            "disagree_pairs": len(disagree),
            "judge_right_where_disagree": _pct([float(p) for _, p in disagree]),
        }
    return out


def _str(x: Any) -> str | None:
    return None if x is None or x == "" else str(x)


def _round(x: float | None) -> float | None:
    return None if x is None else round(100 * x, 1)


def _fmt(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and x != x) else f"{x}"


def markdown(result: Mapping[str, Any], title: str) -> str:
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
    ]
    rule = result.get("rule")
    if rule:
        lines += [
            f"| per-source length rule | {rule['accuracy']} [{rule['ci'][0]}, {rule['ci'][1]}] |",
            f"| judge − per-source rule | {rule['difference']:+} [{rule['difference_ci'][0]:+}, "
            f"{rule['difference_ci'][1]:+}] |",
        ]
    lba = result["judge_length_balanced"]
    low, high = lba["ci95"]
    lines += [
        "",
        f"Judge's length-balanced accuracy: {_fmt(lba['value'])} [{_fmt(low)}, {_fmt(high)}] "
        f"(chosen longer: {_fmt(lba['better_longer']['accuracy'])} over "
        f"{lba['better_longer']['pairs']} pairs; chosen shorter: "
        f"{_fmt(lba['better_shorter']['accuracy'])} over {lba['better_shorter']['pairs']}; "
        f"{lba['equal_length']} of equal length in neither).",
    ]
    if rule:
        fitted = ", ".join(
            f"{s}: {v['direction']} wins ({v['train_accuracy']}% of {v['pairs']})"
            for s, v in rule["by_source"].items()
        )
        lines += [
            "",
            f"Per-source length rule, fitted on the training pairs: {fitted}; otherwise "
            f"{rule['overall']['direction']} wins. Where the judge (the same response in both "
            f"orders) and the rule disagree ({rule['disagree_pairs']} pairs), the judge is right "
            f"on {_fmt(rule['judge_right_where_disagree'])}%.",
        ]
    head = "| subset (pairs) | judge | longer wins |" + (" per-source rule |" if rule else "")
    lines += ["", head, "|---|---:|---:|" + ("---:|" if rule else "")]
    for name, s in result["per_subset"].items():
        row = f"| {name or '(none)'} ({s['pairs']}) | {s['judge_accuracy']} |"
        row += f" {s['length_accuracy']} |"
        if rule:
            row += f" {s['rule_accuracy']} |"
        lines.append(row)
    return "\n".join(lines) + "\n"


# --- the command ---------------------------------------------------------------------------


def configure(p: argparse.ArgumentParser) -> argparse.ArgumentParser:
    p.add_argument("--pairs", required=True, type=Path, help="the pairs file evaluated")
    p.add_argument("--results", required=True, type=Path, help="the evaluation's results.jsonl")
    p.add_argument(
        "--mode", dest="vs_mode", default="single", metavar="MODE", help="the mode compared"
    )
    p.add_argument(
        "--rule-from",
        nargs="+",
        type=Path,
        metavar="TRAINFILE",
        help="training pairs files (shared schema, e.g. ../shared/data/train/*.jsonl.gz) to fit "
        "the per-source length rule on and compare the judge with it",
    )
    p.add_argument(
        "--bootstrap",
        dest="vs_bootstrap",
        type=int,
        default=2000,
        metavar="B",
        help="bootstrap resamples (default 2000)",
    )
    p.add_argument(
        "--seed", dest="vs_seed", type=int, default=0, metavar="S", help="bootstrap seed"
    )
    p.add_argument("--title", default="Held-out pairs", help="the Markdown summary's title")
    p.add_argument("--out", type=Path, help="write NAME.json and NAME.md (NAME without suffix)")
    return p


def run(args: argparse.Namespace) -> int:
    rule = fit_rule(args.rule_from) if args.rule_from else None
    result = compare_with_length(
        args.pairs, args.results, args.vs_mode, args.vs_bootstrap, args.vs_seed, rule
    )
    text = markdown(result, args.title)
    say(text, file=sys.stdout)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.with_suffix(".json").write_text(json.dumps(result, indent=1) + "\n")
        args.out.with_suffix(".md").write_text(text)
    return 0
