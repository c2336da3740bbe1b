"""docs/rlhf.md's figure tables, each rendered from its saved run record: the OpenRLHF-shaped
cohort run (docs/records/cohort-load-openrlhf/), a cohort of 8 on two judges
(docs/records/cohort-of-8-rewards/), the group-design simulation
(docs/records/group-designs-synthetic-judge/) and the engine work per reward of the pooled
RM-Bench group run (docs/records/group-designs-rmbench/). Each table sits between the page's
markers ``<!-- rlhf-<name>: start -->`` and ``<!-- rlhf-<name>: end -->``;
tests/unit/test_rlhf_tables.py fails when one no longer matches its record.

    .venv/bin/python -m scripts.rlhf_tables [--write]
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

from scripts.generated import page_markers, table_row, write_tables

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records"
PAGE = ROOT / "docs" / "rlhf.md"
COHORT_RUN = RECORDS / "cohort-load-openrlhf" / "cohort_run.json"
COHORT_OF_8 = RECORDS / "cohort-of-8-rewards"
COHORT_MODELS = ("default", "qwen05b")
SIMULATION = RECORDS / "group-designs-synthetic-judge" / "group_sim.json"
SIM_STRATEGIES = ("reference", "pivot", "round_robin", "knockout", "circular", "swiss")
SIM_SIZES = (8, 16)
SIM_BIASES = (0.0, 1.0, 2.0)
GROUPS = RECORDS / "group-designs-rmbench" / "rmbench-single" / "group-report.json"
COMPLETIONS = 6  # an RM-Bench group: 3 chosen and 3 rejected styles, each gets a reward
LONGEST = 90  # a rollout's text is cut to this many characters


def markers(name: str) -> tuple[str, str]:
    return page_markers("rlhf", name)


def _load(path: Path) -> Any:
    return json.loads(path.read_text())


def _table(head: list[str], rules: list[str], rows: list[list[str]]) -> str:
    return "\n".join(table_row(r) for r in [head, rules, *rows]) + "\n"


def cohort_run(path: Path = COHORT_RUN) -> str:
    """The cohort run's checks, cohort waits, call times and engine work per reward."""
    r = _load(path)
    checks, wait, replies = (
        r["checks"],
        r["cohort_wait_from_metrics"],
        r["cohort_wait_from_replies"],
    )
    calls, per = r["call_seconds"], r["per_reward"]
    rows = [
        ["calls; answered 200", f"{len(r['calls'])}; {r['statuses'].get('200', 0)}"],
        [
            "answers from whole cohorts (expected)",
            f"{checks['whole_cohort_answers']} ({checks['expected_whole']})",
        ],
        [
            "answers from the cut cohort, flagged `judge_cohort_cut` (expected)",
            f"{checks['cut_answers']} ({checks['expected_cut']})",
        ],
        [
            "cohorts closed: full, cut",
            f"{r['cohorts_closed']['full']:.0f}, {r['cohorts_closed']['cut']:.0f}",
        ],
        [
            "cohort wait per call, mean (from `reflectrm_cohort_wait_seconds`)",
            f"{wait['mean_s']:.2f} s",
        ],
        [
            "cohort wait per call, median / max (from the replies)",
            f"{replies['p50_s']:.2f} / {replies['max_s']:.1f} s",
        ],
        [
            "call time, median / max (wait + judging)",
            f"{calls['p50_s']:.0f} / {calls['max_s']:.0f} s",
        ],
        ["judgments per reward", f"{per['judgments']:.2f}"],
        ["engine requests per reward", f"{per['engine_requests']:.2f}"],
        [
            "generated / prompt tokens per reward",
            f"{per['generated_tokens']:,.0f} / {per['prompt_tokens']:,.0f}",
        ],
    ]
    return _table(["figure", "value"], ["---", "---:"], rows)


def _short(text: str) -> str:
    return text if len(text) <= LONGEST else text[: LONGEST - 4].rsplit(" ", 1)[0] + " ..."


def cohort_of_8(folder: Path = COHORT_OF_8) -> str:
    """Each rollout's reward from each judge (the highest in bold), then how well the rewards
    order the helpful rollouts above the unhelpful ones."""
    runs = {m: _load(folder / m / "cohort_example.json") for m in COHORT_MODELS}
    first = runs[COHORT_MODELS[0]]["rollouts"]
    rewards = {m: {x["response"]: x["reward"] for x in run["rollouts"]} for m, run in runs.items()}
    best = {m: max(v for v in r.values() if v is not None) for m, r in rewards.items()}

    def cell(m: str, text: str) -> str:
        value = rewards[m].get(text)
        if value is None:
            return "–"
        return f"**{value:.3f}**" if value == best[m] else f"{value:.3f}"

    last = COHORT_MODELS[-1]
    # helpful first, each side by the last judge's reward, highest first (ties as sent)
    order = sorted(
        first, key=lambda x: (not x["helpful"], -(rewards[last].get(x["response"]) or 0))
    )
    rows = [
        [
            _short(x["response"]),
            "yes" if x["helpful"] else "no",
            *(cell(m, x["response"]) for m in runs),
        ]
        for x in order
    ]
    rows.append(
        [
            "(helpful, unhelpful) pairs ordered right",
            "",
            *(f"**{100 * run['ranking']['pairs_ordered_right']:.1f}%**" for run in runs.values()),
        ]
    )
    rows.append(
        [
            "helpful rollouts above every unhelpful one",
            "",
            *(
                f"{run['ranking']['helpful_above_every_unhelpful']} of {run['ranking']['helpful']}"
                for run in runs.values()
            ),
        ]
    )
    head = ["rollout", "does what was asked", *(f"`{m}`" for m in runs)]
    return _table(head, ["---", ":---:", *(["---:"] * len(runs))], rows)


def simulation(path: Path = SIMULATION) -> str:
    """An excerpt of the simulation: per served strategy and debias, at N = 8 and 16, the
    judgments per group, Kendall's tau at three position biases and top-1 at bias 0."""
    found = _load(path)
    cells = {(r["n"], r["strategy"], r["debias"], r["position_bias"]): r for r in found["rows"]}
    designs = list(
        dict.fromkeys(
            (r["strategy"], r["debias"]) for r in found["rows"] if r["strategy"] in SIM_STRATEGIES
        )
    )
    rows = []
    for strategy, debias in designs:
        row = [f"`{strategy}`", debias]
        for n in SIM_SIZES:
            base = cells[(n, strategy, debias, 0.0)]
            taus = " / ".join(f"{cells[(n, strategy, debias, b)]['tau']:.3f}" for b in SIM_BIASES)
            row += [f"{base['judgments']:.0f}", taus, f"{base['top1']:.3f}"]
        rows.append(row)
    biases = " / ".join(f"{b:g}" for b in SIM_BIASES)
    head = ["strategy", "debias"]
    for n in SIM_SIZES:
        head += [f"N={n} judgments", f"N={n} tau, bias {biases}", f"N={n} top-1, bias 0"]
    return _table(head, ["---", "---"] + ["---:"] * (len(head) - 2), rows)


def engine_work(path: Path = GROUPS) -> str:
    """Each design's recorded engine work per group of the pooled run, and per reward (per
    group over its completions)."""
    rows = []
    for r in _load(path)["rows"].values():
        judgments = r["judgments"]["value"]
        rows.append(
            [
                f"`{r['strategy']}`",
                r["debias"],
                f"{judgments:.2f}",
                f"{judgments / COMPLETIONS:.2f}",
                f"{r['generated_tokens']['value'] / COMPLETIONS:,.0f}",
                f"{r['prompt_tokens']['value'] / COMPLETIONS:,.0f}",
            ]
        )
    head = [
        "strategy",
        "debias",
        "judgments per group",
        "judgments per reward",
        "generated tokens per reward",
        "prompt tokens per reward",
    ]
    return _table(head, ["---", "---"] + ["---:"] * 4, rows)


TABLES: dict[str, Callable[[], str]] = {
    "cohort-run": cohort_run,
    "cohort-of-8": cohort_of_8,
    "simulation": simulation,
    "engine-work": engine_work,
}


def main() -> None:
    write_tables(__doc__, PAGE, markers, TABLES)


if __name__ == "__main__":
    main()
