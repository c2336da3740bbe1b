"""The benchmark's numbers from its records: per contender and concurrency, the ratios between
contenders, verdict agreement, the tokens saved by early exit and by prefix caching, the
issue's targets, a Markdown report and a chart.

A record is one judgment (a dict, as ``bench.py`` writes it to ``records.jsonl``); a block is one
contender running a share of one concurrency point's judgments. Nothing here starts an engine.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

PERCENTILES = (0.50, 0.95, 0.99)

ALL = "all"
TOTAL_KEYS = ("prompt_tokens", "cached_prompt_tokens", "generated_tokens", "requests")


def usage_total(stages: Mapping[str, Mapping[str, int]]) -> dict[str, int]:
    return {k: sum(int(s.get(k, 0)) for s in stages.values()) for k in TOTAL_KEYS}


def nearest_rank(values: Sequence[float], fraction: float) -> float | None:
    """The smallest value with at least ``fraction`` of the values at or below it."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(1, math.ceil(fraction * len(ordered))) - 1]


def latency_percentiles(latencies_s: Iterable[float]) -> dict[str, float | None]:
    """p50/p95/p99 and max in ms, nearest-rank (with 32 judgments, p99 is the slowest)."""
    ms = [s * 1000 for s in latencies_s]
    out = {f"p{round(f * 100)}": nearest_rank(ms, f) for f in PERCENTILES}
    out["max"] = max(ms) if ms else None
    return out


def point_stats(records: Sequence[Mapping[str, Any]], blocks: Sequence[Mapping[str, Any]]) -> dict:
    """One contender at one concurrency: throughput over the blocks' wall time, latency, tokens."""
    ok = [r for r in records if r["ok"]]
    wall = sum(float(b["wall_s"]) for b in blocks)
    totals = {k: sum(usage_total(r["stages"])[k] for r in ok) for k in TOTAL_KEYS}
    by_stage: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TOTAL_KEYS, 0))
    for r in ok:
        for stage, usage in r["stages"].items():
            for k in TOTAL_KEYS:
                by_stage[stage][k] += int(usage.get(k, 0))
    cpu = None
    if blocks and all(b.get("cpu_s") for b in blocks) and ok:
        keys = ("server_api_s", "server_engine_s", "client_s")
        cpu = {k: sum(b["cpu_s"][k] for b in blocks) / len(ok) for k in keys}
    return {
        "judgments": len(ok),
        "failed": len(records) - len(ok),
        # CPU seconds per answered judgment: the server's own process, its engine processes,
        # and the client (the benchmark's process; zero where it is the server, the limit).
        "cpu_s_per_judgment": cpu,
        "errors": sorted({str(r.get("error")) for r in records if not r["ok"]}),
        "wall_s": round(wall, 2),
        "judgments_per_s": len(ok) / wall if wall > 0 else None,
        "generated_tokens_per_s": totals["generated_tokens"] / wall if wall > 0 else None,
        "prompt_tokens_per_s": totals["prompt_tokens"] / wall if wall > 0 else None,
        "latency_ms": latency_percentiles(float(r["latency_s"]) for r in ok),
        "early_exits": sum(bool(r.get("early_exit")) for r in ok),
        "no_verdict": sum(r.get("winner") is None for r in ok),
        "tokens": totals,
        "by_stage": {
            stage: {
                **u,
                "cached_share": u["cached_prompt_tokens"] / u["prompt_tokens"]
                if u["prompt_tokens"]
                else None,
            }
            for stage, u in sorted(by_stage.items())
        },
    }


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def agreement(
    records: Sequence[Mapping[str, Any]], contender: str, reference: str
) -> dict[str, Any]:
    """Over the judgments both answered: same winner, and the same token work (the same prompt
    and generated tokens in total, or in stage 1 where both report stages)."""
    mine = {r["index"]: r for r in records if r["contender"] == contender and r["ok"]}
    ref = {r["index"]: r for r in records if r["contender"] == reference and r["ok"]}
    common = sorted(set(mine) & set(ref))
    same_winner = sum(mine[i]["winner"] == ref[i]["winner"] for i in common)
    same_work = 0
    for i in common:
        a, b = mine[i]["stages"], ref[i]["stages"]
        if "rollouts" in a and "rollouts" in b:
            keys = ("prompt_tokens", "generated_tokens")
            same_work += all(a["rollouts"][k] == b["rollouts"][k] for k in keys)
        else:
            ta, tb = usage_total(a), usage_total(b)
            same_work += ta["generated_tokens"] == tb["generated_tokens"]
    return {
        "reference": reference,
        "judgments": len(common),
        "same_winner": same_winner,
        "same_token_work": same_work,
    }


def early_exit_savings(
    records: Sequence[Mapping[str, Any]], early: str, full: str
) -> dict[str, Any] | None:
    """Tokens that ``full`` (a contender without early exit) spent on reflections in the
    judgments where ``early`` exited early: what early exit saved, as a share of ``full``'s."""
    e = {r["index"]: r for r in records if r["contender"] == early and r["ok"]}
    f = {r["index"]: r for r in records if r["contender"] == full and r["ok"]}
    common = sorted(set(e) & set(f))
    if not common:
        return None
    saved = dict.fromkeys(("prompt_tokens", "generated_tokens", "requests"), 0)
    total = dict.fromkeys(saved, 0)
    exits = 0
    for i in common:
        t = usage_total(f[i]["stages"])
        for k in total:
            total[k] += t[k]
        if e[i].get("early_exit"):
            exits += 1
            refl = f[i]["stages"].get("reflections") or {}
            for k in saved:
                saved[k] += int(refl.get(k, 0))
    return {
        "judgments": len(common),
        "early_exits": exits,
        "saved": saved,
        "of_total": total,
        "saved_share": {k: saved[k] / total[k] if total[k] else None for k in saved},
    }


def summarize(
    records: Sequence[Mapping[str, Any]],
    blocks: Sequence[Mapping[str, Any]],
    contenders: Sequence[Mapping[str, str]],
) -> dict[str, Any]:
    """Everything the report shows. ``contenders``: ``{"name", "kind"}`` in the run's order."""
    names = [c["name"] for c in contenders]
    kind = {c["name"]: c["kind"] for c in contenders}
    levels = sorted({int(b["concurrency"]) for b in blocks})
    points: dict[str, dict[int, dict]] = {n: {} for n in names}
    for n in names:
        for c in levels:
            recs = [r for r in records if r["contender"] == n and r["concurrency"] == c]
            blks = [b for b in blocks if b["contender"] == n and b["concurrency"] == c]
            if blks:
                points[n][c] = point_stats(recs, blks)

    def jps(name: str, c: int) -> float | None:
        p = points.get(name, {}).get(c)
        return p["judgments_per_s"] if p else None

    first_of: dict[str, str] = {}
    for n in names:
        first_of.setdefault(kind[n], n)
    ratios = _ratios(names, kind, first_of, levels, jps)
    gains = {}
    if len(levels) > 1:
        lo, hi = levels[0], max(c for c in levels if c <= 16) if levels[0] <= 16 else levels[-1]
        for n in names:
            gains[n] = {"from": lo, "to": hi, "gain": ratio(jps(n, hi), jps(n, lo))}
    reference = first_of.get("limit") or names[0]
    agree = {n: agreement(records, n, reference) for n in names if n != reference}
    savings = {}
    full = first_of.get("peer")
    if full is not None:
        for n in names:
            if kind[n] in ("limit", "service"):
                savings[n] = early_exit_savings(records, n, full)
    return {
        "levels": levels,
        "points": {n: {str(c): p for c, p in ps.items()} for n, ps in points.items()},
        "ratios": {
            n: {k: {str(c): v for c, v in by.items()} for k, by in r.items()}
            for n, r in ratios.items()
        },
        "gains": gains,
        "agreement": agree,
        "early_exit_savings": savings,
        "targets": targets(points, kind, levels, gains),
    }


def _ratios(
    names: Sequence[str],
    kind: Mapping[str, str],
    first_of: Mapping[str, str],
    levels: Sequence[int],
    jps: Any,
) -> dict[str, dict[str, dict[int, float | None]]]:
    """Each service's judgments/s over the first limit's, peer's and naive peer's (and over the
    first service's, for variants), per level."""
    ratios: dict[str, dict[str, dict[int, float | None]]] = {}
    for n in names:
        if kind[n] != "service":
            continue
        refs = [ref for k, ref in first_of.items() if k != "service"]
        if n != first_of["service"]:
            refs.append(first_of["service"])
        ratios[n] = {
            f"{n}/{ref}": {c: ratio(jps(n, c), jps(ref, c)) for c in levels} for ref in refs
        }
    return ratios


def targets(
    points: Mapping[str, Mapping[int, Mapping[str, Any]]],
    kind: Mapping[str, str],
    levels: Sequence[int],
    gains: Mapping[str, Mapping[str, Any]],
) -> list[dict[str, Any]]:
    """The issue's targets for the first service, where the run has what they compare."""
    firsts: dict[str, str] = {}
    for n, k in kind.items():
        firsts.setdefault(k, n)
    svc = firsts.get("service")
    if svc is None:
        return []

    def jps(name: str | None, c: int) -> float | None:
        p = points.get(name or "", {}).get(c)
        return p["judgments_per_s"] if p else None

    out = []

    def add(what: str, value: float | None, goal: float) -> None:
        out.append(
            {
                "target": what,
                "value": value,
                "goal": goal,
                "met": None if value is None else value >= goal,
                "short_by": None if value is None or value >= goal else goal - value,
            }
        )

    for c in (16, 64):
        if c in levels and "limit" in firsts:
            value = ratio(jps(svc, c), jps(firsts["limit"], c))
            add(f"service/limit judgments/s at c={c} >= 0.97", value, 0.97)
    if 16 in levels and "peer" in firsts:
        value = ratio(jps(svc, 16), jps(firsts["peer"], 16))
        add("service/peer judgments/s at c=16 >= 1.3", value, 1.3)
    if "limit" in firsts and svc in gains and gains[svc]["to"] == 16:
        g_s, g_l = gains[svc]["gain"], gains[firsts["limit"]]["gain"]
        add("service gain c=1->16 / limit gain >= 0.9", ratio(g_s, g_l), 0.9)
    if 16 in levels and 16 in points.get(svc, {}):
        lat = points[svc][16]["latency_ms"]
        value = ratio(2 * lat["p50"], lat["p95"]) if lat["p50"] and lat["p95"] else None
        add("service 2*p50/p95 at c=16 >= 1 (p95 <= 2*p50)", value, 1.0)
    return out


# --- presentation -------------------------------------------------------------------------------


def _f(value: float | None, digits: int = 3) -> str:
    return "–" if value is None else f"{value:.{digits}f}"


def _ms(value: float | None) -> str:
    return "–" if value is None else f"{value / 1000:.1f}"


def markdown(summary: Mapping[str, Any], contenders: Sequence[Mapping[str, str]]) -> str:
    """The report's tables, one after another."""
    names = [c["name"] for c in contenders]
    sections = (
        _points_table(summary, names),
        _ratios_table(summary),
        _gains_table(summary),
        _cpu_table(summary, names),
        _cache_table(summary, names),
        _savings_table(summary),
        _agreement_table(summary),
        _targets_table(summary),
    )
    return "\n".join(line for section in sections if section for line in [*section, ""])


def _points_table(summary: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    lines = [
        "| c | contender | judgments | judgments/s | generated tok/s | prompt tok/s "
        "| p50 s | p95 s | p99 s | early exits | failed |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for c in summary["levels"]:
        for n in names:
            p = summary["points"][n].get(str(c))
            if p is None:
                continue
            lat = p["latency_ms"]
            lines.append(
                f"| {c} | {n} | {p['judgments']} | {_f(p['judgments_per_s'])} "
                f"| {_f(p['generated_tokens_per_s'], 1)} | {_f(p['prompt_tokens_per_s'], 1)} "
                f"| {_ms(lat['p50'])} | {_ms(lat['p95'])} | {_ms(lat['p99'])} "
                f"| {p['early_exits']} | {p['failed']} |"
            )
    return lines


def _ratios_table(summary: Mapping[str, Any]) -> list[str]:
    if not summary["ratios"]:
        return []
    levels = summary["levels"]
    lines = [
        "| ratio (judgments/s) | " + " | ".join(f"c={c}" for c in levels) + " |",
        "|---|" + "---:|" * len(levels),
    ]
    for by in summary["ratios"].values():
        for label, values in by.items():
            cells = " | ".join(_f(values.get(str(c)), 2) for c in levels)
            lines.append(f"| {label} | {cells} |")
    return lines


def _gains_table(summary: Mapping[str, Any]) -> list[str]:
    if not summary["gains"]:
        return []
    lines = ["| contender | gain in judgments/s |", "|---|---:|"]
    for n, g in summary["gains"].items():
        lines.append(f"| {n} | c={g['from']}→{g['to']}: {_f(g['gain'], 2)}× |")
    return lines


def _cpu_table(summary: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    rows = []
    for c in summary["levels"]:
        for n in names:
            p = summary["points"][n].get(str(c))
            cpu = p and p.get("cpu_s_per_judgment")
            if cpu:
                total = sum(cpu.values())
                rows.append(
                    f"| {c} | {n} | {cpu['server_api_s']:.2f} | {cpu['server_engine_s']:.2f} "
                    f"| {cpu['client_s']:.2f} | {total:.2f} |"
                )
    if not rows:
        return []
    return [
        "| c | contender | CPU s/judgment: server process | engine processes | client | total |",
        "|---:|---|---:|---:|---:|---:|",
        *rows,
    ]


def _cache_table(summary: Mapping[str, Any], names: Sequence[str]) -> list[str]:
    lines = [
        "| contender | stage | prompt tokens | cached | cached share |",
        "|---|---|---:|---:|---:|",
    ]
    for n in names:
        stages: dict[str, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TOTAL_KEYS, 0))
        for p in summary["points"][n].values():
            for stage, u in p["by_stage"].items():
                for k in TOTAL_KEYS:
                    stages[stage][k] += u[k]
        for stage, u in sorted(stages.items()):
            share = u["cached_prompt_tokens"] / u["prompt_tokens"] if u["prompt_tokens"] else None
            lines.append(
                f"| {n} | {stage} | {u['prompt_tokens']} | {u['cached_prompt_tokens']} "
                f"| {_f(share, 3)} |"
            )
    return lines


def _savings_table(summary: Mapping[str, Any]) -> list[str]:
    rows = [(n, s) for n, s in summary["early_exit_savings"].items() if s is not None]
    if not rows:
        return []
    lines = [
        "| early exit in | judgments | exited early | reflection requests saved "
        "| generated tokens saved | prompt tokens saved |",
        "|---|---:|---:|---:|---:|---:|",
    ]
    for n, s in rows:
        share = s["saved_share"]
        lines.append(
            f"| {n} | {s['judgments']} | {s['early_exits']} | {s['saved']['requests']} "
            f"| {s['saved']['generated_tokens']} ({_f(share['generated_tokens'], 3)}) "
            f"| {s['saved']['prompt_tokens']} ({_f(share['prompt_tokens'], 3)}) |"
        )
    return lines


def _agreement_table(summary: Mapping[str, Any]) -> list[str]:
    if not summary["agreement"]:
        return []
    lines = [
        "| contender | compared with | judgments | same winner | same token work |",
        "|---|---|---:|---:|---:|",
    ]
    for n, a in summary["agreement"].items():
        lines.append(
            f"| {n} | {a['reference']} | {a['judgments']} | {a['same_winner']} "
            f"| {a['same_token_work']} |"
        )
    return lines


def _met(target: Mapping[str, Any]) -> str:
    if target["met"] is None:
        return "–"
    return "yes" if target["met"] else f"no, {target['short_by']:.2f} short"


def _targets_table(summary: Mapping[str, Any]) -> list[str]:
    if not summary["targets"]:
        return []
    lines = ["| target | measured | met |", "|---|---:|---|"]
    for t in summary["targets"]:
        lines.append(f"| {t['target']} | {_f(t['value'], 2)} | {_met(t)} |")
    return lines


def chart(
    summary: Mapping[str, Any], contenders: Sequence[Mapping[str, str]], path: Path, title: str
) -> None:
    """Judgments/s against concurrency, and latency p50/p95/p99, per contender."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8))
    styles = {"p50": "-", "p95": "--", "p99": ":"}
    for i, c in enumerate(contenders):
        n = c["name"]
        levels = [int(k) for k in summary["points"][n]]
        if not levels:
            continue
        color = f"C{i}"
        pts = [summary["points"][n][str(k)] for k in levels]
        left.plot(levels, [p["judgments_per_s"] or 0 for p in pts], "o-", color=color, label=n)
        for key, style in styles.items():
            values = [(p["latency_ms"][key] or 0) / 1000 for p in pts]
            right.plot(levels, values, style, marker="o", color=color, label=f"{n} {key}")
    for ax in (left, right):
        ax.set_xscale("log", base=2)
        ax.set_xlabel("concurrent judgments")
        ax.set_xticks(summary["levels"], [str(c) for c in summary["levels"]])
        ax.grid(True, alpha=0.3)
    left.set_ylabel("judgments/s")
    left.set_title("throughput")
    left.legend(fontsize=8)
    right.set_ylabel("latency (s)")
    right.set_title("latency p50 (solid), p95 (dashed), p99 (dotted)")
    right.set_yscale("log")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


# --- py-spy -------------------------------------------------------------------------------------


def pyspy_top(raw: str, rate: float, n: int = 25) -> str:
    """A summary of py-spy's raw output (``thread (id);frame;...;frame count`` per line, idle
    threads left out): each thread's busy time, and the frames that take the most of it, by
    their own samples and with what they call."""
    threads: Counter[str] = Counter()
    own: Counter[str] = Counter()
    under: Counter[str] = Counter()
    total = 0
    for line in raw.splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        k = int(count)
        frames = stack.split(";")
        total += k
        threads[frames[0]] += k
        own[frames[-1]] += k
        for frame in set(frames[1:]):
            under[frame] += k
    lines = [f"{total} busy samples at {rate:g}/s ({total / rate:.1f} s of busy thread time)", ""]
    lines += ["| thread | busy s | share |", "|---|---:|---:|"]
    lines += [f"| {t} | {c / rate:.1f} | {c / total:.3f} |" for t, c in threads.most_common(10)]
    for title, counter in (("own samples", own), ("samples with callees", under)):
        lines += ["", f"| frame ({title}) | s | share |", "|---|---:|---:|"]
        lines += [
            f"| `{f}` | {c / rate:.1f} | {c / total:.3f} |" for f, c in counter.most_common(n)
        ]
    return "\n".join(lines) + "\n"
