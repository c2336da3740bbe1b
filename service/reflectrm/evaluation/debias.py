"""Position-debiased verdicts from judgments already made in both orders (the ``swap`` rows).

The rule is the service's ``debias: "swap"``: judge the pair in both orders, put the second
order's scores back in the first order's numbering, average the two score vectors; the winner is
the response with the higher average, and a tie (within ``TIE_TOLERANCE``) is no verdict. An
order without a verdict counts with scores (0.5, 0.5), so it pulls the average towards a tie
instead of letting the other order's position bias stand alone. The harness applies it to the
two judgments every both-orders run already records, so a swap row costs no engine work beyond
the plain row's two orders.

Merge point: ``reflectrm.judging.debias`` (``average_scores``, ``winner_of``) holds the same rule
for whole ``Judgment``s on the HTTP path; once both are in one tree, these two functions should
call it instead of repeating it.
"""

from __future__ import annotations

Scores = tuple[float, float]

NO_VERDICT_SCORES: Scores = (0.5, 0.5)
# Averaged scores closer than this are a tie (k/n vote shares need not sum exactly in floats).
TIE_TOLERANCE = 1e-9


def average_scores(original: Scores | None, swapped: Scores | None) -> Scores:
    """The mean of the original order's scores and the swapped order's (given as that order
    returned them, i.e. in its own numbering); a missing score vector counts as (0.5, 0.5)."""
    a = original or NO_VERDICT_SCORES
    b = swapped or NO_VERDICT_SCORES
    return (a[0] + b[1]) / 2, (a[1] + b[0]) / 2


def winner_of(scores: Scores) -> int | None:
    """1 or 2, whichever score is higher; None on a tie."""
    if abs(scores[0] - scores[1]) <= TIE_TOLERANCE:
        return None
    return 1 if scores[0] > scores[1] else 2


def debiased_winner(original: Scores | None, swapped: Scores | None) -> int | None:
    """The debiased winner, in the original order's numbering (None: no verdict)."""
    return winner_of(average_scores(original, swapped))
