"""The steps that built the qwen05b judge (``states``, ``pool``, ``readout``, ``marker_layer``), on
cases worked out by hand: where a marker ends, the round robin of a states pass, the split by
prompt, the length weights and the logistic fit every readout and probe uses."""

from __future__ import annotations

import math

import pytest
import torch

from reflectrm.judging.types import Message
from reflectrm_harness.datasets import Pair
from reflectrm_harness.training.judge.marker_layer import fit_probe, unit_norm
from reflectrm_harness.training.judge.model import fit_logistic
from reflectrm_harness.training.judge.pool import PoolConfig, role_of
from reflectrm_harness.training.judge.readout import length_weights
from reflectrm_harness.training.judge.states import both_orders, find_after, interleave


def pair(prompt: str, chosen: str = "a", rejected: str = "bb", pid: str = "p") -> Pair:
    return Pair(pid, (Message("user", prompt),), chosen, rejected)


def test_find_after_gives_the_token_just_after_the_first_or_last_match() -> None:
    ids = [5, 1, 2, 9, 1, 2, 7]
    assert find_after(ids, [1, 2]) == 3
    assert find_after(ids, [1, 2], last=True) == 6
    assert find_after(ids, [3]) is None
    # A match with no token after it is no position to read.
    assert find_after([1, 2], [1, 2]) is None


def test_interleave_takes_the_buckets_in_turn() -> None:
    assert interleave([[1, 2, 3], [4], [5, 6]]) == [1, 4, 5, 2, 6, 3]
    assert interleave([]) == []


def test_both_orders_are_two_items_that_know_which_response_is_longer() -> None:
    first, second = both_orders(pair("q", chosen="a", rejected="bb"), "src", "train", False)
    assert (first.chosen_first, second.chosen_first) == (True, False)
    assert first.chosen_longer is False
    assert both_orders(pair("q", "ab", "cd"), "src", "dev", False)[0].chosen_longer is None


def test_the_split_is_by_prompt_and_follows_the_fractions() -> None:
    config = PoolConfig()
    roles = [role_of(pair(f"question {i}"), config) for i in range(4000)]
    assert abs(roles.count("heldout") / 4000 - 0.22) < 0.03
    assert abs(roles.count("dev") / 4000 - 0.15) < 0.03
    # Every pair of one conversation lands in one role, whatever its responses.
    assert role_of(pair("question 7", "x", "y"), config) == roles[7]
    assert role_of(pair("q"), PoolConfig(heldout_fraction=1.0)) == "heldout"
    assert role_of(pair("q"), PoolConfig(heldout_fraction=0.0, dev_fraction=0.0)) == "train"


def test_length_weights_halve_each_sources_weight_between_its_strata() -> None:
    keys = [("a", "1"), ("a", "2"), ("a", "3"), ("b", "4")]
    longer = {("a", "1"): True, ("a", "2"): True, ("a", "3"): False, ("b", "4"): None}
    # a: two longer-better pairs share 1/2, the shorter-better one has 1/2; b's tie weighs 1/2.
    assert length_weights(keys, longer) == [0.25, 0.25, 0.5, 0.5]
    assert length_weights(keys, longer, {"a": 2.0}) == [0.5, 0.5, 1.0, 0.5]


@pytest.mark.parametrize("penalty", [0.25, 0.05])
def test_the_logistic_fit_finds_the_penalised_optimum(penalty: float) -> None:
    # Two mirrored points: the loss is softplus(-w) + penalty * w^2, whose minimum satisfies
    # sigmoid(-w) = 2 * penalty * w (0.6749 for penalty 0.25).
    (w,), _ = fit_logistic([[1.0], [-1.0]], [1.0, -1.0], penalty, weights=[0.5, 0.5])
    assert 1 / (1 + math.exp(w)) == pytest.approx(2 * penalty * w, abs=1e-4)
    if penalty == 0.25:
        assert w == pytest.approx(0.6749, abs=1e-3)


def test_the_logistic_fit_adds_the_offset_to_the_score() -> None:
    # An offset that already separates the points leaves less for the weight to do.
    (plain,), _ = fit_logistic([[1.0], [-1.0]], [1.0, -1.0], 0.05)
    (offset,), _ = fit_logistic([[1.0], [-1.0]], [1.0, -1.0], 0.05, offset=[2.0, -2.0])
    assert 0 < offset < plain


def test_a_marker_probe_separates_markers_from_other_positions() -> None:
    pos = torch.tensor([[2.0, 0.0], [3.0, 0.5]])
    others = torch.tensor([[-2.0, 0.0], [-1.0, 0.5], [-3.0, -0.5]])
    coef, bias = fit_probe(pos, others, 1e-3)
    scores_pos = pos.numpy() @ coef + bias
    scores_others = others.numpy() @ coef + bias
    assert scores_pos.min() > 0 > scores_others.max()


def test_unit_norm_gives_each_state_a_root_mean_square_of_one() -> None:
    h = torch.tensor([[3.0, 4.0], [1.0, 1.0]])
    out = unit_norm(h, 0.0)
    # [3, 4]: mean square 12.5, so divided by sqrt(12.5).
    assert out[0].tolist() == pytest.approx([3 / math.sqrt(12.5), 4 / math.sqrt(12.5)])
    assert (out * out).mean(-1).tolist() == pytest.approx([1.0, 1.0])
