"""Group strategies on a synthetic judge: how well each ranks a group, at what cost.

No engine: the service's own designs (``reflectrm.judging.groups``) are driven round by round,
and each comparison is judged the way the service judges it (``debias`` none: one order, by the
comparison seed's coin; swap: both orders, averaged by ``reflectrm.judging.debias``) by a
synthetic judge instead of the model.

The synthetic judge (every draw seeded):

- each completion of a group has a latent quality q ~ N(0, quality_sd^2); so has the reference
  answer (strategy ``reference``);
- a judgment of (first, second) as shown votes ``votes`` times; each vote goes to the response
  shown first with probability sigmoid(q_first - q_second + position_bias + e), where e ~
  N(0, noise^2) is drawn once per judgment (a judge that misreads this pair, in this order, in
  all its votes) and ``position_bias`` (logit units) favours the response shown first
  (sigmoid(position_bias) is how often the first shown wins between equal responses: 0.5, 0.56,
  0.62, 0.73, 0.88 for biases 0, 0.25, 0.5, 1, 2);
- optionally a pair's misjudgment shared by both its orders: ``pair_noise`` is the sd of an
  offset u ~ N(0, pair_noise^2) drawn once per comparison and added to completion a's quality in
  both orders (a judge that prefers the wrong response whichever is shown first: swap cannot
  average it away, while the per-judgment noise e it can);
- scores are the vote shares; the winner is the majority, an even split going to the first
  vote's response (the engine's rule: candidate 0's verdict); with probability ``no_verdict``
  the judgment has no verdict (scores 0.5, 0.5), like an unparseable output;
- the judgment of a pair in an order is a function of (seed, group, comparison seed, order):
  every strategy and every position bias sees the same draws for the same pair (common random
  numbers, so their differences are not sampling noise of the judge).

Per group: Kendall's tau-b between the rewards and the latent qualities (a None reward counts as
0.5, what the trainers' adapters send), top-1 (1 if the highest reward is the best completion;
1/k if k completions share the highest reward and it is one of them), and the judgments run.
Each figure is averaged over ``groups`` seeded groups, with its standard error.

The row ``knockout+survival`` is not a strategy of the service: the same knockout comparisons
rewarded by the mean of the share of rounds survived and the Bradley-Terry win share, kept as the
evidence for rewarding a knockout by the fit alone.

    PYTHONPATH=service .venv/bin/python -m studies.group_sim \\
        --out docs/records/group-designs-synthetic-judge
"""

from __future__ import annotations

import argparse
import json
import math
import random
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from reflectrm.judging.debias import Debias, Debiased, both_orders, flipped, single_order
from reflectrm.judging.groups import (
    NO_VERDICT_REWARD,
    STRATEGIES,
    Comparison,
    GroupDesign,
    Result,
    bradley_terry,
    design,
    judgments,
    win_shares,
)
from reflectrm.judging.types import EngineUsage, Judgment, Trace

SIZES = (4, 8, 16)
DEBIAS: tuple[Debias, ...] = ("none", "swap")
KNOCKOUT_SURVIVAL = "knockout+survival"
COMMAND = "PYTHONPATH=service .venv/bin/python -m studies.group_sim"


@dataclass(frozen=True)
class SyntheticJudge:
    position_bias: float = 0.0
    noise: float = 0.5
    votes: int = 8
    no_verdict: float = 0.0
    pair_noise: float = 0.0

    def judge(self, q_first: float, q_second: float, rng: random.Random) -> Judgment:
        e = rng.gauss(0.0, self.noise)
        no_verdict = rng.random() < self.no_verdict
        p = 1.0 / (1.0 + math.exp(-(q_first - q_second + self.position_bias + e)))
        draws = [rng.random() < p for _ in range(self.votes)]
        if no_verdict:
            return _judgment(None, (0.5, 0.5))
        k = sum(draws)
        winner = 1 if 2 * k > self.votes else 2 if 2 * k < self.votes else (1 if draws[0] else 2)
        return _judgment(winner, (k / self.votes, 1 - k / self.votes))


def _judgment(winner: int | None, scores: tuple[float, float]) -> Judgment:
    return Judgment(
        winner=winner,
        scores=scores,
        outcome="verdict" if winner else "no_verdict",
        mode="vote",
        analysis=None,
        votes=(0, 0),
        early_exit=False,
        usage=EngineUsage(),
        trace=Trace(candidates=()),
        seed=0,
    )


@dataclass(frozen=True)
class Group:
    index: int
    seed: int  # the group's seed, as a request's: it draws the design and each comparison's seed
    qualities: tuple[float, ...]
    reference: float

    @staticmethod
    def draw(seed: int, index: int, n: int, quality_sd: float) -> Group:
        rng = random.Random(f"group:{seed}:{n}:{index}")
        group_seed = rng.randrange(2**31)
        qualities = tuple(rng.gauss(0.0, quality_sd) for _ in range(n))
        return Group(index, group_seed, qualities, rng.gauss(0.0, quality_sd))


def judge_comparison(
    comp: Comparison, group: Group, debias: Debias, judge: SyntheticJudge, seed: int
) -> Debiased:
    """As the service's ``_comparison``: both orders with swap, else the order of the seed's
    coin; the answer in (a, b) numbering."""
    q = group.qualities
    qa, qb = q[comp.a], group.reference if comp.b is None else q[comp.b]
    if judge.pair_noise:
        qa += random.Random(f"{seed}:{group.seed}:{comp.seed}:pair").gauss(0.0, judge.pair_noise)

    def run(first: str, q_first: float, q_second: float) -> Judgment:
        rng = random.Random(f"{seed}:{group.seed}:{comp.seed}:{first}")
        return judge.judge(q_first, q_second, rng)

    if debias == "swap":
        return both_orders(run("a", qa, qb), run("b", qb, qa))
    if comp.a_first:
        return single_order(run("a", qa, qb))
    return flipped(single_order(run("b", qb, qa)))


def play(
    strategy: str, group: Group, debias: Debias, judge: SyntheticJudge, seed: int
) -> tuple[GroupDesign, list[Result]]:
    texts = [f"completion {i}" for i in range(len(group.qualities))]
    d = design(strategy, texts, seed=group.seed)  # type: ignore[arg-type]
    judged: list[Result] = []
    while comparisons := d.next_round(judged):
        judged += [(c, judge_comparison(c, group, debias, judge, seed)) for c in comparisons]
    return d, judged


def survival_blend(d: GroupDesign, judged: Sequence[Result]) -> list[float | None]:
    shares = win_shares(bradley_terry(judged))
    survived = d.rounds_survived(judged)
    return [
        (survived[i] / d.max_rounds + shares[i]) / 2 if i in shares else None
        for i in range(len(d.completions))
    ]


def kendall_tau_b(x: Sequence[float], y: Sequence[float]) -> float:
    concordant = discordant = ties_x = ties_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = x[i] - x[j], y[i] - y[j]
            if dx == 0 and dy == 0:
                continue
            if dx == 0:
                ties_x += 1
            elif dy == 0:
                ties_y += 1
            elif dx * dy > 0:
                concordant += 1
            else:
                discordant += 1
    denominator = math.sqrt((concordant + discordant + ties_x) * (concordant + discordant + ties_y))
    return (concordant - discordant) / denominator if denominator else 0.0


def top1(rewards: Sequence[float], qualities: Sequence[float]) -> float:
    best = max(range(len(qualities)), key=qualities.__getitem__)
    high = max(rewards)
    tied = [i for i, r in enumerate(rewards) if r == high]
    return 1 / len(tied) if best in tied else 0.0


Key = tuple[int, float, str, str]  # size, position bias, strategy (or the variant), debias


@dataclass
class Cell:
    """Per group, in the same order for every cell (the same drawn groups): paired."""

    judgments: list[int] = field(default_factory=list)
    taus: list[float] = field(default_factory=list)
    tops: list[float] = field(default_factory=list)


def _mean_se(values: Sequence[float]) -> tuple[float, float]:
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0
    return statistics.fmean(values), se


def simulate(
    sizes: Sequence[int],
    biases: Sequence[float],
    groups: int,
    noise: float = 0.5,
    votes: int = 8,
    no_verdict: float = 0.0,
    pair_noise: float = 0.0,
    quality_sd: float = 1.0,
    seed: int = 0,
    progress: Callable[[str], None] | None = None,
) -> dict[Key, Cell]:
    """Per (size, position bias, strategy, debias), every group's tau, top-1 and judgments."""
    cells: dict[Key, Cell] = {}
    for n in sizes:
        drawn = [Group.draw(seed, g, n, quality_sd) for g in range(groups)]
        for bias in biases:
            judge = SyntheticJudge(bias, noise, votes, no_verdict, pair_noise)
            for strategy in STRATEGIES:
                for debias in DEBIAS:
                    started = time.monotonic()
                    for group in drawn:
                        d, judged = play(strategy, group, debias, judge, seed)
                        variants: dict[str, list[float | None]] = {
                            strategy: [r.reward for r in d.rewards(judged)]
                        }
                        if strategy == "knockout":
                            variants[KNOCKOUT_SURVIVAL] = survival_blend(d, judged)
                        for name, rewards in variants.items():
                            numbers = [NO_VERDICT_REWARD if r is None else r for r in rewards]
                            cell = cells.setdefault((n, bias, name, debias), Cell())
                            cell.judgments.append(len(judged) * (2 if debias == "swap" else 1))
                            cell.taus.append(kendall_tau_b(numbers, group.qualities))
                            cell.tops.append(top1(numbers, group.qualities))
                    if progress:
                        seconds = time.monotonic() - started
                        progress(f"n={n} bias={bias} {strategy} {debias}: {seconds:.1f} s")
    return cells


def rows_of(cells: dict[Key, Cell]) -> list[dict[str, Any]]:
    rows = []
    for (n, bias, strategy, debias), cell in cells.items():
        tau, tau_se = _mean_se(cell.taus)
        best, best_se = _mean_se(cell.tops)
        rows.append(
            {
                "n": n,
                "strategy": strategy,
                "debias": debias,
                "position_bias": bias,
                "groups": len(cell.taus),
                "judgments": statistics.fmean(cell.judgments),
                "tau": tau,
                "tau_se": tau_se,
                "top1": best,
                "top1_se": best_se,
            }
        )
    return rows


def paired_gain(cells: dict[Key, Cell], better: Key, base: Key) -> tuple[float, float]:
    """Mean tau of ``better`` minus ``base`` over the same groups, with its standard error."""
    diffs = [x - y for x, y in zip(cells[better].taus, cells[base].taus, strict=True)]
    return _mean_se(diffs)


# --- reports ---------------------------------------------------------------------------------


def count_table(sizes: Sequence[int] = SIZES) -> str:
    """Judgments per group of N distinct completions, from the designs themselves."""
    head = "| strategy | " + " | ".join(f"N={n} none | N={n} swap" for n in sizes) + " |"
    lines = [head, "|---|" + "---:|" * (2 * len(sizes))]
    for strategy in STRATEGIES:
        cells = [str(judgments(strategy, n, d)) for n in sizes for d in DEBIAS]
        lines.append(f"| `{strategy}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _cost(cells: dict[Key, Cell], key: Key) -> float:
    return statistics.fmean(cells[key].judgments)


def headline(cells: dict[Key, Cell]) -> dict[str, list[dict[str, Any]]]:
    """Per size and bias:

    - ``quarter_budget``: every configuration (strategy, debias) at no more than a quarter of
      round robin's judgments with swap, with its tau gap to it (paired over the groups);
    - ``swap_gain``: per strategy, tau with swap minus tau without (at twice the judgments);
    - ``equal_budget``: per strategy with swap, tau minus that of the best configuration
      without swap that takes no more judgments (swap pays where this is above 0).
    """
    out: dict[str, list[dict[str, Any]]] = {
        "quarter_budget": [],
        "swap_gain": [],
        "equal_budget": [],
    }
    names = (*STRATEGIES, KNOCKOUT_SURVIVAL)
    for n, bias in sorted({(k[0], k[1]) for k in cells}):
        rr: Key = (n, bias, "round_robin", "swap")
        for strategy in STRATEGIES:
            for debias in DEBIAS:
                key: Key = (n, bias, strategy, debias)
                if _cost(cells, key) <= _cost(cells, rr) / 4:
                    gap, se = paired_gain(cells, rr, key)
                    out["quarter_budget"].append(
                        {
                            "n": n,
                            "position_bias": bias,
                            "strategy": strategy,
                            "debias": debias,
                            "judgments": _cost(cells, key),
                            "round_robin_swap_judgments": _cost(cells, rr),
                            "tau_gap": gap,
                            "se": se,
                        }
                    )
        for name in names:
            swap: Key = (n, bias, name, "swap")
            gain, se = paired_gain(cells, swap, (n, bias, name, "none"))
            out["swap_gain"].append(
                {"n": n, "position_bias": bias, "strategy": name, "tau_gain": gain, "se": se}
            )
            cheaper = [
                (n, bias, s, "none")
                for s in names
                if _cost(cells, (n, bias, s, "none")) <= _cost(cells, swap)
            ]
            if cheaper:
                best = max(cheaper, key=lambda k: statistics.fmean(cells[k].taus))
                gain, se = paired_gain(cells, swap, best)
                out["equal_budget"].append(
                    {
                        "n": n,
                        "position_bias": bias,
                        "strategy": name,
                        "judgments": _cost(cells, swap),
                        "best_none": best[2],
                        "best_none_judgments": _cost(cells, best),
                        "tau_gain": gain,
                        "se": se,
                    }
                )
    return out


def markdown(cells: dict[Key, Cell], params: dict[str, Any], command: str = COMMAND) -> str:
    rows = rows_of(cells)
    biases = sorted({r["position_bias"] for r in rows})
    sizes = sorted({r["n"] for r in rows})
    lines = [
        "# Group strategies on a synthetic judge",
        "",
        f"`{command}`",
        "",
        "Parameters: " + ", ".join(f"{k} = {v}" for k, v in params.items()) + ". "
        "Kendall tau-b of the rewards against the latent qualities and top-1 accuracy, mean over "
        "the groups (± one standard error); judgments per group. The judge and the metrics are "
        "described in `studies/group_sim.py`; `knockout+survival` is not a strategy of the "
        "service (see there).",
    ]
    by_key = {(r["n"], r["position_bias"], r["strategy"], r["debias"]): r for r in rows}
    for n in sizes:
        lines += ["", f"## N = {n}", ""]
        head = "| strategy | debias | judgments | "
        head += " | ".join(f"tau, bias {b:g}" for b in biases) + " | "
        head += " | ".join(f"top-1, bias {b:g}" for b in biases) + " |"
        lines += [head, "|---|---|---:|" + "---:|" * (2 * len(biases))]
        for strategy in (*STRATEGIES, KNOCKOUT_SURVIVAL):
            for debias in DEBIAS:
                found = [by_key[(n, b, strategy, debias)] for b in biases]
                taus = [f"{c['tau']:.3f} ± {c['tau_se']:.3f}" for c in found]
                tops = [f"{c['top1']:.3f}" for c in found]
                lines.append(
                    f"| {strategy} | {debias} | {found[0]['judgments']:g} | "
                    + " | ".join(taus + tops)
                    + " |"
                )
    heads = headline(cells)
    lines += [
        "",
        "## Swap at an equal budget",
        "",
        "Tau of each strategy with swap minus that of the best configuration without swap that "
        "takes no more judgments (named), paired over the same groups (± one standard error).",
    ]
    for n in sizes:
        lines += ["", f"N = {n}:", ""]
        lines += ["| with swap | " + " | ".join(f"bias {b:g}" for b in biases) + " |"]
        lines += ["|---|" + "---|" * len(biases)]
        for strategy in (*STRATEGIES, KNOCKOUT_SURVIVAL):
            entries = {
                e["position_bias"]: e
                for e in heads["equal_budget"]
                if e["n"] == n and e["strategy"] == strategy
            }
            if not entries:
                continue
            cells_ = [
                f"{e['tau_gain']:+.3f} ± {e['se']:.3f} ({e['best_none']})"
                for e in (entries[b] for b in biases)
            ]
            lines.append(f"| {strategy} | " + " | ".join(cells_) + " |")
    lines += ["", "## Judgments per group (from the designs)", "", count_table(), ""]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--sizes", type=int, nargs="+", default=list(SIZES))
    p.add_argument("--biases", type=float, nargs="+", default=[0.0, 0.25, 0.5, 1.0, 2.0])
    p.add_argument("--groups", type=int, default=1000, help="seeded groups per cell")
    p.add_argument("--noise", type=float, default=0.5, help="sd of the per-judgment logit noise")
    p.add_argument("--votes", type=int, default=8)
    p.add_argument("--no-verdict", type=float, default=0.0, help="probability of no verdict")
    p.add_argument(
        "--pair-noise", type=float, default=0.0, help="sd of a misjudgment shared by both orders"
    )
    p.add_argument("--quality-sd", type=float, default=1.0)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--out", type=Path, help="folder for group_sim.json and group_sim.md")
    args = p.parse_args(argv)
    command = " ".join([COMMAND, *(sys.argv[1:] if argv is None else argv)])
    params = {
        "groups": args.groups,
        "noise": args.noise,
        "votes": args.votes,
        "no_verdict": args.no_verdict,
        "pair_noise": args.pair_noise,
        "quality_sd": args.quality_sd,
        "seed": args.seed,
    }
    started = time.monotonic()
    cells = simulate(
        args.sizes,
        args.biases,
        progress=lambda line: print(line, file=sys.stderr, flush=True),
        **params,
    )
    report = {
        "command": command,
        "params": {**params, "sizes": args.sizes, "biases": args.biases},
        "seconds": round(time.monotonic() - started, 1),
        "rows": rows_of(cells),
        "headline": headline(cells),
        "judgment_counts": {
            s: {str(n): {d: judgments(s, n, d) for d in DEBIAS} for n in SIZES} for s in STRATEGIES
        },
    }
    text = markdown(cells, params, command)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "group_sim.json").write_text(json.dumps(report, indent=1) + "\n")
        (args.out / "group_sim.md").write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
