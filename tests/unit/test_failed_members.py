"""A group member whose judgment failed (every comparison without a verdict) is left out of the
Bradley-Terry fit and of the group's mean, and a trainer that needs a number for it gets the mean
of the judged members' rewards (judging/groups.py ``failed_reward``), not 0.5."""

from __future__ import annotations

import pytest

from reflectrm.judging.debias import Debiased
from reflectrm.judging.groups import (
    Comparison,
    bradley_terry,
    design,
    failed_reward,
    win_shares,
)

SILENT = Debiased((0.5, 0.5), None, 0, (None, None), ((0.5, 0.5), (0.5, 0.5)), None)


def won(share: float) -> Debiased:
    return Debiased(
        (share, 1 - share), 1, 2, (1, 1), ((share, 1 - share), (share, 1 - share)), True
    )


def test_the_fit_leaves_a_member_without_verdicts_out_as_if_it_were_not_there():
    # circular over 4: (0, 1), (1, 2), (2, 3), (3, 0); member 3's two comparisons are silent.
    d = design("circular", ["a", "bb", "ccc", "dddd"], seed=1)
    results = []
    for c in d.next_round([]):
        silent = 3 in (c.a, c.b)
        results.append((c, SILENT if silent else won(0.75)))
    kept = [(c, r) for c, r in results if 3 not in (c.a, c.b)]
    fit = bradley_terry(results)
    assert 3 not in fit
    # The prior is spread over the fitted members only: the same strengths as without it.
    assert fit == bradley_terry(kept)
    rewards = d.rewards(results)
    assert rewards[3].reward is None
    assert rewards[3].no_verdict == 2
    shares = win_shares(fit)
    assert [r.reward for r in rewards[:3]] == [shares[0], shares[1], shares[2]]
    assert sum(shares.values()) / 3 == pytest.approx(0.5)  # the fitted members' mean


def test_a_failed_member_gets_the_judged_members_mean():
    group = [1.0, None, 0.0, 0.5, 0.9]
    filler = failed_reward(group)
    assert filler == pytest.approx(0.6)  # (1.0 + 0.0 + 0.5 + 0.9) / 4
    filled = [filler if r is None else r for r in group]
    # The group's mean (GRPO's baseline) is the judged members', the failed one's advantage 0.
    assert sum(filled) / 5 == pytest.approx(0.6)
    assert filled[1] - sum(filled) / 5 == pytest.approx(0.0)


def test_with_no_member_judged_every_member_gets_the_same_neutral_number():
    assert failed_reward([None, None]) == 0.5
    assert failed_reward([]) == 0.5


def test_a_round_robin_member_without_verdicts_has_no_reward_and_others_keep_theirs():
    d = design("round_robin", ["a", "bb", "ccc"], seed=2)
    results = [(c, SILENT if 2 in (c.a, c.b) else won(0.75)) for c in d.next_round([])]
    rewards = d.rewards(results)
    assert [r.reward for r in rewards] == [0.75, 0.25, None]
    assert isinstance(results[0][0], Comparison)
