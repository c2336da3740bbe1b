"""Length-balanced accuracy: a judge's accuracy with the length of the better response held even.

Pairs fall into two strata: those whose better (chosen) response is longer, in characters, and
those where it is shorter; pairs of equal length belong to neither. Length-balanced accuracy is
the mean of the two strata's accuracies, so a rule that only looks at length ("the longer
response wins", or "the shorter one wins") scores exactly 0.5 whatever the strata's sizes. Its 95%
interval comes from a bootstrap that resamples pairs within each stratum (seeded).

``length_balanced`` takes a per-pair correctness and the pair's stratum; ``judge_figures`` takes
a pair's judgments in both orders (a pair's correctness is the mean of its orders'), and gives
besides the slot-1 share (the share of verdicts naming the response shown first) and the share
of pairs right in both orders. The evaluation report and the training readouts use these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

DRAWS = 2000


def chosen_longer(chosen: str, rejected: str) -> bool | None:
    """True when the chosen response is longer (in characters), False when shorter, None when
    both have the same length."""
    a, b = len(chosen), len(rejected)
    return None if a == b else a > b


def longer_of(lengths: Sequence[int] | None) -> bool | None:
    """``chosen_longer`` from the two lengths (chosen, rejected)."""
    if lengths is None:
        return None
    a, b = lengths
    return None if a == b else a > b


def length_balanced(
    correct: Sequence[float], longer: Sequence[bool | None], *, seed: int = 0, draws: int = DRAWS
) -> dict[str, Any]:
    """Accuracy, both strata (pairs and accuracy) and their mean, ``length_balanced``, with a
    bootstrap 95% interval ``length_balanced_ci`` (pairs resampled within each stratum, ``draws``
    resamples from one stream seeded with ``seed``). Fractions in [0, 1]; pairs of equal length
    count in plain accuracy only. Without a pair in either stratum there is no length-balanced
    accuracy (the keys are absent)."""
    c = np.asarray(correct, dtype=np.float64)
    lon = np.asarray([x is True for x in longer], dtype=bool)
    sho = np.asarray([x is False for x in longer], dtype=bool)
    a, b = c[lon], c[sho]
    out: dict[str, Any] = {
        "pairs": len(c),
        "accuracy": float(c.mean()) if len(c) else None,
        "better_longer": {"pairs": int(lon.sum()), "accuracy": float(a.mean()) if len(a) else None},
        "better_shorter": {
            "pairs": int(sho.sum()),
            "accuracy": float(b.mean()) if len(b) else None,
        },
        "equal_length": int(len(c) - lon.sum() - sho.sum()),
    }
    if len(a) and len(b):
        rng = np.random.default_rng(seed)
        ra = a[rng.integers(0, len(a), (draws, len(a)))].mean(1)
        rb = b[rng.integers(0, len(b), (draws, len(b)))].mean(1)
        lba = (ra + rb) / 2
        out["length_balanced"] = float((a.mean() + b.mean()) / 2)
        out["length_balanced_ci"] = [
            float(np.quantile(lba, 0.025)),
            float(np.quantile(lba, 0.975)),
        ]
    return out


def judge_figures(
    orders: Sequence[tuple[tuple[int, int | None], tuple[int, int | None]]],
    longer: Sequence[bool | None],
    *,
    seed: int = 0,
    draws: int = DRAWS,
) -> dict[str, Any]:
    """The length figures of a judge over pairs judged in both orders.

    ``orders``: per pair, its two judgments as (chosen_position, winner), winner 1, 2 or None (no
    verdict: a miss). A pair's correctness is the mean of its orders'. Besides
    ``length_balanced``'s figures: ``slot1_share``, the share of verdicts that name the response
    shown first (None without a verdict), and ``both_right``, the share of pairs whose chosen
    response wins in both orders."""
    correct: list[float] = []
    both = 0
    verdicts = slot1 = 0
    for (pos_a, win_a), (pos_b, win_b) in orders:
        right_a, right_b = win_a == pos_a, win_b == pos_b
        correct.append((right_a + right_b) / 2)
        both += right_a and right_b
        for win in (win_a, win_b):
            if win is not None:
                verdicts += 1
                slot1 += win == 1
    out = length_balanced(correct, longer, seed=seed, draws=draws)
    out["slot1_share"] = slot1 / verdicts if verdicts else None
    out["both_right"] = both / len(correct) if correct else None
    return out


def paired_length_balanced(
    before: Sequence[float],
    after: Sequence[float],
    longer: Sequence[bool | None],
    *,
    seed: int = 0,
    draws: int = DRAWS,
) -> dict[str, Any]:
    """How much ``after``'s length-balanced accuracy exceeds ``before``'s on the same pairs, with
    a paired 95% interval: each bootstrap draw resamples pairs within each stratum (as
    ``length_balanced`` does) and scores both judges on the same draw. ``before`` and ``after``
    are per-pair correctness in the same pair order; fractions in [0, 1]. None (the keys
    ``delta`` and ``ci95`` absent) without a pair in either stratum."""
    if not (len(before) == len(after) == len(longer)):
        raise ValueError("before, after and longer must have one entry per pair")
    # the strata means of the per-pair differences, bootstrapped as length_balanced does
    diff = length_balanced(
        [a - b for a, b in zip(after, before, strict=True)],
        longer,
        seed=seed,
        draws=draws,
    )
    out: dict[str, Any] = {"pairs": len(before) - diff["equal_length"]}
    if "length_balanced" in diff:
        out["delta"] = diff["length_balanced"]
        out["ci95"] = diff["length_balanced_ci"]
    return out
