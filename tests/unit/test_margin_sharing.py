"""Margin mode's engine work: the verdict digits read by token id (the top-20 list as the
fallback, same scores wherever both digits are in it), and one likelihood pass per (conversation,
response) shared in flight by every judgment that needs it, its engine work reported once."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import pytest

from reflectrm.engines.base import (
    EngineError,
    Generation,
    GenerationResult,
    Prompt,
    SamplingSpec,
)
from reflectrm.judging.judge import Judge, JudgeConfig, swapped
from reflectrm.judging.prompts import answer_chat, margin_chat
from reflectrm.judging.types import EngineUsage, JudgmentSpec, Message
from reflectrm.judging.verdicts import digit_pair, digit_probabilities
from tests.conftest import ScriptedEngine

LN = math.log
CONVERSATION = (Message("user", "What is the capital of France?"),)
PARIS, BERLIN = "Paris is the capital of France.", "Berlin."
# Each response's mean token log-prob given the conversation.
LIKELIHOOD = {PARIS: -0.5, BERLIN: -2.5}


def sigmoid(z: float) -> float:
    return 1 / (1 + math.exp(-z))


@dataclass
class TwoDigitEngine(ScriptedEngine):
    """The verdict digits' log-probs fixed by the response shown first (``digits``); every
    token of a response at its ``LIKELIHOOD``. ``by_id``: the digits' own log-probs are given
    when asked for by token id (vLLM's ``logprob_token_ids``); else (an engine that ignores
    them) the likeliest 20 tokens of the position, the digits among them where they rank.
    ``cached``: the prefix-cache hit a pass that may read the cache gets (its first tokens'
    log-probs NaN). ``fail_passes``: how many likelihood passes fail before one succeeds."""

    digits: dict[str, tuple[float, float]] = field(default_factory=dict)
    by_id: bool = True
    cached: int = 0
    fail_passes: int = 0
    passes_started: int = 0
    prompt_tokens: int = 0

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        self.prompt_tokens += prompt.num_tokens
        if not spec.prompt_logprobs:
            self.calls.append((prompt.text, spec))
            first = PARIS if prompt.text.index(PARIS) < prompt.text.index(BERLIN) else BERLIN
            lp1, lp2 = self.digits[first]
            if self.by_id and spec.logprob_token_ids:
                g = Generation(" 1", (lp1,), "length", (" 1",), asked_logprobs=((lp1, lp2),))
            else:
                # 19 other tokens at log-probs from -3 down to -4.8, and the digits where they
                # rank among them: the likeliest 20 (a digit below the 20th is not listed).
                others = [(f" w{k}", -3.0 - 0.1 * k) for k in range(19)]
                listed = sorted([*others, (" 1", lp1), (" 2", lp2)], key=lambda t: -t[1])[:20]
                g = Generation(" 1", (lp1,), "length", (" 1",), (tuple(listed),))
            return GenerationResult((g,), prompt.num_tokens)
        self.calls.append((prompt.text, spec))
        self.passes_started += 1
        try:
            await asyncio.sleep(self.delay_s)
        except asyncio.CancelledError:
            self.aborted += 1
            raise
        if self.fail_passes:
            self.fail_passes -= 1
            raise EngineError("the engine failed this pass")
        lp = LIKELIHOOD[PARIS] if prompt.text.endswith(PARIS) else LIKELIHOOD[BERLIN]
        logprobs = [lp] * (prompt.num_tokens - 1)
        hit = min(self.cached, prompt.num_tokens - 1) if spec.prompt_logprobs_start else 0
        logprobs[:hit] = [math.nan] * hit
        return GenerationResult(
            (Generation("x", (-1.0,), "length"),),
            prompt.num_tokens,
            cached_prompt_tokens=hit,
            prompt_logprobs=tuple(logprobs),
        )

    @property
    def passes(self) -> list[SamplingSpec]:
        return [spec for _, spec in self.calls if spec.prompt_logprobs]

    @property
    def verdicts(self) -> list[SamplingSpec]:
        return [spec for _, spec in self.calls if not spec.prompt_logprobs]


async def until(condition: Callable[[], bool], timeout_s: float = 5.0) -> None:
    """Wait (polling) until ``condition()`` holds; fail after ``timeout_s``."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.005)


def pair(first: str = PARIS, second: str = BERLIN) -> JudgmentSpec:
    return JudgmentSpec(CONVERSATION, (first, second), mode="margin")


def weighted(a: float = 0.5, w: float = 2.0) -> JudgeConfig:
    return JudgeConfig(margin_verdict_weight=a, margin_likelihood_weight=w)


# --- the verdict digits, read by token id ------------------------------------------------------


async def test_margin_mode_asks_for_the_two_verdict_digits_by_token_id():
    engine = TwoDigitEngine(digits={PARIS: (LN(0.6), LN(0.2))})
    judge = Judge(engine, JudgeConfig())
    await judge.judge(pair(), "a")
    ones, twos = (
        engine.render_chat(margin_chat(judge.template, CONVERSATION, "a", "b", k)).token_ids
        for k in (1, 2)
    )
    (spec,) = engine.verdicts
    assert spec.logprob_token_ids == (ones[-1], twos[-1])
    assert spec.top_logprobs == 20  # the fallback for an engine that ignores the ids


def test_the_two_digits_own_probabilities_are_the_listed_ones_renormalised():
    # Both digits in the list: digit_pair is digit_probabilities up to float noise.
    lp1, lp2 = LN(0.6), LN(0.2)
    listed = ((" 1", lp1), (" 2", lp2), (" The", LN(0.1)))
    assert digit_pair((lp1, lp2)) == pytest.approx(digit_probabilities(listed), rel=1e-12)
    assert digit_pair((lp1, lp2)) == pytest.approx((0.75, 0.25), rel=1e-12)
    # Far apart: neither is 0 (margin mode takes their logs), the ratio exact.
    p1, p2 = digit_pair((-0.01, -800.0))
    assert p2 > 0
    assert LN(p1) - LN(p2) == pytest.approx(700.0)
    assert digit_pair((-math.inf, -math.inf)) is None


@pytest.mark.parametrize("by_id", [True, False])
async def test_margin_scores_are_todays_wherever_both_digits_are_in_the_top_20(by_id: bool):
    # Paris shown first: the digits at 0.6 and 0.2; Berlin first: 0.3 and 0.5. Both orders'
    # digits rank within the top 20 (the others are -3 and below), so the top-20 reading (the
    # fallback) and the by-id reading give the same, hand-computed, scores.
    digits = {PARIS: (LN(0.6), LN(0.2)), BERLIN: (LN(0.3), LN(0.5))}
    engine = TwoDigitEngine(digits=digits, by_id=by_id)
    judge = Judge(engine, weighted(a=0.5, w=2.0))
    first = await judge.judge(pair(), "a")
    second = await judge.judge(swapped(pair()), "b")
    # z = a * (ln p1 - ln p2) + w * (l1 - l2), l the responses' mean token log-probs.
    z_first = 0.5 * LN(0.6 / 0.2) + 2.0 * (-0.5 - -2.5)
    z_second = 0.5 * LN(0.3 / 0.5) + 2.0 * (-2.5 - -0.5)
    assert first.scores == pytest.approx((sigmoid(z_first), 1 - sigmoid(z_first)), rel=1e-12)
    assert second.scores == pytest.approx((sigmoid(z_second), 1 - sigmoid(z_second)), rel=1e-12)
    assert first.trace.candidates[0].likelihoods == (-0.5, -2.5)
    assert all(spec.logprob_token_ids for spec in engine.verdicts)  # asked by id either way
    # Without weights (a = 1, w = 0) the scores are the two digits renormalised.
    plain = await Judge(engine, JudgeConfig()).judge(pair(), "c")
    assert plain.scores == pytest.approx((0.75, 0.25), rel=1e-12)


async def test_a_digit_below_the_top_20_is_read_exactly_not_at_the_lists_floor():
    # Berlin's digit at -12, below the 20 listed tokens (the 20th at -4.8).
    digits = {PARIS: (LN(0.6), -12.0)}
    exact = await Judge(TwoDigitEngine(digits=digits), JudgeConfig()).judge(pair(), "a")
    p2 = math.exp(-12.0) / (0.6 + math.exp(-12.0))
    assert exact.scores[1] == pytest.approx(p2, rel=1e-9)
    # The top-20 reading gives the missing digit the least listed probability (an upper bound).
    floor = await Judge(TwoDigitEngine(digits=digits, by_id=False), JudgeConfig()).judge(
        pair(), "b"
    )
    assert floor.scores[1] > 1000 * exact.scores[1]


# --- one likelihood pass per (conversation, response), shared in flight ------------------------


async def test_both_orders_at_once_make_two_verdict_reads_and_two_likelihood_passes():
    # Paris against Berlin in both orders concurrently, as debias swap runs them.
    digits = {PARIS: (LN(0.6), LN(0.2)), BERLIN: (LN(0.3), LN(0.5))}
    engine = TwoDigitEngine(digits=digits, delay_s=0.05)
    judge = Judge(engine, weighted())
    first, second = await asyncio.gather(
        judge.judge(pair(), "a"), judge.judge(swapped(pair()), "b")
    )
    assert (len(engine.verdicts), len(engine.passes)) == (2, 2)
    # The two judgments' usage adds up to the engine's work, each pass counted once.
    usage = first.usage + second.usage
    assert usage.engine_requests == len(engine.calls) == 4
    assert usage.prompt_tokens == engine.prompt_tokens
    assert second.trace.candidates[0].likelihoods == (-2.5, -0.5)


async def test_concurrent_callers_of_one_response_share_its_pass_and_its_usage_is_reported_once():
    engine = TwoDigitEngine(delay_s=0.05, cached=3)
    judge = Judge(engine, weighted())
    answers = await asyncio.gather(
        *(judge.likelihood(CONVERSATION, PARIS, f"r{k}") for k in range(3))
    )
    assert engine.passes_started == 1
    assert [value for value, _ in answers] == [-0.5] * 3
    usages = [usage for _, usage in answers]
    assert sum(usages, EngineUsage()) == usages[0]
    assert usages[0].engine_requests == 1
    assert usages[0].cached_prompt_tokens == 3
    # Finished, the value is kept: no more engine work.
    assert await judge.likelihood(CONVERSATION, PARIS, "r4") == (-0.5, EngineUsage())
    assert engine.passes_started == 1


async def test_a_failed_pass_fails_its_waiters_and_the_next_caller_runs_it_again():
    engine = TwoDigitEngine(delay_s=0.05, fail_passes=1)
    judge = Judge(engine, weighted())
    failed = await asyncio.gather(
        judge.likelihood(CONVERSATION, PARIS, "a"),
        judge.likelihood(CONVERSATION, PARIS, "b"),
        return_exceptions=True,
    )
    assert all(isinstance(f, EngineError) for f in failed)
    assert engine.passes_started == 1  # the two callers shared the one pass that failed
    value, usage = await judge.likelihood(CONVERSATION, PARIS, "c")
    assert (value, usage.engine_requests, engine.passes_started) == (-0.5, 1, 2)


async def test_a_cancelled_caller_leaves_the_pass_to_the_others():
    engine = TwoDigitEngine(delay_s=0.1)
    judge = Judge(engine, weighted())
    leaving = asyncio.ensure_future(judge.likelihood(CONVERSATION, PARIS, "a"))
    staying = asyncio.ensure_future(judge.likelihood(CONVERSATION, PARIS, "b"))
    await until(lambda: engine.passes_started == 1)
    leaving.cancel()
    value, usage = await asyncio.wait_for(staying, 5)
    assert leaving.cancelled()
    assert (value, engine.passes_started, engine.aborted) == (-0.5, 1, 0)
    # The caller that got the answer reports the pass's work: nobody else did.
    assert usage.engine_requests == 1


async def test_a_pass_nobody_waits_for_is_aborted_and_a_later_caller_runs_its_own():
    engine = TwoDigitEngine(delay_s=0.1)
    judge = Judge(engine, weighted())
    callers = [asyncio.ensure_future(judge.likelihood(CONVERSATION, PARIS, k)) for k in "ab"]
    await until(lambda: engine.passes_started == 1)
    for caller in callers:
        caller.cancel()
    await asyncio.gather(*callers, return_exceptions=True)
    await until(lambda: engine.aborted == 1)  # the pass's own cancellation reaches the engine
    assert engine.passes_started == 1
    # Nothing of it hangs a later caller: it runs a pass of its own.
    value, usage = await asyncio.wait_for(judge.likelihood(CONVERSATION, PARIS, "c"), 5)
    assert (value, usage.engine_requests, engine.passes_started) == (-0.5, 1, 2)


# --- the pass reads the conversation from the prefix cache where the engine can ----------------


async def test_the_pass_asks_for_the_responses_log_probs_from_its_first_token_on():
    engine = TwoDigitEngine(cached=4)
    judge = Judge(engine, weighted())
    value, usage = await judge.likelihood(CONVERSATION, PARIS, "a")
    (spec,) = engine.passes
    # The response's first token is where the chat without it ends.
    question = engine.render_chat(answer_chat(CONVERSATION, "")[:-1])
    assert spec.prompt_logprobs_start == question.num_tokens
    assert (value, usage.engine_requests, usage.cached_prompt_tokens) == (-0.5, 1, 4)


async def test_a_cache_hit_reaching_into_the_response_is_asked_again_without_the_cache():
    # The whole conversation and the response's first tokens came from the cache: their
    # log-probs were not computed, so the pass is asked again from token 0.
    engine = TwoDigitEngine(cached=10_000)
    judge = Judge(engine, weighted())
    value, usage = await judge.likelihood(CONVERSATION, PARIS, "a")
    assert [spec.prompt_logprobs_start > 0 for spec in engine.passes] == [True, False]
    assert (value, usage.engine_requests) == (-0.5, 2)
