"""Position debiasing: one pair judged in both orders, the two score vectors averaged.

Pure arithmetic on judgments that already ran. The swapped-order judgment saw the responses in
the other order, so its scores are put back in the original numbering before averaging. A
no-verdict order counts with its scores (0.5, 0.5): it carries no preference and pulls the
average towards a tie rather than letting the other order's position bias stand alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from reflectrm.judging.judge import consistent, unswap_winner
from reflectrm.judging.types import Judgment

Debias = Literal["none", "swap"]
DEBIAS_MODES: tuple[Debias, ...] = ("none", "swap")

# Averaged scores closer than this are a tie (k/n vote shares do not always sum exactly in floats).
TIE_TOLERANCE = 1e-9


def unswap_scores(scores: tuple[float, float]) -> tuple[float, float]:
    """Scores of the swapped-order judgment, in the original numbering."""
    return scores[1], scores[0]


def average_scores(
    original: tuple[float, float], swapped: tuple[float, float]
) -> tuple[float, float]:
    """The mean of the original order's scores and the swapped order's (given as it returned
    them, i.e. in swapped numbering)."""
    back = unswap_scores(swapped)
    return (original[0] + back[0]) / 2, (original[1] + back[1]) / 2


def winner_of(scores: tuple[float, float]) -> int | None:
    """1 or 2, whichever score is higher; None on a tie."""
    if abs(scores[0] - scores[1]) <= TIE_TOLERANCE:
        return None
    return 1 if scores[0] > scores[1] else 2


@dataclass(frozen=True)
class Debiased:
    """The answer for one pair after debiasing, in the original numbering."""

    scores: tuple[float, float]
    winner: int | None  # None: a tie of the averaged scores, or no verdict in any order
    # Orders that ended in a verdict (0, 1 or 2): 0 means the judge said nothing about the pair.
    verdicts: int
    # Each order's winner and scores, original numbering; one entry with debias "none".
    order_winners: tuple[int | None, ...]
    order_scores: tuple[tuple[float, float], ...]
    consistent: bool | None  # both orders ran and had a verdict: the same response won

    @property
    def outcome(self) -> Literal["verdict", "no_verdict"]:
        return "verdict" if self.winner is not None else "no_verdict"

    @property
    def tie(self) -> bool:
        """Some order had a verdict and the averaged scores tie: an answer (the two are even),
        not a silence, although ``outcome`` says no_verdict (there is no winner)."""
        return self.verdicts > 0 and self.winner is None


def single_order(judgment: Judgment) -> Debiased:
    """No debiasing: the judgment as it is."""
    return Debiased(
        scores=judgment.scores,
        winner=judgment.winner,
        verdicts=int(judgment.winner is not None),
        order_winners=(judgment.winner,),
        order_scores=(judgment.scores,),
        consistent=None,
    )


def both_orders(original: Judgment, swapped: Judgment) -> Debiased:
    """Average the two orders' scores; the winner is the higher average (a tie: no winner)."""
    scores = average_scores(original.scores, swapped.scores)
    verdicts = int(original.winner is not None) + int(swapped.winner is not None)
    return Debiased(
        scores=scores,
        winner=winner_of(scores) if verdicts else None,
        verdicts=verdicts,
        order_winners=(original.winner, unswap_winner(swapped.winner)),
        order_scores=(original.scores, unswap_scores(swapped.scores)),
        consistent=consistent(original, swapped),
    )


def combine(original: Judgment, swapped: Judgment | None) -> Debiased:
    """The debiased answer from one order (``swapped`` None) or both."""
    return single_order(original) if swapped is None else both_orders(original, swapped)


def flipped(d: Debiased) -> Debiased:
    """The same answer with the two responses renumbered (1 <-> 2)."""
    return Debiased(
        scores=unswap_scores(d.scores),
        winner=unswap_winner(d.winner),
        verdicts=d.verdicts,
        order_winners=tuple(unswap_winner(w) for w in d.order_winners),
        order_scores=tuple(unswap_scores(s) for s in d.order_scores),
        consistent=d.consistent,
    )
