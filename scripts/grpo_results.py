"""The GRPO run on the CPU (docs/training.md, "GRPO shown to learn"): its table rendered from the
saved `reflectrm train check` records and its reward curve drawn from the run's metrics.jsonl,
both under docs/records/grpo-cpu/. tests/unit/test_grpo_results.py fails when the page no
longer holds the table.

    .venv/bin/python -m scripts.grpo_results [--write] [--plot]

``--write`` replaces the table between the page's markers; ``--plot`` redraws reward-curve.png.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from scripts.generated import replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "grpo-cpu"
PAGE = ROOT / "docs" / "training.md"
START, END = "<!-- grpo-cpu-results: start -->", "<!-- grpo-cpu-results: end -->"
# (row label, check records' folder under the record, their name) in the order the table shows
MODELS = (
    ("SmolLM2-135M-Instruct, untrained (the base)", "checks", "base"),
    ("after the format warm-up", "checks", "warmup"),
    ("after warm-up and GRPO (exported, served)", "checks", "grpo"),
    ("first GRPO run, on items that favoured Response 2", "first-run/checks", "grpo"),
)
KINDS = ("non_answer", "other_prompt")


def wilson(right: int, n: int) -> tuple[float, float]:
    """The 95% Wilson interval of right/n, in percent."""
    if n == 0:
        return (0.0, 0.0)
    z, p = 1.959964, right / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (100 * (centre - half), 100 * (centre + half))


def _cell(right: int, n: int) -> str:
    low, high = wilson(right, n)
    return f"{100 * right / n:.1f} [{low:.1f}, {high:.1f}]" if n else "–"


def _kind_of(pair_id: str) -> str:
    return pair_id.rsplit("/", 1)[-1]


def figures(record: dict[str, Any]) -> dict[str, Any]:
    """Per order, per kind and in both orders, from the record's verdicts."""
    verdicts = record["verdicts"]
    pairs = record["pairs"]
    right = {(v["id"], v["chosen_at"]) for v in verdicts if v["verdict"] == v["chosen_at"]}
    ids = sorted({v["id"] for v in verdicts})
    both = sum((i, 1) in right and (i, 2) in right for i in ids)
    kinds = {
        k: (sum(_kind_of(i) == k for i, _ in right), 2 * sum(_kind_of(i) == k for i in ids))
        for k in KINDS
    }
    return {
        "pairs": pairs,
        "first": sum(at == 1 for _, at in right),
        "second": sum(at == 2 for _, at in right),
        "both": both,
        "kinds": kinds,
        "parsed": record["parsed"],
        "judgments": record["judgments"],
        "names_1": record["first_position_picks"],
    }


def row(label: str, folder: str, name: str, enforced: bool) -> str | None:
    path = RECORD / folder / f"{name}{'-enforced' if enforced else ''}.json"
    if not path.is_file():
        return None
    f = figures(json.loads(path.read_text()))
    n = f["pairs"]
    trap_path = path.with_name(f"{path.stem}-trap.json")
    trap = figures(json.loads(trap_path.read_text())) if trap_path.is_file() else None
    cells = [
        label,
        "yes" if enforced else "no",
        _cell(f["first"] + f["second"], 2 * n),
        _cell(f["first"], n),
        _cell(f["second"], n),
        _cell(f["both"], n),
        *(_cell(*f["kinds"][k]) for k in KINDS),
        _cell(trap["first"] + trap["second"], 2 * trap["pairs"]) if trap else "–",
        f"{100 * f['parsed'] / f['judgments']:.1f}",
        f"{100 * f['names_1'] / max(f['parsed'], 1):.1f}",
        f"[record](records/grpo-cpu/{folder}/{path.name})",
    ]
    return table_row(cells)


def render() -> str:
    head = (
        "| model | format enforced | held-out, both orders [95% CI] | chosen shown first "
        "| chosen shown second | right in both orders | non-answer pairs | another prompt's "
        "reply | non-answer trap, both orders | parsed % | names Response 1, % of parsed "
        "| record |"
    )
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    for enforced in (True, False):
        lines += [r for r in (row(*model, enforced) for model in MODELS) if r]
    return "\n".join(lines) + "\n"


def write(page: Path = PAGE) -> None:
    replace_between(page, START, END, render())


def _rewards(path: Path) -> tuple[list[int], list[float]]:
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = [r for r in rows if "rewards/verdict_reward/mean" in r]
    return [r["step"] for r in rows], [r["rewards/verdict_reward/mean"] for r in rows]


def running_mean(values: list[float], window: int) -> list[float]:
    return [
        sum(values[max(0, i - window + 1) : i + 1]) / len(values[max(0, i - window + 1) : i + 1])
        for i in range(len(values))
    ]


def plot(out: Path = RECORD / "reward-curve.png", window: int = 10) -> None:
    """The verdict reward per step (mean over the step's 8 completions) and its running mean, of
    the run and of the first run, from their metrics.jsonl."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 3.6), dpi=120)
    runs = (
        (RECORD / "metrics.jsonl", "C0", "balanced items (the run)"),
        (RECORD / "first-run" / "metrics.jsonl", "C3", "first run: 75% of items said Response 2"),
    )
    for path, colour, label in runs:
        if not path.is_file():
            continue
        steps, reward = _rewards(path)
        ax.plot(steps, reward, ".", color=colour, alpha=0.35, markersize=3)
        ax.plot(steps, running_mean(reward, window), "-", color=colour, label=label)
    ax.set_xlabel("GRPO step (2 prompts x 4 completions)")
    ax.set_ylabel(f"verdict reward; line: mean of {window} steps")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right", fontsize=8)
    ax.set_title("GRPO on two CPU cores: SmolLM2-135M after the warm-up, LoRA", fontsize=9)
    fig.tight_layout()
    fig.savefig(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--write", action="store_true")
    ap.add_argument("--plot", action="store_true")
    args = ap.parse_args()
    if args.plot:
        plot()
    if args.write:
        write()
    else:
        print(render())


if __name__ == "__main__":
    main()
