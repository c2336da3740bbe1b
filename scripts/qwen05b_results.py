"""docs/training.md's table of the `qwen05b` judge beside `smollm2` on the real engine (the
trap, a held-out sample, RewardBench and RM-Bench chat samples; mode `single`, greedy, both
orders), rendered from the saved records under docs/records/judge-training/, never typed by
hand. tests/unit/test_qwen05b_results.py fails when the page no longer holds it.

    .venv/bin/python -m scripts.qwen05b_results [--write]

Where each row comes from: the `reflectrm eval` reports (report.json, the ``length`` block of
mode ``single``: pairs judged in both orders, a pair scoring the mean of its two orders) and,
for the held-out sample, `reflectrm eval vs-length` (vs-length.json, the per-source length
rule); the per-source, Chat / Chat Hard and normal / hard rows are `studies/judge_breakdown.py`
(breakdown.json, % right of the verdicts of each group). The row of the two sources the
`smollm2` judge never saw adds up two groups of breakdown-heldout: their right verdicts are the
groups' percentages (one decimal) times their verdicts, rounded to whole verdicts.

The same page's table of the two backbones' frozen-feature readouts (`reflectrm train
readouts`, docs/records/judge-training/backbones/readouts.json: for each backbone the layer and
penalty of its best length-balanced development figure, as the page says) is rendered here too.

With ``--write`` each table replaces the one between its markers in the page.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import Any

from scripts.generated import replace_between, table_row

ROOT = Path(__file__).resolve().parents[1]
RECORDS = ROOT / "docs" / "records" / "judge-training"
PAGE = ROOT / "docs" / "training.md"
START, END = "<!-- qwen05b-results: start -->", "<!-- qwen05b-results: end -->"
# The backbones' frozen-feature readouts (`reflectrm train readouts`), in a table of their own.
READOUTS = RECORDS / "backbones" / "readouts.json"
READOUTS_START = "<!-- backbone-readouts: start -->"
READOUTS_END = "<!-- backbone-readouts: end -->"
# (the readouts' name of a backbone's states, its column) and (group, row) in the table's order
BACKBONES = (
    ("states-smollm2", "SmolLM2-135M-Instruct"),
    ("states-qwen", "Qwen2.5-Coder-0.5B-Instruct"),
)
READOUT_ROWS = (
    ("dev", "development"),
    ("bench/rewardbench-chat", "RewardBench Chat"),
    ("bench/rewardbench-chat-hard", "RewardBench Chat Hard"),
    ("bench/rm-bench-normal", "RM-Bench normal"),
    ("bench/rm-bench-hard", "RM-Bench hard"),
    ("bench/rmb-helpfulness", "RMB helpfulness"),
)
MODE = "single"
# The trap's subsets in the order the table lists them, with their names there.
TRAP_SUBSETS = (
    ("refusal", "refusal"),
    ("dont_know", "don't-know"),
    ("evasion", "evasion"),
    ("one_word", "one-word"),
    ("off_topic", "off-topic"),
)
# The sources of the held-out sample the default judge's training pool never held.
NEW_SOURCES = ("alpaca_eval_lenbal_pairs", "gpt4llm_comparison_pairs")


def _read(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text())


@dataclass(frozen=True)
class Judge:
    """One judge's saved runs: folders under docs/records/judge-training/, and its name in the
    breakdowns."""

    header: str
    trap: str
    heldout: str
    rewardbench: str
    rmbench: str
    breakdown_name: str

    def length(self, folder: str, dataset: str) -> dict[str, Any]:
        return _read(RECORDS / folder / "report.json")["length"][MODE][dataset]

    @cached_property
    def trap_(self) -> dict[str, Any]:
        return self.length(self.trap, "trap")

    @cached_property
    def heldout_(self) -> dict[str, Any]:
        return self.length(self.heldout, "heldout")

    @cached_property
    def rule(self) -> dict[str, Any]:
        return _read(RECORDS / self.heldout / "vs-length.json")["rule"]

    @cached_property
    def rewardbench_(self) -> dict[str, Any]:
        return self.length(self.rewardbench, "rb-chat")

    @cached_property
    def rmbench_(self) -> dict[str, Any]:
        return self.length(self.rmbench, "rmbench-chat")

    def breakdown(self, name: str) -> dict[str, dict[str, Any]]:
        found = _read(RECORDS / "qwen05b" / name / "breakdown.json")
        return found["judges"][self.breakdown_name]


JUDGES = (
    Judge(
        "SmolLM2 `smollm2`",
        trap="trap/smollm2-default",
        heldout="qwen05b/smollm2-heldout-sample",
        rewardbench="qwen05b/smollm2-rewardbench-chat-sample",
        rmbench="qwen05b/smollm2-rm-bench-chat-sample",
        breakdown_name="default",
    ),
    Judge(
        "Qwen `qwen05b`",
        trap="qwen05b/trap-heldout-sample",
        heldout="qwen05b/trap-heldout-sample",
        rewardbench="qwen05b/rewardbench-chat-sample",
        rmbench="qwen05b/rm-bench-chat-sample",
        breakdown_name="qwen05b",
    ),
)


def _f(x: float) -> str:
    return f"{x:.1f}"


def _ci(found: Mapping[str, Any]) -> str:
    low, high = found["ci95"]
    return f"{_f(found['value'])} [{_f(low)}, {_f(high)}]"


def _signed(x: float) -> str:
    return f"{x:+.1f}"


def _both(found: Mapping[str, Any], first: str, second: str, pct: bool = False) -> str:
    unit = "%" if pct else ""
    return f"{_f(found[first])}{unit} / {_f(found[second])}{unit}"


def _groups(groups: Mapping[str, Mapping[str, Any]], *names: str) -> str:
    return " / ".join(_f(groups[n]["accuracy"]) for n in names)


def _pooled(groups: Mapping[str, Mapping[str, Any]], names: tuple[str, ...]) -> str:
    right = sum(round(groups[n]["accuracy"] * groups[n]["verdicts"] / 100) for n in names)
    return _f(100 * right / sum(groups[n]["verdicts"] for n in names))


def _pairs(groups: Mapping[str, Mapping[str, Any]], name: str) -> int:
    return int(groups[name]["verdicts"]) // 2  # both orders of each pair


def rows() -> list[tuple[str, Callable[[Judge], str]]]:
    """(label, the judge's cell) per row; the labels' counts are the Qwen judge's records'
    (the two judges ran on the same samples; tests/unit/test_qwen05b_results.py checks it)."""
    q = JUDGES[1]
    held, rb = q.heldout_, q.rewardbench_
    rb_groups, rmb_groups = q.breakdown("breakdown-rewardbench"), q.breakdown("breakdown-rm-bench")
    new = q.breakdown("breakdown-heldout")
    subsets = ", ".join(name for _, name in TRAP_SUBSETS)
    return [
        (
            f"trap: helpful answer wins, % of {2 * q.trap_['pairs']} verdicts",
            lambda j: _f(j.trap_["accuracy"]),
        ),
        ("trap: length-balanced [95% CI]", lambda j: _ci(j.trap_)),
        (
            "trap: right in both orders / slot 1",
            lambda j: _both(j.trap_, "both_right", "slot1_share", pct=True),
        ),
        (
            f"trap per subset: {subsets}",
            lambda j: ", ".join(_f(j.trap_["subsets"][s]["accuracy"]) for s, _ in TRAP_SUBSETS),
        ),
        (
            f"held-out sample ({held['pairs']}): accuracy, % of verdicts",
            lambda j: _f(j.heldout_["accuracy"]),
        ),
        ("held-out sample: length-balanced [95% CI]", lambda j: _ci(j.heldout_)),
        (
            f"held-out sample: better longer ({held['better_longer']['pairs']}) / "
            f"shorter ({held['better_shorter']['pairs']})",
            lambda j: (
                f"{_f(j.heldout_['better_longer']['accuracy'])} / "
                f"{_f(j.heldout_['better_shorter']['accuracy'])}"
            ),
        ),
        (
            "held-out sample: slot 1 / right in both orders",
            lambda j: _both(j.heldout_, "slot1_share", "both_right", pct=True),
        ),
        (
            f"held-out sample: judge − per-source length rule ({_f(q.rule['accuracy'])}), paired",
            lambda j: (
                f"{_signed(j.rule['difference'])} [{_signed(j.rule['difference_ci'][0])}, "
                f"{_signed(j.rule['difference_ci'][1])}]"
            ),
        ),
        (
            "held-out sample, the two sources `smollm2` never saw "
            f"({sum(_pairs(new, n) for n in NEW_SOURCES)} pairs)",
            lambda j: _pooled(j.breakdown("breakdown-heldout"), NEW_SOURCES),
        ),
        (
            f"RewardBench Chat + Chat Hard sample ({rb['pairs']}): length-balanced [95% CI]",
            lambda j: _ci(j.rewardbench_),
        ),
        (
            f"RewardBench sample: Chat ({_pairs(rb_groups, 'chat')}) / "
            f"Chat Hard ({_pairs(rb_groups, 'chat-hard')}), % of verdicts",
            lambda j: _groups(j.breakdown("breakdown-rewardbench"), "chat", "chat-hard"),
        ),
        (
            "RewardBench sample: slot 1 / right in both orders",
            lambda j: _both(j.rewardbench_, "slot1_share", "both_right", pct=True),
        ),
        (
            f"RM-Bench chat sample, normal ({_pairs(rmb_groups, 'chat-normal')}) + "
            f"hard ({_pairs(rmb_groups, 'chat-hard')}): length-balanced [95% CI]",
            lambda j: _ci(j.rmbench_),
        ),
        (
            "RM-Bench chat sample: normal / hard, % of verdicts",
            lambda j: _groups(j.breakdown("breakdown-rm-bench"), "chat-normal", "chat-hard"),
        ),
        (
            "RM-Bench chat sample: slot 1 / right in both orders",
            lambda j: _both(j.rmbench_, "slot1_share", "both_right", pct=True),
        ),
    ]


def render() -> str:
    lines = [
        table_row(["real engine, both orders", *(j.header for j in JUDGES)]),
        "|---|" + "---:|" * len(JUDGES),
    ]
    lines += [table_row([label, *(cell(j) for j in JUDGES)]) for label, cell in rows()]
    return "\n".join(lines) + "\n"


def chosen_readout(states: Mapping[str, Any]) -> tuple[str, str]:
    """(layer, penalty) of the best length-balanced development figure of one backbone."""
    return max(
        ((layer, penalty) for layer in ("mid", "top") for penalty in states[layer]["by_penalty"]),
        key=lambda lp: states[lp[0]]["by_penalty"][lp[1]]["dev"]["length_balanced"],
    )


def render_readouts(path: Path = READOUTS) -> str:
    """Length-balanced accuracy [95% CI] (pairs) of each backbone's chosen readout."""
    readouts = _read(path)
    chosen = {}
    for name, _ in BACKBONES:
        layer, penalty = chosen_readout(readouts[name])
        chosen[name] = readouts[name][layer]["by_penalty"][penalty]
    lines = [
        table_row(
            ["length-balanced accuracy [95% CI] (pairs)", *(column for _, column in BACKBONES)]
        ),
        "|---|" + "---:|" * len(BACKBONES),
    ]
    for group, label in READOUT_ROWS:
        found = {name: chosen[name][group] for name, _ in BACKBONES}
        pairs = {int(f["pairs"]) for f in found.values()}
        cells = []
        for f in found.values():
            low, high = f["length_balanced_ci"]
            cells.append(f"{_f(100 * f['length_balanced'])} [{_f(100 * low)}, {_f(100 * high)}]")
        count = str(pairs.pop()) if len(pairs) == 1 else "/".join(str(p) for p in sorted(pairs))
        lines.append(table_row([f"{label} ({count})", *cells]))
    return "\n".join(lines) + "\n"


def write(page: Path = PAGE) -> None:
    replace_between(page, START, END, render())
    replace_between(page, READOUTS_START, READOUTS_END, render_readouts())


if __name__ == "__main__":
    import sys

    if "--write" in sys.argv:
        write()
    else:
        print(render_readouts() + "\n" + render(), end="")
