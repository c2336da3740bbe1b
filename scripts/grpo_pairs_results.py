"""The GRPO rerun on pairs whose length and position predict nothing (docs/training.md, "The
rerun on those pairs"): its tables rendered from the saved `reflectrm train check` records under
docs/records/grpo-pairs/checks/, and its reward curve from the run's metrics.jsonl.
tests/unit/test_grpo_pairs_results.py fails when the page no longer holds the tables.

    .venv/bin/python -m scripts.grpo_pairs_results --strata   # once, from the run's pair files
    .venv/bin/python -m scripts.grpo_pairs_results [--write] [--plot]

Every figure pools both orders: a pair's correctness is the mean of its two orders' (a missing
verdict is wrong). Length-balanced accuracy is the mean of the accuracies on pairs whose chosen
reply is longer and on those where it is shorter (``evaluation.length``); the differences between
two checkpoints are paired (both scored on the same bootstrap draws of pairs).

``--strata`` writes strata.json beside the checks: per set, each pair's group (kind, subset or
source) and whether its chosen reply is the longer, in characters; no dataset text.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from reflectrm_harness.datasets import read_rows
from reflectrm_harness.evaluation.length import (
    chosen_longer,
    length_balanced,
    paired_length_balanced,
)
from scripts.generated import page_markers, replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "grpo-pairs"
CHECKS = RECORD / "checks"
STRATA = RECORD / "strata.json"
PAGE = ROOT / "docs" / "training.md"
DATA = ROOT / "harness" / "reflectrm_harness" / "evaluation" / "data"
# (set, check record suffix, pairs file, the field naming a pair's group, what the page calls it)
SETS = (
    (
        "counterfactuals",
        "",
        "runs/grpo-pairs/heldout-pairs.jsonl",
        "subset",
        "held-out counterfactuals",
    ),
    ("trap", "-trap", str(DATA / "trap.jsonl"), "subset", "non-answer trap"),
    ("correctness", "-correctness", str(DATA / "correctness.jsonl"), "subset", "correctness set"),
)
MODELS = (
    ("base", "SmolLM2-135M-Instruct (the base)"),
    ("warmup", "after the format warm-up"),
    ("grpo", "after warm-up and GRPO (exported)"),
)
TABLES = ("results", "by-group", "gain", "reward")
PREFIX = "grpo-pairs"


def strata(root: Path = ROOT) -> dict[str, dict[str, list[Any]]]:
    """Per set: pair id -> [group, chosen reply longer (None: same length)]."""
    out: dict[str, dict[str, list[Any]]] = {}
    for name, _, pairs, field, _ in SETS:
        out[name] = {
            str(r["id"]): [r.get(field), chosen_longer(r["chosen"], r["rejected"])]
            for _, r in read_rows(root / pairs)
        }
    return out


def correctness(record: Mapping[str, Any]) -> dict[str, float]:
    """Per pair id, the mean of its orders' correctness (a missing verdict is wrong)."""
    right: dict[str, list[bool]] = {}
    for v in record["verdicts"]:
        right.setdefault(str(v["id"]), []).append(v["verdict"] == v["chosen_at"])
    for pid, orders in right.items():
        if len(orders) != 2:
            raise ValueError(f"pair {pid}: {len(orders)} verdicts, not one per order")
    return {pid: sum(orders) / 2 for pid, orders in right.items()}


def _load(model: str, suffix: str) -> dict[str, Any] | None:
    path = CHECKS / f"{model}-enforced{suffix}.json"
    return json.loads(path.read_text()) if path.is_file() else None


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}"


def _lb(fig: Mapping[str, Any]) -> str:
    if "length_balanced" not in fig:
        return "–"
    low, high = fig["length_balanced_ci"]
    return f"{100 * fig['length_balanced']:.1f} [{100 * low:.1f}, {100 * high:.1f}]"


def _delta(fig: Mapping[str, Any]) -> str:
    if "delta" not in fig:
        return "–"
    low, high = fig["ci95"]
    return f"{100 * fig['delta']:+.1f} [{100 * low:+.1f}, {100 * high:+.1f}]"


def _scored(
    record: Mapping[str, Any], pairs: Mapping[str, list[Any]], group: str | None = None
) -> tuple[list[str], list[float], list[bool | None]]:
    per_pair = correctness(record)
    ids = sorted(i for i in per_pair if group is None or pairs[i][0] == group)
    return ids, [per_pair[i] for i in ids], [pairs[i][1] for i in ids]


def results_table(table: Mapping[str, Mapping[str, list[Any]]]) -> str:
    head = (
        "| set | model | pairs | accuracy, both orders | length-balanced [95% CI] "
        "| chosen longer | chosen shorter | names Response 1, % | record |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---|"]
    for name, suffix, _, _, title in SETS:
        for model, label in MODELS:
            record = _load(model, suffix)
            if record is None:
                continue
            _, correct, longer = _scored(record, table[name])
            fig = length_balanced(correct, longer)
            lon, sho = fig["better_longer"], fig["better_shorter"]
            path = f"records/grpo-pairs/checks/{model}-enforced{suffix}.json"
            lines.append(
                table_row(
                    [
                        title,
                        label,
                        str(fig["pairs"]),
                        _pct(fig["accuracy"]),
                        _lb(fig),
                        f"{_pct(lon['accuracy'])} ({lon['pairs']})",
                        f"{_pct(sho['accuracy'])} ({sho['pairs']})",
                        _pct(record["first_position_picks"] / max(record["parsed"], 1)),
                        f"[record]({path})",
                    ]
                )
            )
    return "\n".join(lines) + "\n"


def _groups(pairs: Mapping[str, list[Any]]) -> list[str]:
    return sorted({str(g) for g, _ in pairs.values()})


def group_table(table: Mapping[str, Mapping[str, list[Any]]]) -> str:
    """Accuracy, both orders, per group of each set (kind, subset or source), per model."""
    head = (
        "| set | group | pairs judged (chosen longer / shorter) | "
        + " | ".join(label for _, label in MODELS)
        + " |"
    )
    lines = [head, "|---|---|---:|" + "---:|" * len(MODELS)]
    for name, suffix, _, _, title in SETS:
        records = {model: _load(model, suffix) for model, _ in MODELS}
        if not any(records.values()):
            continue
        judged = correctness(next(r for r in records.values() if r))
        for group in _groups(table[name]):
            members = [v[1] for i, v in table[name].items() if v[0] == group and i in judged]
            cells = [
                title,
                f"`{group}`",
                f"{len(members)} ({sum(m is True for m in members)} / "
                f"{sum(m is False for m in members)})",
            ]
            for model, _ in MODELS:
                record = records[model]
                if record is None:
                    cells.append("–")
                    continue
                _, correct, longer = _scored(record, table[name], group)
                fig = length_balanced(correct, longer)
                acc = _pct(fig["accuracy"])
                cells.append(f"{acc}; lb {_lb(fig)}" if "length_balanced" in fig else acc)
            lines.append(table_row(cells))
    return "\n".join(lines) + "\n"


def gain(
    table: Mapping[str, Mapping[str, list[Any]]],
    name: str,
    suffix: str,
    before: str,
    after: str,
    group: str | None = None,
) -> dict[str, Any] | None:
    """``after``'s length-balanced accuracy minus ``before``'s on one set (or one group of it),
    paired."""
    a, b = _load(before, suffix), _load(after, suffix)
    if a is None or b is None:
        return None
    ids_a, correct_a, longer = _scored(a, table[name], group)
    ids_b, correct_b, _ = _scored(b, table[name], group)
    if ids_a != ids_b:
        raise ValueError(f"{name}: {before} and {after} judged different pairs")
    return paired_length_balanced(correct_a, correct_b, longer)


def gain_table(table: Mapping[str, Mapping[str, list[Any]]]) -> str:
    head = (
        "| set | group | GRPO minus warm-up, length-balanced [paired 95% CI] "
        "| GRPO minus base | warm-up minus base |"
    )
    lines = [head, "|---|---|---:|---:|---:|"]
    for name, suffix, _, _, title in SETS:
        for group in (None, *(_groups(table[name]) if name == "counterfactuals" else ())):
            figs = [
                gain(table, name, suffix, before, after, group)
                for before, after in (("warmup", "grpo"), ("base", "grpo"), ("base", "warmup"))
            ]
            if not any(figs):
                continue
            cells = [title, f"`{group}`" if group else "all"]
            cells += [_delta(f) if f else "–" for f in figs]
            lines.append(table_row(cells))
    return "\n".join(lines) + "\n"


REWARD_KEYS = (
    ("reward", "all completions"),
    ("reward_by/right_1", "right answer Response 1"),
    ("reward_by/right_2", "right answer Response 2"),
    ("reward_by/chosen_longer", "chosen reply longer"),
    ("reward_by/chosen_shorter", "chosen reply shorter"),
    ("frac_reward_zero_std", "groups whose completions all scored alike"),
)


def reward_table(steps: int = 20, metrics: Path = RECORD / "metrics.jsonl") -> str:
    """The run's mean reward per stratum over its first and its last ``steps`` steps (each step's
    value as metrics.jsonl logged it; a stratum absent from a step is left out of its mean)."""
    rows = [json.loads(line) for line in metrics.read_text().splitlines()]
    rows = [r for r in rows if "rewards/verdict_reward/mean" in r]

    def mean(key: str, part: list[dict[str, Any]]) -> str:
        values = [r[key] for r in part if r.get(key) is not None]
        return f"{sum(values) / len(values):.2f} ({len(values)})" if values else "–"

    lines = [
        f"| mean over steps (steps with the stratum) | first {steps} steps | last {steps} steps |",
        "|---|---:|---:|",
    ]
    for key, label in REWARD_KEYS:
        lines.append(
            table_row([f"{label} (`{key}`)", mean(key, rows[:steps]), mean(key, rows[-steps:])])
        )
    return "\n".join(lines) + "\n"


def render() -> dict[str, str]:
    table = json.loads(STRATA.read_text())
    return {
        "results": results_table(table),
        "by-group": group_table(table),
        "gain": gain_table(table),
        "reward": reward_table(),
    }


def plot(out: Path = RECORD / "reward-curve.png", window: int = 10) -> None:
    """The verdict reward per step, its running mean, and the running means by stratum (the
    chosen reply in position 1 or 2; longer or shorter) from the run's metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from scripts.grpo_results import running_mean

    rows = [json.loads(line) for line in (RECORD / "metrics.jsonl").read_text().splitlines()]
    rows = [r for r in rows if "rewards/verdict_reward/mean" in r]
    steps = [r["step"] for r in rows]
    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    reward = [r["rewards/verdict_reward/mean"] for r in rows]
    ax.plot(steps, reward, ".", color="C0", alpha=0.35, markersize=3)
    ax.plot(steps, running_mean(reward, window), "-", color="C0", label="all")
    for key, colour in (
        ("reward_by/right_1", "C1"),
        ("reward_by/right_2", "C2"),
        ("reward_by/chosen_longer", "C3"),
        ("reward_by/chosen_shorter", "C4"),
    ):
        have = [(r["step"], r[key]) for r in rows if r.get(key) is not None]
        if have:
            xs, ys = zip(*have, strict=True)
            ax.plot(xs, running_mean(list(ys), window), "--", color=colour, label=key[10:])
    ax.set_xlabel("GRPO step (2 prompts x 4 completions)")
    ax.set_ylabel(f"verdict reward, mean of {window} steps")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=7, ncol=3)
    ax.set_title("GRPO on length- and position-balanced pairs: SmolLM2-135M, LoRA", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--strata", action="store_true", help="write strata.json from the pair files")
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    if args.strata:
        STRATA.write_text(json.dumps(strata(), indent=1, sort_keys=True) + "\n")
    if args.plot:
        plot()
    tables = render()
    for key in TABLES:
        if args.write:
            replace_between(PAGE, *page_markers(PREFIX, key), tables[key])
        else:
            print(page_markers(PREFIX, key)[0], tables[key], sep="\n")


if __name__ == "__main__":
    main()
