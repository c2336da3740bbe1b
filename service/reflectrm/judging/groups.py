"""Group rewards: which pairs of a group to judge (a design) and how their results become one
reward per completion. Pure: the judging itself happens elsewhere.

One-round strategies, every comparison known before any is judged:

- ``reference``: each completion against the reference answer (N comparisons);
- ``pivot``: each completion against one pivot completion (N-1 comparisons);
- ``round_robin``: every pair of completions (N(N-1)/2 comparisons);
- ``circular``: each completion against the next, the last against the first (N comparisons
  for N > 2, one for N = 2).

Adaptive strategies, whose rounds are paired from the earlier rounds' results:

- ``knockout``: single elimination (N-1 comparisons in ceil(log2 N) rounds);
- ``swiss``: ceil(log2 N) rounds, each pairing completions of equal running score that have not
  met yet (floor(N/2) comparisons a round).

A design (``design``) hands out its rounds one at a time: ``next_round(judged)`` is the round to
judge next given every result so far (empty once the design is complete), ``rewards(judged)`` the
rewards. Both are pure functions of the results: replaying the same results gives the same rounds.

Rewards of ``reference``, ``pivot`` and ``round_robin``: a completion's mean score over the
comparisons it took part in that had a verdict in at least one order (a score is a vote share, so
the reward is in [0, 1]); with none it is None. Rewards of ``knockout``, ``circular`` and
``swiss`` are each completion's mean win probability against the others of the group under a
Bradley-Terry fit of the comparisons made (``bradley_terry``, ``win_shares``). A knockout's
rounds survived enter through that fit (each is a comparison won, or a bye) and are reported
beside the reward (``rounds_survived``), not added to it: in the simulation of
``studies/group_sim.py`` (docs/records/group-designs-synthetic-judge) the mean of the two
ranked groups worse in Kendall tau than the fit alone, at every size and position bias.

Whatever the strategy: an empty (whitespace-only) completion is not judged: its reward is 0.0,
and comparisons with it are not made, so beating it earns nothing. Completions identical after
whitespace normalisation are judged once: the first of them (the pivot, if it is one of them)
stands for the others in the design, and they all get its reward (``duplicate_of``); if all the
non-empty completions are one text, nothing is judged and each gets 0.5, a tie (against a
reference they are still judged, once).
"""

from __future__ import annotations

import itertools
import math
import random
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Literal

from reflectrm.judging.debias import Debiased

Strategy = Literal["reference", "pivot", "round_robin", "knockout", "circular", "swiss"]
STRATEGIES: tuple[Strategy, ...] = (
    "reference",
    "pivot",
    "round_robin",
    "knockout",
    "circular",
    "swiss",
)
# Strategies whose rewards come from the Bradley-Terry fit rather than the mean score.
FITTED: tuple[Strategy, ...] = ("knockout", "circular", "swiss")
EMPTY_REWARD = 0.0
# Where a caller needs a number for every completion (OpenRLHF, verl, slime), a completion
# whose judgment failed gets the mean of its group's judged rewards (``failed_reward``), or this
# neutral reward when none of the group was judged.
NO_VERDICT_REWARD = 0.5
# A group whose non-empty completions are all the same text (after whitespace normalisation):
# nothing is judged, and each gets this, the reward of a tie.
IDENTICAL_REWARD = 0.5
SEED_LIMIT = 2**31
# The Bradley-Terry fit's prior: each completion is given this many virtual games, half won,
# spread evenly over the other completions of the fit (see bradley_terry).
PRIOR_GAMES = 1.0
# Decimal places of the fitted rewards (see win_shares).
SHARE_DECIMALS = 12


@dataclass(frozen=True)
class Comparison:
    """One pair of a group: completion ``a`` against completion ``b`` (None: the reference), in
    round ``round`` of its design (1 for one-round strategies)."""

    a: int
    b: int | None
    seed: int
    round: int = 1

    @property
    def a_first(self) -> bool:
        """The order shown when only one order is judged: a coin drawn from the seed, so that
        no completion is always shown first (the default model favours the first response)."""
        return random.Random(f"order:{self.seed}").random() < 0.5


Result = tuple[Comparison, Debiased]


def is_empty(text: str) -> bool:
    return not text.strip()


def normalised(text: str) -> str:
    """The text with every run of whitespace one space, and none at either end: what two
    completions are compared by to be duplicates."""
    return " ".join(text.split())


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


def _one_round(
    strategy: Strategy, judged: Sequence[int], seed: int, pivot: int | None
) -> list[Comparison]:
    """The comparisons of a one-round strategy among the completions ``judged``."""
    if strategy == "reference":
        return [Comparison(i, None, comparison_seed(seed, i, None)) for i in judged]
    if strategy == "pivot":
        pairs = [(i, pivot) for i in judged if i != pivot]
    elif strategy == "circular":
        pairs = list(itertools.pairwise(judged))
        if len(judged) > 2:
            pairs.append((judged[-1], judged[0]))
    elif strategy == "round_robin":
        pairs = [(a, b) for k, a in enumerate(judged) for b in judged[k + 1 :]]
    else:
        raise ValueError(f"{strategy!r} is not a one-round strategy")
    return [Comparison(a, b, comparison_seed(seed, a, b)) for a, b in pairs]


def plan(
    strategy: Strategy, completions: Sequence[str], seed: int, pivot: int | None = None
) -> tuple[list[Comparison], int | None]:
    """The comparisons of a one-round strategy among all non-empty completions (duplicates
    not merged), and the pivot used (``pivot`` strategy only)."""
    judged = [i for i, c in enumerate(completions) if not is_empty(c)]
    chosen = None
    if strategy == "pivot":
        chosen = choose_pivot(completions) if pivot is None else pivot
    return _one_round(strategy, judged, seed, chosen), chosen


@dataclass(frozen=True)
class CompletionReward:
    index: int
    reward: float | None
    wins: int = 0
    losses: int = 0
    ties: int = 0  # both had a verdict in some order, and the averaged scores tie
    no_verdict: int = 0  # comparisons that ended without a verdict in any order: not counted
    empty: bool = False
    # The completion this one duplicates (after whitespace normalisation): it was not judged
    # itself, and its reward and counts are that completion's.
    duplicate_of: int | None = None
    # Knockout only: the rounds it went through, byes included (the winner: all of them).
    rounds_survived: int | None = None


@dataclass
class _Tally:
    wins: int = 0
    losses: int = 0
    ties: int = 0
    no_verdict: int = 0


def _tally(results: Sequence[Result]) -> dict[int, _Tally]:
    """Wins, losses, ties and no-verdict comparisons per completion."""
    tally: dict[int, _Tally] = {}
    for comp, result in results:
        sides = [(comp.a, 0)] + ([] if comp.b is None else [(comp.b, 1)])
        for index, side in sides:
            t = tally.setdefault(index, _Tally())
            if result.verdicts == 0:
                t.no_verdict += 1
            elif result.winner is None:
                t.ties += 1
            elif result.winner == side + 1:
                t.wins += 1
            else:
                t.losses += 1
    return tally


def _counted(index: int, reward: float | None, tally: Mapping[int, _Tally]) -> CompletionReward:
    t = tally.get(index, _Tally())
    return CompletionReward(index, reward, t.wins, t.losses, t.ties, t.no_verdict)


def aggregate(completions: Sequence[str], results: Sequence[Result]) -> list[CompletionReward]:
    """One reward per completion, its mean score, from the judged comparisons (scores in (a, b)
    numbering)."""
    scores: dict[int, list[float]] = {i: [] for i in range(len(completions))}
    for comp, result in results:
        if result.verdicts == 0:
            continue
        scores[comp.a].append(result.scores[0])
        if comp.b is not None:
            scores[comp.b].append(result.scores[1])
    tally = _tally(results)
    rewards = []
    for i, text in enumerate(completions):
        if is_empty(text):
            rewards.append(CompletionReward(i, EMPTY_REWARD, empty=True))
            continue
        mine = scores[i]
        reward = math.fsum(mine) / len(mine) if mine else None
        rewards.append(_counted(i, reward, tally))
    return rewards


def failed_reward(rewards: Sequence[float | None]) -> float:
    """The number a trainer that needs one for every sample gets for a completion whose
    judgment failed (reward None): the mean of the group's judged rewards, so that the group's
    mean (the baseline of GRPO-style estimators) is the judged members' and the failed one's
    advantage against it is zero; NO_VERDICT_REWARD when no member was judged (then every
    member gets it, and none has an advantage). Its flag (``judge_failed``) says it is no
    reward; where a trainer can mask a sample, the adapters mask it (docs/rlhf.md)."""
    judged = [r for r in rewards if r is not None]
    return math.fsum(judged) / len(judged) if judged else NO_VERDICT_REWARD


# --- Bradley-Terry ---------------------------------------------------------------------------


def bradley_terry(
    results: Sequence[Result],
    prior_games: float = PRIOR_GAMES,
    tolerance: float = 1e-10,
    max_sweeps: int = 10_000,
) -> dict[int, float]:
    """Bradley-Terry strengths of the completions in ``results``: P(i beats j) is
    p_i / (p_i + p_j), the strengths scaled to a geometric mean of 1.

    Each comparison between two completions counts as one game whose outcome is soft: a's
    share of it is a's debiased score (scores normalised to sum to 1), b's is b's. A tie
    (0.5, 0.5) is half a win each: evidence that the two are close. A comparison without a
    verdict in any order (``verdicts == 0``) says nothing and is left out, as are comparisons
    with the reference; a completion with no comparison left is not in the fit.

    The prior: each completion of the fit gets ``prior_games`` virtual games, half won, spread
    evenly over the k - 1 others (prior_games / (2 (k - 1)) wins each way for every pair). It
    keeps an unbeaten or unbeatable completion finite, joins completions the design never
    connected (they stay at equal strength), and makes the maximum-likelihood fit unique.

    Fitted by Zermelo's iteration (the MM algorithm of Hunter 2004), every strength updated
    at once from the previous sweep's: p_i <- W_i / sum_j n_ij / (p_i + p_j), W_i the wins of i
    (prior included) and n_ij the games between i and j; until no log-strength moves by more
    than ``tolerance``. Sums are exact (``math.fsum``) and the updates simultaneous, so the
    computation does not depend on the completions' order: completions whose evidence is the
    same (up to relabelling) get bit-identical strengths.
    """
    wins: dict[int, list[float]] = {}
    games: dict[tuple[int, int], float] = {}
    for comp, result in results:
        if comp.b is None or result.verdicts == 0:
            continue
        total = result.scores[0] + result.scores[1]
        if total <= 0:
            continue
        a, b = comp.a, comp.b
        wins.setdefault(a, []).append(result.scores[0] / total)
        wins.setdefault(b, []).append(result.scores[1] / total)
        key = (min(a, b), max(a, b))
        games[key] = games.get(key, 0.0) + 1.0
    items = sorted(wins)
    k = len(items)
    if k < 2:
        return {}
    alpha = prior_games / (2 * (k - 1))
    pos = {item: n for n, item in enumerate(items)}
    w = [math.fsum(wins[item]) + alpha * (k - 1) for item in items]
    n = [[0.0 if i == j else 2 * alpha for j in range(k)] for i in range(k)]
    for (a, b), count in games.items():
        n[pos[a]][pos[b]] += count
        n[pos[b]][pos[a]] += count
    p = [1.0] * k
    for _ in range(max_sweeps):
        new = [
            w[i] / math.fsum(n[i][j] / (p[i] + p[j]) for j in range(k) if j != i) for i in range(k)
        ]
        scale = math.exp(math.fsum(math.log(x) for x in new) / k)
        new = [x / scale for x in new]
        moved = max(abs(math.log(x / old)) for x, old in zip(new, p, strict=True))
        p = new
        if moved < tolerance:
            break
    return {item: p[pos[item]] for item in items}


def win_shares(strengths: Mapping[int, float]) -> dict[int, float]:
    """Each completion's mean win probability against the others of the fit,
    mean_j p_i / (p_i + p_j): in (0, 1), 0.5 for the average completion, and the rewards of a
    fit average 0.5. Rounded to ``SHARE_DECIMALS`` places, below the fit's own precision and
    above float noise: where the evidence says two completions are equal (every comparison a
    tie, say) the fit's last bits can still differ, and a trainer's strict argmax must not see
    a winner in them."""
    out = {}
    for i, pi in strengths.items():
        others = [pi / (pi + pj) for j, pj in strengths.items() if j != i]
        out[i] = round(math.fsum(others) / len(others), SHARE_DECIMALS)
    return out


# --- designs ---------------------------------------------------------------------------------


def _log2_ceil(k: int) -> int:
    """ceil(log2 k) for k >= 1 (0 for k < 2)."""
    return (k - 1).bit_length() if k > 1 else 0


def seed_positions(size: int) -> list[int]:
    """Standard bracket positions of seeds 1..size (size a power of two): [1, 2]; [1, 4, 2, 3];
    [1, 8, 4, 5, 2, 7, 3, 6]: seeds 1 and 2 can meet only in the final, byes (the missing
    highest seeds) face the top seeds and never each other."""
    positions = [1]
    while len(positions) < size:
        double = 2 * len(positions)
        positions = [x for s in positions for x in (s, double + 1 - s)]
    return positions


def bracket(order: Sequence[int]) -> list[int | None]:
    """The first round's slots of a knockout of the completions ``order`` (seed 1 first), in
    bracket order, None for a bye; slots 2k and 2k+1 meet."""
    size = 2 ** _log2_ceil(len(order))
    return [order[s - 1] if s <= len(order) else None for s in seed_positions(size)]


def advances(comp: Comparison, result: Debiased) -> int:
    """Who goes through in a knockout: the winner; on a tie or no verdict, a coin drawn from
    the comparison's seed."""
    if result.winner is not None:
        return comp.a if result.winner == 1 else _b(comp)
    return comp.a if random.Random(f"advance:{comp.seed}").random() < 0.5 else _b(comp)


def _b(comp: Comparison) -> int:
    assert comp.b is not None  # completion against completion
    return comp.b


def swiss_pairs(ranked: Sequence[int], played: set[frozenset[int]]) -> list[tuple[int, int]] | None:
    """Pairs of the completions ``ranked`` (best running score first, an even count) in which
    no pair has met before: the first completion against the next one it has not met, and so
    on down, backtracking when the rest cannot be paired; None when no such pairing exists."""
    if not ranked:
        return []
    first, rest = ranked[0], list(ranked[1:])
    for k, other in enumerate(rest):
        if frozenset((first, other)) in played:
            continue
        tail = swiss_pairs(rest[:k] + rest[k + 1 :], played)
        if tail is not None:
            return [(first, other), *tail]
    return None


@dataclass(frozen=True)
class GroupDesign:
    """Which comparisons a group's strategy judges, round by round, and its rewards.

    ``entries`` are the completions judged: the non-empty ones, one per distinct text (the
    others are in ``duplicate_of``, each mapped to the entry that stands for it). ``order`` is
    the seeded draw of the entries that sets a knockout's bracket (seed 1 first) and a swiss
    round's order among equal scores; for the other strategies it is ``entries``.
    """

    strategy: Strategy
    completions: tuple[str, ...]
    seed: int
    entries: tuple[int, ...]
    order: tuple[int, ...]
    duplicate_of: dict[int, int] = field(default_factory=dict)
    pivot: int | None = None

    @property
    def max_rounds(self) -> int:
        """Rounds of the complete design (0 when nothing is to be judged)."""
        if self.strategy in ("knockout", "swiss"):
            return _log2_ceil(len(self.entries))
        return int(bool(_one_round(self.strategy, self.entries, self.seed, self.pivot)))

    def next_round(self, judged: Sequence[Result]) -> list[Comparison]:
        """The comparisons to judge next, given every result so far (of earlier rounds, and of
        this one if some of it was judged): those of the first round not judged in full; []
        once the design is complete."""
        done = {comp for comp, _ in judged}
        for comparisons in self._rounds(dict(judged)):
            missing = [c for c in comparisons if c not in done]
            if missing:
                return missing
        return []

    def rewards(self, judged: Sequence[Result]) -> list[CompletionReward]:
        """One reward per completion, in order, from the judged comparisons (after
        ``next_round`` returned []; scores in (a, b) numbering)."""
        if self.strategy in FITTED:
            rewards = self._fitted(judged)
        else:
            rewards = aggregate(self.completions, judged)
        if len(self.entries) == 1 and self.duplicate_of and not judged:
            # The non-empty completions are all one text: they tie by definition.
            (entry,) = self.entries
            rewards[entry] = replace(rewards[entry], reward=IDENTICAL_REWARD)
        for index, entry in self.duplicate_of.items():
            rewards[index] = replace(rewards[entry], index=index, duplicate_of=entry)
        return rewards

    # The rounds, each computed from the results of the earlier ones; it stops at a round whose
    # results are missing (the caller stops reading there) or when the design is complete.
    def _rounds(self, results: Mapping[Comparison, Debiased]) -> Iterator[list[Comparison]]:
        if self.strategy == "knockout":
            yield from self._knockout(results, {})
        elif self.strategy == "swiss":
            yield from self._swiss(results)
        else:
            comparisons = _one_round(self.strategy, self.entries, self.seed, self.pivot)
            if comparisons:
                yield comparisons

    def _comparison(self, a: int, b: int, round_: int) -> Comparison:
        return Comparison(a, b, comparison_seed(self.seed, a, b), round_)

    def _knockout(
        self, results: Mapping[Comparison, Debiased], survived: dict[int, int]
    ) -> Iterator[list[Comparison]]:
        """Single elimination over ``bracket(order)``; fills ``survived`` (rounds survived per
        entry, byes included) as results come."""
        slots = bracket(self.order)
        round_ = 1
        for entry in self.order:
            survived[entry] = 0
        while len(slots) > 1:
            pairs = list(zip(slots[::2], slots[1::2], strict=True))
            comparisons = {
                k: self._comparison(a, b, round_)
                for k, (a, b) in enumerate(pairs)
                if a is not None and b is not None
            }
            if comparisons:
                yield list(comparisons.values())
            if any(c not in results for c in comparisons.values()):
                return
            winners: list[int | None] = []
            for k, (a, b) in enumerate(pairs):
                comp = comparisons.get(k)
                winners.append(advances(comp, results[comp]) if comp else (a if b is None else b))
            for winner in winners:
                if winner is not None:
                    survived[winner] += 1
            slots = winners
            round_ += 1

    def _swiss(self, results: Mapping[Comparison, Debiased]) -> Iterator[list[Comparison]]:
        """Rounds pairing the entries ranked by running score: points (a win 1, a tie or no
        verdict 0.5 each, a bye 0.5), then the sum of their debiased scores (a bye 0.5), then
        the seeded order. With an odd count, the lowest-ranked entry that has not had a bye
        sits the round out. No pair meets twice; if no such pairing is left the design ends
        early."""
        position = {entry: k for k, entry in enumerate(self.order)}
        points = dict.fromkeys(self.order, 0.0)
        soft = dict.fromkeys(self.order, 0.0)
        played: set[frozenset[int]] = set()
        had_bye: set[int] = set()
        for round_ in range(1, self.max_rounds + 1):
            ranked = sorted(self.order, key=lambda i: (-points[i], -soft[i], position[i]))
            found = self._swiss_round(ranked, played, had_bye)
            if found is None:
                return
            pairs, bye = found
            comparisons = [self._comparison(a, b, round_) for a, b in pairs]
            yield comparisons
            if any(c not in results for c in comparisons):
                return
            for comp in comparisons:
                result, b = results[comp], _b(comp)
                played.add(frozenset((comp.a, b)))
                soft[comp.a] += result.scores[0]
                soft[b] += result.scores[1]
                if result.winner is None:
                    points[comp.a] += 0.5
                    points[b] += 0.5
                else:
                    points[comp.a if result.winner == 1 else b] += 1.0
            if bye is not None:
                had_bye.add(bye)
                points[bye] += 0.5
                soft[bye] += 0.5

    @staticmethod
    def _swiss_round(
        ranked: list[int], played: set[frozenset[int]], had_bye: set[int]
    ) -> tuple[list[tuple[int, int]], int | None] | None:
        if len(ranked) % 2 == 0:
            pairs = swiss_pairs(ranked, played)
            return None if pairs is None else (pairs, None)
        for bye in reversed(ranked):
            if bye in had_bye:
                continue
            pairs = swiss_pairs([i for i in ranked if i != bye], played)
            if pairs is not None:
                return pairs, bye
        return None

    def rounds_survived(self, judged: Sequence[Result]) -> dict[int, int]:
        """Knockout: the rounds each entry went through so far, byes included ({} otherwise)."""
        survived: dict[int, int] = {}
        if self.strategy == "knockout":
            for _ in self._knockout(dict(judged), survived):
                pass
        return survived

    def _fitted(self, judged: Sequence[Result]) -> list[CompletionReward]:
        shares = win_shares(bradley_terry(judged))
        survived = self.rounds_survived(judged)
        tally = _tally(judged)
        rewards = []
        for i, text in enumerate(self.completions):
            if is_empty(text):
                rewards.append(CompletionReward(i, EMPTY_REWARD, empty=True))
                continue
            reward = replace(_counted(i, shares.get(i), tally), rounds_survived=survived.get(i))
            rewards.append(reward)
        return rewards


def design(
    strategy: Strategy, completions: Sequence[str], seed: int, pivot: int | None = None
) -> GroupDesign:
    """The design of a group: ``pivot`` (strategy ``pivot`` only; default ``choose_pivot``)."""
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown strategy {strategy!r}")
    chosen = None
    if strategy == "pivot":
        chosen = choose_pivot(completions) if pivot is None else pivot
    first: dict[str, int] = {}
    classes: dict[int, list[int]] = {}
    for i, text in enumerate(completions):
        if not is_empty(text):
            entry = first.setdefault(normalised(text), i)
            classes.setdefault(entry, []).append(i)
    entries, duplicate_of = [], {}
    for members in classes.values():
        entry = chosen if chosen in members else members[0]
        entries.append(entry)
        duplicate_of.update({m: entry for m in members if m != entry})
    entries.sort()
    order = list(entries)
    if strategy in ("knockout", "swiss"):
        random.Random(f"{strategy}:{seed}").shuffle(order)
    return GroupDesign(
        strategy, tuple(completions), seed, tuple(entries), tuple(order), duplicate_of, chosen
    )


def judgments(strategy: Strategy, n: int, debias: Literal["none", "swap"]) -> int:
    """Judgments a group of ``n`` distinct non-empty completions takes: its design driven to
    the end, the first-named completion winning every comparison (the counts do not depend on
    the outcomes), times 2 with debias swap."""
    d = design(strategy, [f"completion {i}" for i in range(n)], seed=0)
    win = Debiased((1.0, 0.0), 1, 1, (1,), ((1.0, 0.0),), None)
    judged: list[Result] = []
    while comparisons := d.next_round(judged):
        judged += [(c, win) for c in comparisons]
    return len(judged) * (2 if debias == "swap" else 1)
