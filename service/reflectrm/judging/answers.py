"""One pair's answer from the judgment of its first order and, when it ran, of the swapped one.

Pure arithmetic on judgments that already ran. With debias "swap" the answer is the average of
both orders (``debias.both_orders``); otherwise it is the first order's, and a swapped-order
judgment (check_swap) only adds ``consistent``, ``swapped_winner`` and the per-order figures.
"""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm.judging.debias import Debias, Debiased, combine
from reflectrm.judging.judge import unswap_winner
from reflectrm.judging.types import EngineUsage, Judgment, Mode, Outcome, Scoring


@dataclass(frozen=True)
class PairAnswer:
    winner: int | None
    scores: tuple[float, float]
    outcome: Outcome
    mode: Mode
    debias: Debias
    analysis: str | None
    votes: tuple[int, int]
    early_exit: bool
    # With both orders judged: agreement, the swapped order's winner and each order's figures
    # (original numbering, the order as sent first); None and () with one order.
    consistent: bool | None
    swapped_winner: int | None
    orders: tuple[tuple[int | None, tuple[float, float]], ...]
    parse_failures: int
    usage: EngineUsage
    seed: int
    # Both orders judged and averaged (debias swap), some with a verdict, and the averages tie:
    # no winner (``outcome`` no_verdict), but a verdict that the two are even.
    tie: bool = False
    # How the scores were made: "probability" when every order judged had verdict
    # probabilities, else "votes" (the vote shares).
    scoring: Scoring = "votes"


def _failures(judgment: Judgment) -> int:
    return judgment.stage1_parse_failures + judgment.reflection_parse_failures


def _analysis(judgment: Judgment, swap: Judgment | None, winner: int | None) -> str | None:
    """The analysis of an order whose own winner is the final one (the first order's first)."""
    if judgment.winner == winner or swap is None:
        return judgment.analysis
    return swap.analysis if unswap_winner(swap.winner) == winner else None


def answer_pair(judgment: Judgment, swap: Judgment | None, debias: Debias) -> PairAnswer:
    both: Debiased = combine(judgment, swap)
    if debias == "swap" and swap is not None:
        winner, scores, outcome, tie = both.winner, both.scores, both.outcome, both.tie
        v = swap.votes
        votes = (judgment.votes[0] + v[1], judgment.votes[1] + v[0])
        early_exit = judgment.early_exit and swap.early_exit
    else:
        winner, scores, outcome = judgment.winner, judgment.scores, judgment.outcome
        tie = False
        votes, early_exit = judgment.votes, judgment.early_exit
    orders = tuple(zip(both.order_winners, both.order_scores, strict=True)) if swap else ()
    return PairAnswer(
        winner=winner,
        scores=scores,
        outcome=outcome,
        mode=judgment.mode,
        debias=debias,
        analysis=_analysis(judgment, swap, winner),
        votes=votes,
        early_exit=early_exit,
        consistent=both.consistent,
        swapped_winner=both.order_winners[1] if swap else None,
        orders=orders,
        parse_failures=_failures(judgment) + (_failures(swap) if swap else 0),
        usage=judgment.usage + swap.usage if swap else judgment.usage,
        seed=judgment.seed,
        tie=tie,
        scoring=scoring_of(judgment, swap if debias == "swap" else None),
    )


def scoring_of(judgment: Judgment, swap: Judgment | None) -> Scoring:
    """The scoring of an answer: "probability" only when each order in it had probabilities."""
    orders = (judgment,) if swap is None else (judgment, swap)
    return "probability" if all(j.scoring == "probability" for j in orders) else "votes"
