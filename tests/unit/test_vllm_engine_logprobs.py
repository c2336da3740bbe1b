"""What the in-process engine asks vLLM for and reads back: given tokens' log-probs at a
generated position (``logprob_token_ids``), and prompt log-probs from a start on with the prefix
cache read (the rows vLLM did not compute never read). vLLM's own SamplingParams checks the
parameters; a stand-in for its AsyncLLM answers."""

from __future__ import annotations

import math
from types import SimpleNamespace
from typing import Any

import pytest

from reflectrm.engines.base import EngineError, Prompt, SamplingSpec
from reflectrm.engines.vllm_engine import VLLMEngine
from reflectrm.hardware import installed_vllm
from tests.conftest import needs
from tests.unit.test_vllm_engine_chat import FakeTokenizer

pytestmark = needs(installed_vllm() is not None, "vLLM is not installed")

PROMPT = Prompt("a b c d e f", (10, 11, 12, 13, 14, 15))
DIGITS = (21, 22)  # the two verdict digits' token ids
SAMPLED = 21


class FakeLLM:
    """Answers each request with ``answer(params)``, keeping the SamplingParams it was given."""

    errored = False

    def __init__(self, answer: Any) -> None:
        self.answer = answer
        self.params: Any = None

    async def generate(self, prompt: Any, params: Any, request_id: str, priority: int = 0):
        self.params = params
        yield self.answer(params)


def logprob(value: float, token: str | None = None) -> Any:
    from vllm.logprobs import Logprob

    return Logprob(logprob=value, rank=1, decoded_token=token)


def output(entries: list[dict[int, Any]], prompt_logprobs: Any = None, cached: int = 0) -> Any:
    choice = SimpleNamespace(
        index=0, token_ids=[SAMPLED], logprobs=entries, text="1", finish_reason="length"
    )
    return SimpleNamespace(
        outputs=[choice], prompt_logprobs=prompt_logprobs, num_cached_tokens=cached
    )


def engine(answer: Any) -> tuple[VLLMEngine, FakeLLM]:
    llm = FakeLLM(answer)
    tokenizer = FakeTokenizer("{% for message in messages %}{{ message.content }}{% endfor %}")
    return VLLMEngine(llm, tokenizer, "m", 4096), llm


def vocabulary(params: Any) -> None:
    """vLLM's own check of the log-prob parameters (``SamplingParams._validate_logprobs``)."""
    params._validate_logprobs(SimpleNamespace(max_logprobs=20, get_vocab_size=lambda: 100))


async def test_the_verdict_digits_are_asked_for_by_token_id_and_read_by_it():
    # vLLM's sampler puts the sampled token first, then the asked ones, whatever their rank.
    entry = {SAMPLED: logprob(-0.4, "1"), 22: logprob(-9.5, "2")}
    eng, llm = engine(lambda params: output([entry]))
    spec = SamplingSpec(
        n=1, temperature=0.0, max_tokens=1, top_logprobs=20, logprob_token_ids=DIGITS
    )
    result = await eng.generate(PROMPT, spec, "r")
    assert (llm.params.logprob_token_ids, llm.params.logprobs) == (list(DIGITS), None)
    vocabulary(llm.params)
    (g,) = result.generations
    assert g.asked_logprobs == ((-0.4, -9.5),)
    assert (g.token_logprobs, g.tokens, g.top_logprobs) == ((-0.4,), ("1",), ())


async def test_an_asked_token_missing_from_the_answer_is_an_engine_error():
    eng, _ = engine(lambda params: output([{SAMPLED: logprob(-0.4, "1")}]))
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=1, logprob_token_ids=DIGITS)
    with pytest.raises(EngineError):
        await eng.generate(PROMPT, spec, "r")


async def test_a_request_the_engine_failed_is_an_engine_error_not_an_empty_output():
    # vLLM finishes a request whose structured-output grammar did not compile with "error"
    # and no text: judged as it is, it would count as an unparsed candidate.
    def failed(params: Any) -> Any:
        out = output([{SAMPLED: logprob(-0.4, "1")}])
        out.outputs[0].finish_reason, out.outputs[0].text = "error", ""
        return out

    eng, _ = engine(failed)
    with pytest.raises(EngineError, match="the engine failed a request"):
        await eng.generate(PROMPT, SamplingSpec(n=1, temperature=0.0, max_tokens=1), "r")


def test_engines_get_a_generous_regex_compile_bound_unless_the_environment_sets_one():
    from reflectrm.engines.vllm_engine import engine_environment

    assert engine_environment({})["VLLM_REGEX_COMPILATION_TIMEOUT_S"] == "120"
    own = {"VLLM_REGEX_COMPILATION_TIMEOUT_S": "9", "PATH": "/bin"}
    assert engine_environment(own) == own


def prompt_rows(cached: int) -> list[Any]:
    """vLLM's prompt log-probs: None for the first token, then {token: log-prob} per row; the
    rows of the tokens read from the cache hold whatever their memory held."""
    rows: list[Any] = [None]
    for k, token in enumerate(PROMPT.token_ids[1:], 1):
        rows.append({7777: logprob(123.0)} if k <= cached else {token: logprob(-0.1 * k)})
    return rows


async def test_prompt_log_probs_from_a_start_read_the_cache_and_skip_the_rows_it_filled():
    eng, llm = engine(lambda params: output([{SAMPLED: logprob(-1.0)}], prompt_rows(2), 2))
    spec = SamplingSpec(
        n=1, temperature=0.0, max_tokens=1, prompt_logprobs=True, prompt_logprobs_start=4
    )
    result = await eng.generate(PROMPT, spec, "r")
    params = llm.params
    assert (params.prompt_logprobs, params.skip_reading_prefix_cache) == (0, False)
    assert params.detokenize is False  # the rows vLLM never wrote are never decoded
    lps = result.prompt_logprobs
    assert all(math.isnan(lp) for lp in lps[:2])
    assert lps[2:] == pytest.approx((-0.3, -0.4, -0.5))
    assert result.cached_prompt_tokens == 2


async def test_prompt_log_probs_of_every_token_read_nothing_from_the_cache():
    eng, llm = engine(lambda params: output([{SAMPLED: logprob(-1.0)}], prompt_rows(0)))
    spec = SamplingSpec(n=1, temperature=0.0, max_tokens=1, prompt_logprobs=True)
    result = await eng.generate(PROMPT, spec, "r")
    # vLLM's default for a request with prompt log-probs: no prefix-cache read.
    assert (llm.params.skip_reading_prefix_cache, llm.params.detokenize) == (True, True)
    assert result.prompt_logprobs == pytest.approx((-0.1, -0.2, -0.3, -0.4, -0.5))
