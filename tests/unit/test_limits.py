"""The validation seam (serving/limits.py): what a call leaves unset takes the settings' default,
and what it asks beyond the settings' bounds is refused naming the setting, before any judging."""

from __future__ import annotations

from typing import Any

import pytest

from reflectrm.judging.types import Message
from reflectrm.serving.errors import InvalidRequestError, TooMuchWorkError
from reflectrm.serving.limits import Limits
from reflectrm.serving.types import (
    FailedItem,
    GroupAsk,
    MemberAsk,
    Options,
    PairAsk,
    SampleAsk,
    SampleOptions,
)
from reflectrm.settings import Settings

CONVERSATION = (Message("user", "Which is better?"),)


def limits(**settings: Any) -> Limits:
    return Limits(Settings(**settings))


def pair(**options: Any) -> PairAsk:
    return PairAsk(conversation=CONVERSATION, responses=("a", "b"), options=Options(**options))


def test_a_pair_takes_the_settings_defaults_and_keeps_what_it_asked() -> None:
    request = limits(num_candidates=5, max_tokens=300).pair_request(pair(seed=7))
    assert (request.num_candidates, request.max_tokens, request.seed) == (5, 300, 7)
    asked = limits().pair_request(pair(num_candidates=3, max_tokens=64, seed=1))
    assert (asked.num_candidates, asked.max_tokens) == (3, 64)


def test_an_unseeded_pair_draws_a_seed() -> None:
    seeds = {limits().pair_request(pair()).seed for _ in range(8)}
    assert len(seeds) > 1
    assert all(0 <= s < 2**31 for s in seeds)


def test_max_tokens_over_the_limit_is_refused_naming_the_setting() -> None:
    with pytest.raises(InvalidRequestError, match=r"max_tokens is 513.*REFLECTRM_MAX_TOKENS_LIMIT"):
        limits(max_tokens_limit=512).pair_request(pair(max_tokens=513))


def test_ablations_need_the_setting() -> None:
    with pytest.raises(InvalidRequestError, match="REFLECTRM_ALLOW_ABLATIONS"):
        limits().pair_request(pair(ablation="random_anchor"))
    assert limits(allow_ablations=True).pair_request(pair(ablation="random_anchor"))


def test_a_pair_in_both_orders_is_twice_the_work() -> None:
    bound = limits(max_call_work_tokens=2 * 8 * 100 - 1)
    ask = pair(debias="swap", num_candidates=8, max_tokens=100)
    with pytest.raises(
        TooMuchWorkError, match="2 judgments x 8 candidates x 100 max_tokens = 1600"
    ):
        bound.check_pair(ask, bound.pair_request(ask))
    single = pair(num_candidates=8, max_tokens=100)
    bound.check_pair(single, bound.pair_request(single))


def test_a_batch_is_bounded_in_items_and_failed_items_add_no_work() -> None:
    ok = pair(num_candidates=1, max_tokens=100)
    failed = FailedItem("reflect", InvalidRequestError("bad"))
    with pytest.raises(InvalidRequestError, match=r"3 items.*REFLECTRM_MAX_BATCH_ITEMS"):
        limits(max_batch_items=2).check_batch([ok, ok, failed])
    limits(max_call_work_tokens=200).check_batch([ok, ok, failed])
    with pytest.raises(TooMuchWorkError, match=r"3 judgments.*summed = 300"):
        limits(max_call_work_tokens=200).check_batch([ok, ok, ok])


def test_a_group_is_bounded_in_completions() -> None:
    ask = GroupAsk(conversation=CONVERSATION, completions=("a", "b", "c"), strategy="round_robin")
    with pytest.raises(InvalidRequestError, match=r"3 completions.*REFLECTRM_MAX_GROUP_SIZE"):
        limits(max_group_size=2).group_spec(ask)
    spec = limits(num_candidates=4).group_spec(ask)
    assert (spec.judging.num_candidates, spec.judging.debias, spec.seed_drawn) == (4, "swap", True)


def member(**ask: Any) -> MemberAsk:
    fields: dict[str, Any] = {"group_size": 4, "strategy": "round_robin", **ask}
    options = {k: fields.pop(k) for k in ("debias", "num_candidates", "max_tokens") if k in fields}
    return MemberAsk(CONVERSATION, "a", **fields, options=Options(**options))


def test_a_cohorts_terms_are_bounded() -> None:
    with pytest.raises(InvalidRequestError, match="group_size is 5; a cohort has 2 to 4"):
        limits(max_group_size=4).cohort_terms(member(group_size=5))
    with pytest.raises(InvalidRequestError, match="without group_size"):
        limits().cohort_terms(member(strategy="reference"))
    with pytest.raises(InvalidRequestError, match="REFLECTRM_MAX_COHORT_TIMEOUT_S"):
        limits(max_cohort_timeout_s=10).cohort_terms(member(cohort_timeout_s=11))
    terms = limits(cohort_timeout_s=5, num_candidates=2).cohort_terms(member())
    assert (terms.timeout_s, terms.judging.num_candidates, terms.judging.seed) == (5, 2, None)


def test_a_cohort_is_bounded_by_its_whole_groups_work() -> None:
    # Round robin of 4 with both orders: 12 judgments.
    ask = member(debias="swap", num_candidates=1, max_tokens=100)
    limits(max_call_work_tokens=1200).cohort_terms(ask)
    with pytest.raises(TooMuchWorkError, match="12 judgments"):
        limits(max_call_work_tokens=1199).cohort_terms(ask)


def test_each_sample_needs_a_label_and_a_query_that_starts_with_its_prompt() -> None:
    options = SampleOptions()
    good = SampleAsk(query="question answer", prompt="question ", label="ref")
    (spec,) = limits().sample_specs([good], options)
    assert (spec.completions, spec.reference, spec.strategy) == (("answer",), "ref", "reference")
    with pytest.raises(InvalidRequestError, match="sample 0: no label"):
        limits().sample_specs([SampleAsk(query="q a", prompt="q ", label=" ")], options)
    with pytest.raises(InvalidRequestError, match="sample 0: `query` does not start"):
        limits().sample_specs([SampleAsk(query="other", prompt="q ", label="r")], options)
    with pytest.raises(InvalidRequestError, match=r"2 samples.*REFLECTRM_MAX_BATCH_ITEMS"):
        limits(max_batch_items=1).sample_specs([good, good], options)


def test_max_tokens_below_the_served_judges_format_floor_is_refused_per_mode() -> None:
    # A judge whose format takes 23 tokens in single and vote mode, 24 in reflect mode (the
    # default model's figures); before a judge is served nothing is checked.
    lim = limits()
    assert lim.max_tokens(16, "reflect") == 16
    lim.format_floor = lambda mode: 24 if mode == "reflect" else 23
    lim.template_version = "v9"
    assert lim.max_tokens(23, "single") == 23
    with pytest.raises(InvalidRequestError) as refused:
        lim.max_tokens(23, "reflect")
    assert str(refused.value).startswith(
        "max_tokens is 23; an output in the enforced format (REFLECTRM_ENFORCE_FORMAT) needs at "
        "least 24 tokens in reflect mode with this model's tokenizer and template v9"
    )
    assert lim.pair_request(pair(mode="vote", max_tokens=23)).max_tokens == 23
    with pytest.raises(InvalidRequestError, match="at least 23 tokens in vote mode"):
        lim.pair_request(pair(mode="vote", max_tokens=22))
