"""The group-strategy simulator (studies/group_sim.py) on tiny seeded cases, and the judgment
counts table of docs/rlhf.md against the designs."""

from __future__ import annotations

import math
import random
from pathlib import Path

import pytest

from reflectrm.judging.groups import Comparison
from studies.group_sim import (
    Group,
    SyntheticJudge,
    count_table,
    headline,
    judge_comparison,
    kendall_tau_b,
    play,
    simulate,
    top1,
)

DOCS = Path(__file__).resolve().parents[2] / "docs" / "rlhf.md"


def test_kendall_tau_b_and_top1_by_hand():
    assert kendall_tau_b([1, 2, 3], [10, 20, 30]) == 1.0
    assert kendall_tau_b([3, 2, 1], [10, 20, 30]) == -1.0
    # (0,1) tied in x only; (0,2) and (1,2) concordant: 2 / sqrt(3 * 2).
    assert kendall_tau_b([1, 1, 2], [1, 2, 3]) == pytest.approx(2 / math.sqrt(6))
    assert top1([0.2, 0.9, 0.9], [0.0, 1.0, -1.0]) == 0.5  # the best shares the top reward
    assert top1([0.2, 0.9, 0.1], [0.0, 1.0, -1.0]) == 1.0
    assert top1([0.9, 0.2, 0.1], [0.0, 1.0, -1.0]) == 0.0


def test_the_synthetic_judge_votes_by_quality_bias_and_noise():
    rng = random.Random(0)
    certain = SyntheticJudge(noise=0.0)
    j = certain.judge(10.0, -10.0, rng)
    assert (j.winner, j.scores) == (1, (1.0, 0.0))
    assert certain.judge(-10.0, 10.0, rng).scores == (0.0, 1.0)
    # Equal qualities and a strong bias for the first shown: it gets every vote.
    assert SyntheticJudge(position_bias=20.0, noise=0.0).judge(0.0, 0.0, rng).winner == 1
    silent = SyntheticJudge(no_verdict=1.0).judge(10.0, -10.0, rng)
    assert (silent.winner, silent.scores) == (None, (0.5, 0.5))


def test_comparisons_are_judged_as_the_service_judges_them():
    group = Group(index=0, seed=1, qualities=(10.0, -10.0), reference=0.0)
    judge = SyntheticJudge(noise=0.0)
    swap = judge_comparison(Comparison(0, 1, 5), group, "swap", judge, seed=0)
    assert swap.scores == (1.0, 0.0)
    assert swap.order_scores == ((1.0, 0.0), (1.0, 0.0))  # both orders, original numbering
    # One order: whichever the seed's coin shows first, the answer is in (a, b) numbering.
    for s in range(6):
        one = judge_comparison(Comparison(1, 0, s), group, "none", judge, seed=0)
        assert one.scores == (0.0, 1.0)
    against_reference = judge_comparison(Comparison(1, None, 3), group, "swap", judge, seed=0)
    assert against_reference.winner == 2


def test_pair_noise_is_shared_by_both_orders():
    # Equal qualities, no per-judgment noise: a large shared misjudgment decides both orders the
    # same way (swap cannot undo it), where without it the orders split the votes evenly.
    group = Group(index=0, seed=1, qualities=(0.0, 0.0), reference=0.0)
    shared = SyntheticJudge(noise=0.0, pair_noise=50.0, votes=8)
    for s in range(20):
        d = judge_comparison(Comparison(0, 1, s), group, "swap", shared, seed=0)
        assert d.consistent is True
        assert abs(d.scores[0] - 0.5) > 0.25
    winners = {
        judge_comparison(Comparison(0, 1, s), group, "swap", shared, seed=0).winner
        for s in range(20)
    }
    assert winners == {1, 2}


def test_a_certain_judge_ranks_perfectly_and_runs_are_reproducible():
    cells = simulate([4], [0.0], groups=6, noise=0.0, quality_sd=100.0)
    assert cells[(4, 0.0, "round_robin", "swap")].taus == [1.0] * 6
    assert cells[(4, 0.0, "round_robin", "swap")].judgments == [12] * 6
    assert cells[(4, 0.0, "knockout", "none")].tops == [1.0] * 6  # the best always wins
    assert cells[(4, 0.0, "swiss", "swap")].judgments == [8] * 6
    again = simulate([4], [0.0], groups=6, noise=0.0, quality_sd=100.0)
    assert again == cells
    noisy = simulate([4], [1.0], groups=6, seed=3)
    assert noisy != simulate([4], [1.0], groups=6, seed=4)
    gains = headline(noisy)["swap_gain"]
    assert {g["strategy"] for g in gains} >= {"knockout", "swiss", "circular"}


def test_play_drives_the_services_design_to_the_end():
    group = Group.draw(seed=0, index=2, n=5, quality_sd=1.0)
    d, judged = play("swiss", group, "none", SyntheticJudge(), seed=0)
    assert [c.round for c, _ in judged] == [1, 1, 2, 2, 3, 3]
    assert d.next_round(judged) == []


def test_the_judgment_counts_in_the_docs_are_the_designs():
    text = DOCS.read_text()
    start, end = "<!-- judgment-counts: start -->", "<!-- judgment-counts: end -->"
    assert text.count(start) == 1
    block = text.split(start)[1].split(end)[0].strip()
    assert block == count_table()
    # And the designs' counts are the formulas, by hand for N = 4, 8, 16.
    rows = {line.split("|")[1].strip(" `"): line for line in count_table().splitlines()[2:]}
    for strategy, per_n in {
        "reference": (4, 8, 16),
        "pivot": (3, 7, 15),
        "round_robin": (6, 28, 120),
        "knockout": (3, 7, 15),
        "circular": (4, 8, 16),
        "swiss": (4, 12, 32),  # floor(N/2) * ceil(log2 N)
    }.items():
        numbers = [int(x) for x in rows[strategy].split("|")[2:-1]]
        assert numbers == [c * k for c in per_n for k in (1, 2)]
