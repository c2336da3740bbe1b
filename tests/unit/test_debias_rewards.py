"""Position debiasing and group rewards, against hand-computed values."""

from __future__ import annotations

import pytest

from reflectrm.judging.debias import (
    average_scores,
    both_orders,
    combine,
    flipped,
    single_order,
    unswap_scores,
    winner_of,
)
from reflectrm.judging.groups import (
    EMPTY_REWARD,
    Comparison,
    aggregate,
    choose_pivot,
    comparison_seed,
    plan,
)
from reflectrm.judging.types import EngineUsage, Judgment, Trace


def judged(winner: int | None, scores: tuple[float, float]) -> Judgment:
    return Judgment(
        winner=winner,
        scores=scores,
        outcome="verdict" if winner else "no_verdict",
        mode="reflect",
        analysis=None,
        votes=(0, 0),
        early_exit=False,
        usage=EngineUsage(),
        trace=Trace(candidates=()),
        seed=0,
    )


# --- debiasing -------------------------------------------------------------------------------


def test_average_puts_the_swapped_scores_back_in_the_original_numbering():
    # Original order: response 1 gets 0.75. Swapped order (response 2 shown first) gives its
    # first-shown response (our response 2) 0.875, i.e. our response 1 gets 0.125.
    assert unswap_scores((0.875, 0.125)) == (0.125, 0.875)
    assert average_scores((0.75, 0.25), (0.875, 0.125)) == (0.4375, 0.5625)


def test_a_judge_that_always_picks_the_first_shown_gets_a_tie():
    # Position only: 1.0 for whoever is first, in both orders -> (1+0)/2 each.
    d = both_orders(judged(1, (1.0, 0.0)), judged(1, (1.0, 0.0)))
    assert d.scores == (0.5, 0.5)
    assert d.winner is None
    assert d.outcome == "no_verdict"
    assert d.verdicts == 2
    assert d.order_winners == (1, 2)
    assert d.consistent is False
    assert d.order_scores == ((1.0, 0.0), (0.0, 1.0))


def test_consistent_orders_keep_their_winner_and_average_their_margin():
    # Original: 5/8 for response 2. Swapped: the swapped judgment picks its response 1 (our 2)
    # with 7/8. Averages: r1 = (3/8 + 1/8)/2 = 0.25, r2 = (5/8 + 7/8)/2 = 0.75.
    d = both_orders(judged(2, (0.375, 0.625)), judged(1, (0.875, 0.125)))
    assert d.scores == (0.25, 0.75)
    assert d.winner == 2
    assert d.consistent is True
    assert d.order_winners == (2, 2)


def test_inconsistent_orders_go_to_the_stronger_order():
    # Original: r1 by 6/8. Swapped: r1 (shown second) loses 5/8 to 3/8.
    # r1 = (0.75 + 0.375)/2 = 0.5625; r2 = (0.25 + 0.625)/2 = 0.4375.
    d = both_orders(judged(1, (0.75, 0.25)), judged(1, (0.625, 0.375)))
    assert d.scores == (0.5625, 0.4375)
    assert d.winner == 1
    assert d.consistent is False


def test_an_order_without_verdict_counts_as_half_half():
    # Original has no verdict (0.5, 0.5); swapped says our r1 with 1.0 -> r1 = (0.5 + 1)/2.
    d = both_orders(judged(None, (0.5, 0.5)), judged(2, (0.0, 1.0)))
    assert d.scores == (0.75, 0.25)
    assert d.winner == 1
    assert d.verdicts == 1
    assert d.consistent is None


def test_no_verdict_in_either_order_is_no_verdict():
    d = both_orders(judged(None, (0.5, 0.5)), judged(None, (0.5, 0.5)))
    assert d.winner is None
    assert d.verdicts == 0
    assert d.scores == (0.5, 0.5)


def test_single_order_is_the_judgment_itself_and_combine_picks():
    j = judged(2, (0.25, 0.75))
    assert single_order(j) == combine(j, None)
    assert combine(j, None).scores == (0.25, 0.75)
    assert combine(j, None).order_winners == (2,)
    assert combine(j, judged(1, (1.0, 0.0))).order_winners == (2, 2)


def test_winner_of_treats_float_noise_as_a_tie():
    # Three sevenths and four sevenths do not sum to exactly 1 in floats.
    a = (3 / 7 + 4 / 7) / 2
    assert winner_of((a, 1 - a)) is None
    assert winner_of((0.5000001, 0.4999999)) == 1


# --- group plans -----------------------------------------------------------------------------


def test_reference_plan_skips_empty_completions():
    comps, pivot = plan("reference", ["a", " ", "ccc"], seed=3)
    assert [(c.a, c.b) for c in comps] == [(0, None), (2, None)]
    assert pivot is None


def test_pivot_is_the_median_length_completion():
    # Lengths 5, 1, 3, 9 -> sorted 1 (i1), 3 (i2), 5 (i0), 9 (i3): lower median is i2.
    texts = ["aaaaa", "b", "ccc", "ddddddddd"]
    assert choose_pivot(texts) == 2
    comps, pivot = plan("pivot", texts, seed=0)
    assert pivot == 2
    assert [(c.a, c.b) for c in comps] == [(0, 2), (1, 2), (3, 2)]
    # Odd count: lengths 2, 2, 1 -> sorted (1, i2), (2, i0), (2, i1): the median is i0.
    assert choose_pivot(["xx", "yy", "z"]) == 0
    assert choose_pivot(["", "  "]) is None
    comps, pivot = plan("pivot", texts, seed=0, pivot=0)
    assert pivot == 0
    assert [(c.a, c.b) for c in comps] == [(1, 0), (2, 0), (3, 0)]


def test_round_robin_judges_every_pair_once():
    comps, _ = plan("round_robin", ["a", "b", "", "d"], seed=1)
    assert [(c.a, c.b) for c in comps] == [(0, 1), (0, 3), (1, 3)]


def test_seeds_are_per_comparison_and_reproducible():
    one, _ = plan("round_robin", ["a", "b", "c"], seed=42)
    two, _ = plan("round_robin", ["a", "b", "c"], seed=42)
    assert [c.seed for c in one] == [c.seed for c in two]
    assert len({c.seed for c in one}) == 3
    assert one[0].seed == comparison_seed(42, 0, 1) != comparison_seed(43, 0, 1)
    assert all(0 <= c.seed < 2**31 for c in one)


def test_single_order_coins_are_drawn_from_the_seed():
    coins = [Comparison(0, 1, s).a_first for s in range(200)]
    assert coins == [Comparison(0, 1, s).a_first for s in range(200)]
    assert 70 < sum(coins) < 130  # both orders happen, about equally


# --- aggregation -----------------------------------------------------------------------------


def test_round_robin_reward_is_the_mean_score():
    # Three completions; scores in (a, b) numbering:
    # (0,1): 0.75/0.25 -> 0 wins; (0,2): 0.5/0.5 tie; (1,2): 0.25/0.75 -> 2 wins.
    results = [
        (Comparison(0, 1, 0), both_orders(judged(1, (0.75, 0.25)), judged(2, (0.25, 0.75)))),
        (Comparison(0, 2, 0), both_orders(judged(1, (1.0, 0.0)), judged(1, (1.0, 0.0)))),
        (Comparison(1, 2, 0), both_orders(judged(2, (0.25, 0.75)), judged(1, (0.75, 0.25)))),
    ]
    r = aggregate(["x", "y", "z"], results)
    assert [c.reward for c in r] == [(0.75 + 0.5) / 2, (0.25 + 0.25) / 2, (0.5 + 0.75) / 2]
    assert (r[0].wins, r[0].losses, r[0].ties) == (1, 0, 1)
    assert (r[1].wins, r[1].losses, r[1].ties) == (0, 2, 0)
    assert (r[2].wins, r[2].losses, r[2].ties) == (1, 0, 1)


def test_reference_reward_and_no_verdict_and_empty():
    results = [
        (Comparison(0, None, 0), single_order(judged(1, (0.625, 0.375)))),
        (Comparison(1, None, 0), single_order(judged(None, (0.5, 0.5)))),
    ]
    r = aggregate(["good", "odd", ""], results)
    assert r[0].reward == 0.625
    assert r[0].wins == 1
    assert r[1].reward is None
    assert r[1].no_verdict == 1
    assert r[2].reward == EMPTY_REWARD
    assert r[2].empty


def test_pivot_gets_its_mean_over_all_its_comparisons():
    # Pivot 1 against 0 (pivot scores 0.25) and against 2 (pivot scores 1.0).
    results = [
        (Comparison(0, 1, 0), single_order(judged(1, (0.75, 0.25)))),
        (Comparison(2, 1, 0), single_order(judged(2, (0.0, 1.0)))),
    ]
    r = aggregate(["a", "b", "c"], results)
    assert [c.reward for c in r] == [0.75, pytest.approx(0.625), 0.0]


def test_flipped_renumbers_everything():
    d = flipped(both_orders(judged(2, (0.375, 0.625)), judged(1, (0.875, 0.125))))
    assert d.scores == (0.75, 0.25)
    assert d.winner == 1
    assert d.order_winners == (1, 1)
    assert d.order_scores == ((0.625, 0.375), (0.875, 0.125))
    assert d.consistent is True
    assert d.verdicts == 2
