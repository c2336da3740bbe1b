"""The policy run on the service's rewards (docs/rlhf.md, "A policy trained on the service"): its
tables rendered from the saved records under docs/records/policy-grpo/ (the trainer's
metrics.jsonl, the held-out measure of examples/policy_grpo.py, the judge's /metrics after
training) and its curves drawn from metrics.jsonl. tests/unit/test_policy_results.py fails when
the page no longer holds the tables.

    .venv/bin/python -m scripts.policy_results [--write] [--plot]
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path
from typing import Any

from loadtests.common.metrics import parse_metrics
from scripts.generated import replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORD = ROOT / "docs" / "records" / "policy-grpo"
PAGE = ROOT / "docs" / "rlhf.md"
START, END = "<!-- policy-run: start -->", "<!-- policy-run: end -->"
WINDOW = 10  # steps per row of the per-step table
REWARD, EXACT, NON_ANSWER = (
    "rewards/reflectrm/mean",
    "rewards/exact_match_reward/mean",
    "rewards/non_answer_reward/mean",
)
LENGTH = "completions/mean_length"


def steps(record: Path = RECORD) -> list[dict[str, Any]]:
    """The trainer's logged steps, the last row of each step kept (a resumed run logs again)."""
    rows: dict[int, dict[str, Any]] = {}
    for line in (record / "metrics.jsonl").read_text().splitlines():
        row = json.loads(line)
        rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def _pct(x: float | None) -> str:
    return "–" if x is None else f"{100 * x:.1f}%"


def measure_table(measure: dict[str, Any]) -> list[str]:
    paired = measure["paired"]
    lines = [
        table_row(
            (
                "policy",
                "exact match",
                "non-answers",
                "mean tokens",
                "mean reward",
                "judge AUC (exact match)",
            )
        ),
        "|---|---|---|---|---|---|",
    ]
    for name, label in (("base", "SmolLM2-135M-Instruct (the base)"), ("trained", "after GRPO")):
        m = measure[name]
        reward = "–" if m["mean_reward"] is None else f"{m['mean_reward']:.4f}"
        auc = "–" if m["judge_auc"] is None else f"{m['judge_auc']:.2f}"
        lines.append(
            table_row(
                (
                    label,
                    _pct(m["exact_match"]),
                    _pct(m["non_answer"]),
                    f"{m['mean_tokens']:.1f}",
                    reward,
                    auc,
                )
            )
        )
    lines.append("")
    lines.append(
        f"Paired difference in exact match (after - before), {paired['n']} held-out questions: "
        f"**{100 * paired['difference']:+.1f} points [{100 * paired['low']:+.1f}, "
        f"{100 * paired['high']:+.1f}]** (95%, normal interval of the per-question differences)."
    )
    return lines


def step_table(rows: list[dict[str, Any]]) -> list[str]:
    lines = [
        table_row(
            (
                "steps",
                "reward (service)",
                "exact match",
                "non-answers",
                "mean tokens",
                "seconds a step",
            )
        ),
        "|---|---|---|---|---|---|",
    ]
    for start in range(0, len(rows), WINDOW):
        part = rows[start : start + WINDOW]

        def mean(key: str, part: list[dict[str, Any]] = part) -> float:
            return statistics.fmean(float(r[key]) for r in part)

        lines.append(
            table_row(
                (
                    f"{part[0]['step']}-{part[-1]['step']}",
                    f"{mean(REWARD):.4f}",
                    _pct(mean(EXACT)),
                    _pct(mean(NON_ANSWER)),
                    f"{mean(LENGTH):.1f}",
                    f"{mean('step_time'):.0f}",
                )
            )
        )
    return lines


def engine_work(record: Path, per_step: int, last_step: int) -> str:
    """Engine requests and prompt tokens per reward on the judge serving the run after its
    restart (``run.json``: the step after which it was restarted on the current code): its
    /metrics at the end less its /metrics just after the restart."""
    resumed = json.loads((record / "run.json").read_text())["judge_restarted_after_step"]
    rewards = (last_step - resumed) * per_step

    def totals(name: str) -> dict[str, float]:
        return parse_metrics((record / name).read_text(), by="name")

    end, start = totals("judge-metrics-after-training.txt"), totals("judge-metrics-at-resume.txt")

    def per_reward(metric: str) -> float:
        name = f"reflectrm_{metric}_total"
        return (end.get(name, 0.0) - start.get(name, 0.0)) / rewards

    cached = per_reward("cached_prompt_tokens")
    computed = per_reward("prompt_tokens") - cached
    return (
        f"The judge's engine work for the {rewards} rewards of steps {resumed + 1}-{last_step} "
        "(its /metrics at the end less at the restart, `judge-metrics-*.txt`): "
        f"{per_reward('engine_requests'):.2f} engine requests, {computed:.0f} computed and "
        f"{cached:.0f} cached prompt tokens per reward."
    )


def render(record: Path = RECORD) -> str:
    rows = steps(record)
    settings = json.loads((record / "settings.json").read_text())
    per_step = settings["prompts_per_step"] * settings["group_size"]
    measure = json.loads((record / "measure-heldout.json").read_text())
    out = [
        f"Held-out questions ({measure['questions']}, never trained on, measured once), greedy "
        "completions of each policy:",
        "",
        *measure_table(measure),
        "",
        f"Per {WINDOW} steps of training (each step {settings['prompts_per_step']} questions x "
        f"{settings['group_size']} sampled completions; exact match and non-answers are of the "
        "step's own completions, logged with weight 0):",
        "",
        *step_table(rows),
        "",
        engine_work(record, per_step, rows[-1]["step"]),
    ]
    return "\n".join(out) + "\n"


def plot(record: Path = RECORD) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = steps(record)
    x = [r["step"] for r in rows]

    def smooth(key: str, k: int = 5) -> list[float]:
        values = [float(r[key]) for r in rows]
        return [statistics.fmean(values[max(0, i - k + 1) : i + 1]) for i in range(len(values))]

    fig, axes = plt.subplots(3, 1, figsize=(7, 8), sharex=True)
    axes[0].plot(x, [r[REWARD] for r in rows], ".", alpha=0.4, label="step")
    axes[0].plot(x, smooth(REWARD), "-", label="mean of 5 steps")
    axes[0].set_ylabel("reward (service)")
    axes[0].legend()
    axes[1].plot(x, smooth(EXACT), "-", label="exact match")
    axes[1].plot(x, smooth(NON_ANSWER), "-", label="non-answers")
    axes[1].set_ylabel("share of completions")
    axes[1].legend()
    axes[2].plot(x, smooth(LENGTH), "-")
    axes[2].set_ylabel("mean completion tokens")
    axes[2].set_xlabel("GRPO step")
    fig.suptitle("A policy trained on the service's rewards (means of 5 steps)")
    fig.tight_layout()
    path = record / "reward-curve.png"
    fig.savefig(path, dpi=80)
    return path


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="replace the page's tables")
    parser.add_argument("--plot", action="store_true", help="redraw reward-curve.png")
    args = parser.parse_args()
    text = render()
    if args.write:
        replace_between(PAGE, START, END, text)
    if args.plot:
        print(plot())
    print(text)


if __name__ == "__main__":
    main()
