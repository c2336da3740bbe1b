"""Group rewards: which pairs of a group to judge (a strategy) and how their results become one
reward per completion. Pure: the judging itself happens elsewhere.

- ``reference``: each completion against the reference answer (N comparisons);
- ``pivot``: each completion against one pivot completion (N-1 comparisons);
- ``round_robin``: every pair of completions (N(N-1)/2 comparisons).

A completion's reward is its mean score over the comparisons it took part in that had a verdict
in at least one order (a score is a vote share, so the reward is in [0, 1]); with none it is
None. An empty (whitespace-only) completion is not judged: its reward is 0.0, and comparisons
with it are not made, so beating it earns nothing.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from reflectrm.judging.debias import Debiased

Strategy = Literal["reference", "pivot", "round_robin"]
STRATEGIES: tuple[Strategy, ...] = ("reference", "pivot", "round_robin")
EMPTY_REWARD = 0.0
# Where a caller needs a number for every completion (OpenRLHF, verl, slime), a completion
# without a verdict gets this neutral reward: as good as what it was compared with.
NO_VERDICT_REWARD = 0.5
SEED_LIMIT = 2**31


@dataclass(frozen=True)
class Comparison:
    """One pair of a group: completion ``a`` against completion ``b`` (None: the reference)."""

    a: int
    b: int | None
    seed: int

    @property
    def a_first(self) -> bool:
        """The order shown when only one order is judged: a coin drawn from the seed, so that
        no completion is always shown first (the default model favours the first response)."""
        return random.Random(f"order:{self.seed}").random() < 0.5


def is_empty(text: str) -> bool:
    return not text.strip()


def comparison_seed(seed: int, a: int, b: int | None) -> int:
    """A seed per comparison, derived from the group's: one seed reproduces the whole group,
    and comparisons do not share their sampling noise."""
    return random.Random(f"{seed}:{a}:{'ref' if b is None else b}").randrange(SEED_LIMIT)


def choose_pivot(completions: Sequence[str]) -> int | None:
    """The non-empty completion of median length (the shorter median for an even count; ties go
    to the lower index). A pivot near the middle of the group is less likely to be its best or
    worst answer, whose comparisons would all end the same way and tell the others apart less."""
    ranked = sorted((len(c), i) for i, c in enumerate(completions) if not is_empty(c))
    if not ranked:
        return None
    return ranked[(len(ranked) - 1) // 2][1]


def plan(
    strategy: Strategy, completions: Sequence[str], seed: int, pivot: int | None = None
) -> tuple[list[Comparison], int | None]:
    """The comparisons to judge, and the pivot used (``pivot`` strategy only)."""
    judged = [i for i, c in enumerate(completions) if not is_empty(c)]
    if strategy == "reference":
        return [Comparison(i, None, comparison_seed(seed, i, None)) for i in judged], None
    if strategy == "pivot":
        chosen = choose_pivot(completions) if pivot is None else pivot
        pairs = [(i, chosen) for i in judged if i != chosen]
        return [Comparison(a, b, comparison_seed(seed, a, b)) for a, b in pairs], chosen
    pairs = [(a, b) for k, a in enumerate(judged) for b in judged[k + 1 :]]
    return [Comparison(a, b, comparison_seed(seed, a, b)) for a, b in pairs], None


@dataclass(frozen=True)
class CompletionReward:
    index: int
    reward: float | None
    wins: int = 0
    losses: int = 0
    ties: int = 0  # both had a verdict in some order, and the averaged scores tie
    no_verdict: int = 0  # comparisons that ended without a verdict in any order: not counted
    empty: bool = False


def aggregate(
    completions: Sequence[str], results: Sequence[tuple[Comparison, Debiased]]
) -> list[CompletionReward]:
    """One reward per completion from the judged comparisons (scores in (a, b) numbering)."""
    scores: dict[int, list[float]] = {i: [] for i in range(len(completions))}
    counts = {i: {"wins": 0, "losses": 0, "ties": 0, "no_verdict": 0} for i in scores}
    for comp, result in results:
        sides = [(comp.a, 0)] + ([] if comp.b is None else [(comp.b, 1)])
        for index, side in sides:
            if result.verdicts == 0:
                counts[index]["no_verdict"] += 1
                continue
            scores[index].append(result.scores[side])
            if result.winner is None:
                counts[index]["ties"] += 1
            else:
                counts[index]["wins" if result.winner == side + 1 else "losses"] += 1
    rewards = []
    for i, text in enumerate(completions):
        if is_empty(text):
            rewards.append(CompletionReward(i, EMPTY_REWARD, empty=True))
            continue
        mine = scores[i]
        reward = sum(mine) / len(mine) if mine else None
        c = counts[i]
        rewards.append(
            CompletionReward(i, reward, c["wins"], c["losses"], c["ties"], c["no_verdict"])
        )
    return rewards
