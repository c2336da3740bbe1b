"""Verdict probabilities: read at the digit that decides, pooled over both orders, and the
fallback to vote shares named in the judgment."""

from __future__ import annotations

import math

import pytest

from reflectrm.engines.base import Generation, GenerationResult, Prompt, SamplingSpec
from reflectrm.judging.answers import answer_pair
from reflectrm.judging.judge import Judge, JudgeConfig, swapped
from reflectrm.judging.types import JudgmentSpec, Message
from reflectrm.judging.verdicts import deciding_index, digit_probabilities, verdict_probabilities
from tests.conftest import ScriptedEngine, judgment

LN = math.log


def test_digit_probabilities_renormalise_over_the_two_digits():
    # 0.6 and 0.2 of the mass on "1" and "2" (the rest elsewhere): 0.75 / 0.25.
    alts = ((" 1", LN(0.6)), ("2", LN(0.2)), (" The", LN(0.1)))
    p1, p2 = digit_probabilities(alts)
    assert (round(p1, 9), round(p2, 9)) == (0.75, 0.25)


def test_a_digit_missing_from_the_list_gets_the_least_listed_probability():
    # "2" is not listed: it is below every listed token, at most 0.1: p1 = 0.6 / 0.7.
    p1, _ = digit_probabilities(((" 1", LN(0.6)), (" x", LN(0.1))))
    assert p1 == pytest.approx(0.6 / 0.7)
    assert digit_probabilities(((" x", LN(0.9)),)) is None


def test_the_deciding_digit_is_the_results_or_the_decision_first_leads():
    tokens = ["<Analysis>", "Response", " ", "2", " is", " long", "</Analysis>", "\n",
              "<Result>", "Response", " ", "1", " is", " better"]  # fmt: skip
    assert deciding_index(tokens, at_result=True) == 11
    assert deciding_index(tokens, at_result=False) == 3
    assert deciding_index(["<Analysis>", "fine", "</Analysis>"], at_result=True) is None


def _generation(tokens: list[str], alternatives: dict[int, tuple]) -> Generation:
    top = tuple(alternatives.get(k, ((t, 0.0),)) for k, t in enumerate(tokens))
    return Generation("".join(tokens), (0.0,) * len(tokens), "stop", tuple(tokens), top)


def test_verdict_probabilities_need_the_parsed_verdict_at_the_deciding_digit():
    tokens = ["<Result>", "Response", " 2", " is", " better", " than", " Response", " 1"]
    g = _generation(tokens, {2: ((" 2", LN(0.3)), (" 1", LN(0.1)))})
    assert verdict_probabilities(g, 2, at_result=True) == pytest.approx((0.25, 0.75))
    # The parser read another verdict than the digit found: neither reading is trusted.
    assert verdict_probabilities(g, 1, at_result=True) is None
    # An engine that returned no alternatives (a fleet that ignored the request).
    bare = Generation(g.text, g.token_logprobs, "stop")
    assert verdict_probabilities(bare, 2, at_result=True) is None


def _request(**kw) -> JudgmentSpec:
    return JudgmentSpec((Message("user", "What is 2+2?"),), ("4", "5"), **kw)


async def test_without_probabilities_scores_fall_back_to_vote_shares_and_say_so():
    # The scripted outputs carry no alternatives: 3 of 4 voters say Response 1.
    engine = ScriptedEngine(stage1=[judgment(1), judgment(1), judgment(2), judgment(1)])
    j = await Judge(engine, JudgeConfig()).judge(_request(mode="vote", num_candidates=4), "x")
    assert (j.scores, j.scoring) == ((0.75, 0.25), "votes")
    assert engine.calls[0][1].top_logprobs == 20


class MarginEngine(ScriptedEngine):
    """A judge whose verdict digit carries a fixed preference for the first-shown response
    (position) plus one for the response "4" (content): the log-odds of Response 1 are
    ``position + content`` with content +1 when "4" is shown first and -1 when second."""

    position: float = 0.8

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        self.calls.append((prompt.text, spec))
        first_is_4 = "[Response 1]\n4" in prompt.text
        z = self.position + (1.0 if first_is_4 else -1.0)
        p1 = 1 / (1 + math.exp(-z))
        top = ((" 1", LN(p1)), (" 2", LN(1 - p1)))
        g = Generation(" 1" if p1 > 0.5 else " 2", (0.0,), "length", (" 1",), (top,))
        return GenerationResult((g,), prompt.num_tokens)


async def test_margin_mode_pooled_over_both_orders_cancels_the_position_preference():
    engine = MarginEngine()
    judge = Judge(engine, JudgeConfig())
    request = _request(mode="margin")
    first = await judge.judge(request, "a")
    second = await judge.judge(swapped(request), "b")
    # Each order alone names Response 1 (position 0.8 beats content -1 only when "4" is first:
    # first order z = 1.8, second order z = -0.2 for its Response 1, the "5").
    s = lambda z: 1 / (1 + math.exp(-z))  # noqa: E731
    assert first.scores == pytest.approx((s(1.8), 1 - s(1.8)))
    assert second.scores == pytest.approx((s(-0.2), 1 - s(-0.2)))
    assert (first.scoring, first.usage.generated_tokens, engine.calls[0][1].max_tokens) == (
        "probability",
        1,
        1,
    )
    pooled = answer_pair(first, second, "swap")
    # "4" gets (s(1.8) + 1 - s(-0.2)) / 2: the position term cancels out of the decision.
    assert pooled.scores[0] == pytest.approx((s(1.8) + 1 - s(-0.2)) / 2)
    assert (pooled.winner, pooled.scoring) == (1, "probability")


async def test_margin_mode_adds_the_weighted_likelihood_difference():
    class Likely(MarginEngine):
        position = 0.0

        async def generate(self, prompt, spec, request_id):
            if spec.prompt_logprobs:
                # Every token of a prompt ending in "4" at -0.5, in "5" at -2.5.
                self.calls.append((prompt.text, spec))
                lp = -0.5 if prompt.text.endswith("4") else -2.5
                return GenerationResult(
                    (Generation("x", (0.0,), "length"),),
                    prompt.num_tokens,
                    prompt_logprobs=(lp,) * (prompt.num_tokens - 1),
                )
            return await super().generate(prompt, spec, request_id)

    engine = Likely()
    config = JudgeConfig(margin_verdict_weight=0.5, margin_likelihood_weight=2.0)
    judge = Judge(engine, config)
    j = await judge.judge(_request(mode="margin"), "a")
    # z = 0.5 * 1.0 + 2.0 * (-0.5 - -2.5) = 4.5
    assert j.scores[0] == pytest.approx(1 / (1 + math.exp(-4.5)))
    assert j.trace.candidates[0].likelihoods == (-0.5, -2.5)
    assert j.usage.engine_requests == 3
    # The likelihoods are kept per response: the swapped order asks the engine once.
    j2 = await judge.judge(swapped(_request(mode="margin")), "b")
    assert j2.usage.engine_requests == 1


async def test_margin_mode_is_refused_where_a_verdict_is_not_one_token():
    class OneTokenPerText(ScriptedEngine):
        def render_chat(self, messages):
            return Prompt("x", (7,))  # both verdicts render alike: the digit is not a token

    from reflectrm.judging.judge import MarginUnavailableError

    judge = Judge(OneTokenPerText(), JudgeConfig())
    assert "margin mode needs" in (judge.margin_error or "")
    with pytest.raises(MarginUnavailableError):
        await judge.judge(_request(mode="margin"), "a")
