"""The group report: every group scored under every row (the metrics and bootstraps are
``scoring``'s), paired intervals over groups, JSON, Markdown and a chart.

Per group and design (a row: where the rewards came from, the strategy, the debias setting):

- **best-of-N**: the best completion gets the strictly highest reward. Ties at the top count as
  a share: with k completions tied for the highest reward, of which m are best, the group scores
  m / k. RM-Bench groups have three best (chosen) completions, so there it reads "the top reward
  goes to a chosen response" (chance 50%).
- **Kendall tau-b** between the rewards and the gold order (ties on either side handled as
  tau-b does); rewards all equal say nothing: tau 0.
- **all best above the rest** ("every chosen above every rejected" for RM-Bench): every
  completion of the best rank has a strictly higher reward than every other one (chance for
  random distinct rewards: 1 / C(n, m), 5% for RM-Bench's 3 + 3).
- **RM-Bench's style matrix**: each of the 9 (chosen style, rejected style) cells of an item is
  credited 1 when the chosen completion's reward is higher, 0.5 on a tie, 0 when lower; the
  cells are scored with the pairwise harness's official RM-Bench metric (``scoring.score``:
  hard, normal, easy, per domain, mean of domains; math absent from the offline copy).
- **engine work per group**: judgments, prompt and generated tokens, engine requests.

A completion whose reward is None (no comparison of it had a verdict) counts as 0.5, the
neutral reward the trainer integrations give it. Intervals: 95% percentile bootstrap over
groups, every row scored on the same draws (paired), so a row's difference to round robin with
the same debias setting has a paired interval.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from reflectrm.judging.debias import Debias
from reflectrm.judging.groups import NO_VERDICT_REWARD, STRATEGIES, Strategy
from reflectrm_harness.evaluation.groups.data import Group
from reflectrm_harness.evaluation.groups.runner import (
    POOL_STRATEGY,
    PoolJudgment,
    Work,
    pool_plan,
    pooled_rewards,
)
from reflectrm_harness.evaluation.names import DISPLAY_NAMES, RMBENCH
from reflectrm_harness.evaluation.reporting import (
    bars,
    ci,
    figure,
    fmt_cell,
    fmt_delta,
    number,
    write_files,
)
from reflectrm_harness.evaluation.scoring import (
    TIE,
    Item,
    all_above,
    best_of_n,
    group_bootstrap,
    kendall_tau_b,
    rmbench_bootstrap,
    score,
)

# Report numbers of group metrics (shares, tau) keep three digits; percentages two or one.
DIGITS = 3
METRICS = ("best_of_n", "kendall_tau", "all_above", "rmbench_accuracy")
WORK = ("judgments", "prompt_tokens", "generated_tokens", "engine_requests")
BASELINE: Strategy = POOL_STRATEGY  # the expensive design the others are compared with


def values_of(rewards: Sequence[float | None]) -> list[float]:
    return [NO_VERDICT_REWARD if r is None else float(r) for r in rewards]


def rmbench_items(group: Group, values: Sequence[float]) -> list[Item]:
    """The 9 style cells of an RM-Bench group as pairwise items for ``scoring.score``."""
    index = {(m["side"], m["style"]): i for i, m in enumerate(group.completion_meta)}
    out: list[Item] = []
    for (cs, rs), difficulty in sorted(group.cells.items()):
        c, r = values[index[("chosen", cs)]], values[index[("rejected", rs)]]
        credit = 0.5 if abs(c - r) <= TIE else (1.0 if c > r else 0.0)
        meta = {
            "subset": group.meta.get("subset", "all"),
            "difficulty": difficulty,
            "chosen_style": cs,
            "rejected_style": rs,
        }
        out.append((meta, credit))
    return out


def chance(group: Group) -> dict[str, float]:
    """What rewards drawn at random (all distinct) would score on the group, in expectation."""
    n, m = len(group.ranks), len(group.best)
    return {"best_of_n": m / n, "kendall_tau": 0.0, "all_above": 1 / math.comb(n, m)}


@dataclass(frozen=True)
class Scored:
    """One group under one row: its metrics and engine work."""

    metrics: dict[str, float]
    items: list[Item]  # RM-Bench cells ([] elsewhere)
    work: Work
    no_verdict: int  # completions left without a reward


def score_group(group: Group, rewards: Sequence[float | None], work: Work) -> Scored:
    values = values_of(rewards)
    metrics = {
        "best_of_n": best_of_n(values, group.best),
        "kendall_tau": kendall_tau_b(values, group.ranks),
        "all_above": all_above(values, group.ranks),
    }
    items = rmbench_items(group, values) if group.benchmark == RMBENCH and group.cells else []
    return Scored(metrics, items, work, sum(r is None for r in rewards))


# --- rows from the records ---------------------------------------------------------------------

Row = tuple[str, str, str]  # (source, strategy, debias)


def row_name(row: Row) -> str:
    source, strategy, debias = row
    return f"{strategy}, debias {debias} ({source})"


def pools_of(rows: Mapping[tuple[Any, ...], Mapping[str, Any]]) -> dict[str, dict]:
    """group id -> {(a, b, first): PoolJudgment}."""
    pools: dict[str, dict[tuple[int, int, int], PoolJudgment]] = {}
    for key, row in rows.items():
        if key[0] == "pool":
            pools.setdefault(row["group_id"], {})[(row["a"], row["b"], row["first"])] = (
                PoolJudgment.of(row)
            )
    return pools


def _complete_pool(group: Group, pool: Mapping[tuple[int, int, int], Any], seed: int) -> bool:
    return all((u.a, u.b, u.first) in pool for u in pool_plan([group], seed))


def _direct_scored(group: Group, row: Mapping[str, Any]) -> Scored | None:
    body = row.get("response")
    if row.get("status") == "error" or not body:
        return None
    usage = body.get("usage") or {}
    work = Work(
        int(body.get("judgments", 0)),
        int(usage.get("prompt_tokens", 0)),
        int(usage.get("generated_tokens", 0)),
        int(usage.get("engine_requests", 0)),
    )
    return score_group(group, body["rewards"], work)


def scored_rows(
    groups: Sequence[Group],
    rows: Mapping[tuple[Any, ...], Mapping[str, Any]],
    seed: int,
    strategies: Sequence[Strategy] = STRATEGIES,
    debiases: Sequence[Debias] = ("none", "swap"),
) -> tuple[dict[Row, dict[str, Scored]], list[str]]:
    """Per row, each group's scores: pooled rows for the groups whose pool is complete (every
    design that compares completions, both debias settings), direct rows from the served
    designs recorded. Also the ids of the groups with a complete pool."""
    pools = pools_of(rows)
    out: dict[Row, dict[str, Scored]] = {}
    pooled_groups = []
    for group in groups:
        pool = pools.get(group.id)
        if pool and _complete_pool(group, pool, seed):
            pooled_groups.append(group.id)
            for strategy in strategies:
                if strategy == "reference":
                    continue  # the pool holds completion pairs only
                for debias in debiases:
                    outcome = pooled_rewards(group, strategy, debias, pool, seed)
                    out.setdefault(("pooled", strategy, debias), {})[group.id] = score_group(
                        group, [r.reward for r in outcome.rewards], outcome.work
                    )
        for strategy in strategies:
            for debias in debiases:
                row = rows.get(("group", group.id, strategy, debias))
                scored = _direct_scored(group, row) if row else None
                if scored is not None:
                    out.setdefault(("direct", strategy, debias), {})[group.id] = scored
    return out, pooled_groups


# --- the report ---------------------------------------------------------------------------------


def build(
    groups: Sequence[Group],
    runs: Sequence[Mapping[str, Any]],
    rows: Mapping[tuple[Any, ...], Mapping[str, Any]],
    seed: int,
    resamples: int = 1000,
    boot_seed: int = 0,
) -> dict[str, Any]:
    by_row, pooled_ids = scored_rows(groups, rows, seed)
    report: dict[str, Any] = {
        "settings": dict(next((r for r in runs if r.get("type") == "run"), {})),
        "runs": list(runs),
        "groups": {},
        "rows": {},
    }
    report["settings"].pop("type", None)
    for source in ("pooled", "direct"):
        rows_here = {r: v for r, v in by_row.items() if r[0] == source}
        if not rows_here:
            continue
        # A source's rows are scored over the groups every one of them has (paired).
        ids = [g.id for g in groups if all(g.id in v for v in rows_here.values())]
        report["groups"][source] = len(ids)
        if ids:
            by_id = {g.id: g for g in groups}
            entries, chances = _score_source(
                rows_here, [by_id[i] for i in ids], resamples, boot_seed
            )
            report["rows"].update(entries)
            report.setdefault("chance", {})[source] = chances
    if pooled_ids:
        scored = set(pooled_ids)  # the groups scored, not every group in the file
        report["pool"] = pool_summary(
            [r for k, r in rows.items() if k[0] == "pool" and r["group_id"] in scored]
        )
    report["benchmarks"] = sorted({g.benchmark for g in groups})
    report["scoring"] = SCORING
    return report


GROUP_METRICS = ("best_of_n", "kendall_tau", "all_above")


def _score_source(
    rows_here: Mapping[Row, Mapping[str, Scored]],
    groups: Sequence[Group],
    resamples: int,
    boot_seed: int,
) -> tuple[dict[str, Any], dict[str, Any]]:
    """The rows of one source over the same groups: values, intervals, paired differences to
    round robin; and what chance scores on those groups."""
    ids = [g.id for g in groups]
    series: dict[str, list[float]] = {}
    cells: dict[str, list[list[Item]]] = {}
    for row, per in rows_here.items():
        name = row_name(row)
        for metric in GROUP_METRICS:
            series[f"{name}|{metric}"] = [per[i].metrics[metric] for i in ids]
        for w in WORK:
            series[f"{name}|{w}"] = [getattr(per[i].work, w) for i in ids]
        series[f"{name}|no_verdict"] = [per[i].no_verdict for i in ids]
        if all(per[i].items for i in ids):
            cells[name] = [per[i].items for i in ids]
    boots = group_bootstrap(series, resamples, boot_seed)
    rm_boots = rmbench_bootstrap(cells, resamples, boot_seed)
    chance_rows = [chance(g) for g in groups]
    chances: dict[str, Any] = {
        k: number(statistics.fmean(c[k] for c in chance_rows), DIGITS) for k in chance_rows[0]
    }
    if cells:
        chances["rmbench_accuracy"] = 50.0
    entries: dict[str, Any] = {}
    for row in sorted(rows_here, key=_order):
        name = row_name(row)
        base = row_name((row[0], BASELINE, row[2]))
        entry: dict[str, Any] = {
            "source": row[0],
            "strategy": row[1],
            "debias": row[2],
            "groups": len(ids),
        }
        for metric in (*GROUP_METRICS, *WORK, "no_verdict"):
            key, bkey = f"{name}|{metric}", f"{base}|{metric}"
            value = statistics.fmean(series[key])
            cell: dict[str, Any] = {"value": number(value, DIGITS), "ci95": ci(boots[key], DIGITS)}
            if metric in GROUP_METRICS and name != base and bkey in boots:
                cell["delta_vs_round_robin"] = {
                    "value": number(value - statistics.fmean(series[bkey]), DIGITS),
                    "ci95_paired": ci(boots[key] - boots[bkey], DIGITS),
                }
            entry[metric] = cell
        if name in cells:
            entry["rmbench_accuracy"] = _rmbench_cell(name, base, cells, rm_boots)
        entries[name] = entry
    return entries, chances


def _rmbench_cell(
    name: str,
    base: str,
    cells: Mapping[str, list[list[Item]]],
    rm_boots: Mapping[str, np.ndarray],
) -> dict[str, Any]:
    official = score(RMBENCH, [it for g in cells[name] for it in g])
    cell: dict[str, Any] = {
        "value": number(official.value, 2),
        "ci95": ci(rm_boots[name], 2),
        "details": {k: number(v, 2) for k, v in sorted(official.details.items())},
    }
    if name != base and base in rm_boots:
        base_value = score(RMBENCH, [it for g in cells[base] for it in g]).value
        cell["delta_vs_round_robin"] = {
            "value": number(official.value - base_value, 2),
            "ci95_paired": ci(rm_boots[name] - rm_boots[base], 2),
        }
    return cell


def _order(row: Row) -> tuple[int, int, int]:
    source, strategy, debias = row
    return (source != "pooled", STRATEGIES.index(strategy), debias != "none")


def pool_summary(pool_rows: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    """The pool's judgments: how many, how often they had a verdict and named the response shown
    first, and how often the two orders of a pair agreed."""
    verdicts = [r for r in pool_rows if r.get("status") == "verdict"]
    by_pair: dict[tuple[Any, ...], dict[int, Mapping[str, Any]]] = {}
    for r in pool_rows:
        by_pair.setdefault((r["group_id"], r["a"], r["b"]), {})[r["first"]] = r
    agree = total = 0
    for (_, a, b), orders in by_pair.items():
        ra, rb = orders.get(a), orders.get(b)
        if ra and rb and ra.get("status") == rb.get("status") == "verdict":
            total += 1
            # a shown first and winning (1) agrees with b shown first and losing (2).
            agree += ra["winner"] != rb["winner"]
    return {
        "judgments": len(pool_rows),
        "verdict_rate": number(100 * len(verdicts) / len(pool_rows), 1) if pool_rows else None,
        "first_position_rate": number(
            100 * sum(r["winner"] == 1 for r in verdicts) / len(verdicts), 1
        )
        if verdicts
        else None,
        "consistent_rate": number(100 * agree / total, 1) if total else None,
        "errors": sum(r.get("status") == "error" for r in pool_rows),
        "prompt_tokens": sum(int(r.get("prompt_tokens", 0)) for r in pool_rows),
        "generated_tokens": sum(int(r.get("generated_tokens", 0)) for r in pool_rows),
        "engine_requests": sum(int(r.get("engine_requests", 0)) for r in pool_rows),
    }


SCORING = {
    "best_of_n": "share of the completions tied for the highest reward that are best (RM-Bench: "
    "chosen); a reward of None counts as 0.5",
    "kendall_tau": "Kendall tau-b between rewards and the gold order; equal rewards give 0",
    "all_above": "every best-ranked completion (RM-Bench: every chosen) strictly above every "
    "other one",
    "rmbench_accuracy": "RM-Bench's official metric over each item's 9 style cells, a cell "
    "credited 1 when the chosen completion's reward is higher, 0.5 on a tie (percent)",
    "work": "per group: judgments, prompt and generated tokens, engine requests; a pooled row's "
    "are those of the pool's judgments the design uses",
    "intervals": "95% percentile bootstrap over groups, paired across rows; Δ is the difference "
    "to round robin with the same debias setting and source",
    "pooled": "every design scored from one pool per group (round robin, both orders, as the "
    "service judges it); a comparison (a, b) with a > b uses the pool's seed of (b, a) instead of "
    "its own; round robin is exactly as served",
    "direct": "every design served as the service serves it (POST /v1/rewards, to the app in "
    "process or to --url), each with its own engine work",
}


# --- Markdown and the chart ------------------------------------------------------------------


def _delta(cell: Mapping[str, Any] | None, scale: float = 1.0) -> str:
    return fmt_delta((cell or {}).get("delta_vs_round_robin"), scale)


def markdown(report: Mapping[str, Any]) -> str:
    s = report["settings"]
    names = ", ".join(DISPLAY_NAMES.get(b, b) for b in report["benchmarks"])
    judging = (
        "one greedy output per judgment"
        if s.get("mode") == "single"
        else f"N = {s.get('num_candidates')} candidates"
    )
    parts = [
        f"Model `{s.get('model')}`, mode {s.get('mode')} ({judging}), max_tokens "
        f"{s.get('max_tokens')}, seed {s.get('seed')}; {names}; groups "
        + ", ".join(f"{k} {v}" for k, v in report["groups"].items())
        + ".",
        "",
        "Percent, with 95% bootstrap intervals over groups; Δ: paired difference to round robin "
        "with the same debias setting (`~`: the interval contains 0). τ: Kendall tau-b (×100).",
    ]
    rows = report["rows"]
    rm = any("rmbench_accuracy" in e for e in rows.values())
    for source in ("pooled", "direct"):
        mine = {k: e for k, e in rows.items() if e["source"] == source}
        if not mine:
            continue
        head = ["design", "debias", "best-of-N", "Δ", "τ", "Δ τ", "all above", "Δ"]
        head += ["RM-Bench acc.", "Δ"] if rm else []
        head += ["judgments", "gen. tokens", "prompt tokens"]
        lines = [
            f"**{source}** ({report['groups'][source]} groups)",
            "",
            "| " + " | ".join(head) + " |",
            "|---|---|" + "---:|" * (len(head) - 2),
        ]
        for e in mine.values():
            cells = [
                f"`{e['strategy']}`",
                e["debias"],
                fmt_cell(e["best_of_n"], 100),
                _delta(e["best_of_n"], 100),
            ]
            cells += [fmt_cell(e["kendall_tau"], 100), _delta(e["kendall_tau"], 100)]
            cells += [fmt_cell(e["all_above"], 100), _delta(e["all_above"], 100)]
            if rm:
                cells += [fmt_cell(e.get("rmbench_accuracy")), _delta(e.get("rmbench_accuracy"))]
            cells += [
                fmt_cell(e["judgments"]),
                fmt_cell(e["generated_tokens"], digits=0),
                fmt_cell(e["prompt_tokens"], digits=0),
            ]
            lines.append("| " + " | ".join(cells) + " |")
        c = report.get("chance", {}).get(source)
        if c:
            lines += [
                "",
                f"Chance (random distinct rewards): best-of-N {100 * c['best_of_n']:.1f}, τ 0, "
                f"all above {100 * c['all_above']:.1f}"
                + (", RM-Bench accuracy 50" if rm else "")
                + ".",
            ]
        parts += ["", *lines]
    if rm:
        parts += ["", _difficulty_markdown(rows)]
    pool = report.get("pool")
    if pool:
        parts += [
            "",
            f"Pool: {pool['judgments']} judgments ({pool['errors']} errors), verdicts "
            f"{pool['verdict_rate']}%, naming the response shown first in "
            f"{pool['first_position_rate']}% of verdicts; the two orders of a pair agreed in "
            f"{pool['consistent_rate']}% of pairs with two verdicts; "
            f"{pool['generated_tokens']} generated and {pool['prompt_tokens']} prompt tokens in "
            f"{pool['engine_requests']} engine requests.",
        ]
    parts += ["", "Scoring: " + "; ".join(f"{k}: {v}" for k, v in report["scoring"].items()) + "."]
    return "\n".join(parts) + "\n"


def _difficulty_markdown(rows: Mapping[str, Any]) -> str:
    head = ["row", "hard", "normal", "easy"]
    lines = [
        "RM-Bench accuracy by difficulty (chosen plainer than rejected: hard):",
        "",
        "| " + " | ".join(head) + " |",
        "|---|---:|---:|---:|",
    ]
    for name, e in rows.items():
        d = (e.get("rmbench_accuracy") or {}).get("details") or {}
        vals = ["–" if d.get(k) is None else f"{d[k]:.1f}" for k in ("hard", "normal", "easy")]
        lines.append(f"| {name} | " + " | ".join(vals) + " |")
    return "\n".join(lines)


def chart(report: Mapping[str, Any], path: Path) -> None:
    """Bars per row: best-of-N, all above and τ (percent) with their intervals."""
    rows = list(report["rows"].items())
    metrics = [
        ("best_of_n", "best-of-N"),
        ("all_above", "all best above the rest"),
        ("kendall_tau", "Kendall τ-b"),
    ]
    size = (15, max(4.0, 0.32 * len(rows) + 1.5))
    with figure(path, 3, size, dpi=110) as (fig, axes):
        y = np.arange(len(rows))
        for ax, (metric, title) in zip(axes, metrics, strict=True):
            vals, lows, highs = bars([e[metric] for _, e in rows], scale=100)
            colors = ["tab:blue" if e["debias"] == "swap" else "tab:orange" for _, e in rows]
            ax.barh(y, vals, xerr=[lows, highs], color=colors, capsize=2)
            chance: Mapping[str, Any] = next(iter(report.get("chance", {}).values()), {})
            if metric in chance:
                ax.axvline(100 * chance[metric], color="grey", ls="--", lw=0.8)
            ax.set_title(title)
        axes[0].set_yticks(y, [n for n, _ in rows], fontsize=7)
        axes[0].invert_yaxis()
        s = report["settings"]
        fig.suptitle(
            f"{s.get('model')}: mode {s.get('mode')}"
            + ("" if s.get("mode") == "single" else f", N={s.get('num_candidates')}")
            + ", max_tokens="
            f"{s.get('max_tokens')} (blue: swap, orange: none; dashed: chance; bars: 95% CI)",
            fontsize=9,
        )


def write(report: Mapping[str, Any], out_dir: Path) -> dict[str, Path]:
    return write_files(report, out_dir, "group-report", markdown, chart)
