"""Margin mode's engine requests through the service: two verdict reads per pair (both orders)
and one likelihood pass per distinct response, however many judgments need it; the replies'
``usage`` and the metrics add up to the engine's work, counted once."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass, field

from fastapi.testclient import TestClient

from reflectrm.app import create_app
from reflectrm.engines.base import Generation, GenerationResult, Prompt, SamplingSpec
from reflectrm.settings import Settings
from tests.api.conftest import PreferenceEngine
from tests.api.test_metrics import scrape, value

QUESTION = "What is the capital of France?"
PARIS, BERLIN = "Paris.", "Berlin."
COMPLETIONS = [f"answer {k}: " + "words " * k for k in range(8)]
# The prompt's tokens that a likelihood pass reads from the engine's prefix cache.
CACHED = 2


@dataclass
class CountingEngine(PreferenceEngine):
    """PreferenceEngine's verdicts (margin mode: digit probabilities by content); a likelihood
    pass answers every prompt token at -1 (those of the first ``CACHED`` tokens, read from the
    cache, not computed) and one generated token. Every result is kept, to add up."""

    results: list[GenerationResult] = field(default_factory=list)

    async def generate(
        self, prompt: Prompt, spec: SamplingSpec, request_id: str
    ) -> GenerationResult:
        if spec.prompt_logprobs:
            self.calls.append((prompt.text, spec))
            hit = CACHED if spec.prompt_logprobs_start > CACHED else 0
            logprobs = [float("nan")] * hit + [-1.0] * (prompt.num_tokens - 1 - hit)
            result = GenerationResult(
                (Generation("x", (-1.0,), "length"),),
                prompt.num_tokens,
                cached_prompt_tokens=hit,
                prompt_logprobs=tuple(logprobs),
            )
        else:
            result = await super().generate(prompt, spec, request_id)
        self.results.append(result)
        return result

    def count(self) -> tuple[int, int]:
        """(verdict reads, likelihood passes) so far."""
        passes = sum(spec.prompt_logprobs for _, spec in self.calls)
        return len(self.calls) - passes, passes

    def usage(self, since: int = 0) -> dict[str, int]:
        """The engine's work since its ``since``-th request, as a reply's ``usage`` says it."""
        done = self.results[since:]
        return {
            "prompt_tokens": sum(r.prompt_tokens for r in done),
            "generated_tokens": sum(r.generated_tokens for r in done),
            "engine_requests": len(done),
            "cached_prompt_tokens": sum(r.cached_prompt_tokens for r in done),
        }


@contextlib.contextmanager
def client_for(engine: CountingEngine, weight: float = 1.0) -> Iterator[TestClient]:
    settings = Settings(margin_likelihood_weight=weight, swap_check_fraction=0.0)
    with TestClient(create_app(settings, engine=engine)) as client:
        yield client


MARGIN = {"mode": "margin", "debias": "swap"}


def test_a_pair_in_both_orders_makes_two_verdict_reads_and_two_passes_and_a_repeat_none():
    engine = CountingEngine()
    with client_for(engine) as client:
        body = {"prompt": QUESTION, "responses": [PARIS, BERLIN], **MARGIN}
        first = client.post("/v1/judge", json=body)
        assert first.status_code == 200, first.text
        assert engine.count() == (2, 2)
        assert first.json()["usage"] == engine.usage()
        assert first.json()["usage"]["cached_prompt_tokens"] == 2 * CACHED
        # The same call again: answered from the reply cache, no engine request.
        again = client.post("/v1/judge", json=body)
        assert engine.count() == (2, 2)
        assert again.json()["usage"]["engine_requests"] == 0
        # The metrics count each request once, with its computed and cached prompt tokens.
        samples = scrape(client)
        assert value(samples, "reflectrm_engine_requests_total") == 4
        assert value(samples, "reflectrm_prompt_tokens_total") == engine.usage()["prompt_tokens"]
        assert value(samples, "reflectrm_cached_prompt_tokens_total") == 2 * CACHED
    # Without a likelihood weight: the two verdict reads alone.
    engine = CountingEngine()
    with client_for(engine, weight=0.0) as client:
        assert client.post("/v1/judge", json=body).json()["usage"] == engine.usage()
    assert engine.count() == (2, 0)


def test_a_pivot_group_of_eight_makes_two_reads_per_pair_and_one_pass_per_completion():
    engine = CountingEngine()
    with client_for(engine) as client:
        body = {"prompt": QUESTION, "completions": COMPLETIONS, "strategy": "pivot", **MARGIN}
        r = client.post("/v1/rewards", json=body)
        assert r.status_code == 200, r.text
        # 7 pairs (each completion but the pivot against it) in both orders, 8 passes.
        assert engine.count() == (14, 8)
        reply = r.json()
        assert reply["usage"] == engine.usage()
        # Each pass's work is in one comparison's usage, none twice.
        per_comparison = [c["usage"]["engine_requests"] for c in reply["comparisons"]]
        assert sum(per_comparison) == 22


def test_a_reference_group_of_four_makes_eight_reads_and_five_passes():
    engine = CountingEngine()
    with client_for(engine) as client:
        body = {
            "prompt": QUESTION,
            "completions": COMPLETIONS[:4],
            "reference": "Paris, on the Seine.",
            "strategy": "reference",
            **MARGIN,
        }
        r = client.post("/v1/rewards", json=body)
        assert r.status_code == 200, r.text
        # Each completion against the reference in both orders; the reference's pass is shared.
        assert engine.count() == (8, 5)
        assert r.json()["usage"] == engine.usage()


def test_get_reward_samples_share_their_labels_pass_and_report_their_work_once():
    prompt = f"<|im_start|>user\n{QUESTION}<|im_end|>\n<|im_start|>assistant\n"
    label = "Paris, on the Seine."
    samples = COMPLETIONS[:4]
    payload = {
        "query": [prompt + s for s in samples],
        "prompts": [prompt] * len(samples),
        "labels": [label] * len(samples),
    }
    engine = CountingEngine()
    with client_for(engine) as client:
        r = client.post("/get_reward?mode=margin&debias=swap", json=payload)
        assert r.status_code == 200, r.text
        assert engine.count() == (8, 5)
        logs = r.json()["extra_logs"]
        assert sum(logs["judge_generated_tokens"]) == engine.usage()["generated_tokens"]
        samples_ = scrape(client)
        assert value(samples_, "reflectrm_engine_requests_total") == 13
        assert value(samples_, "reflectrm_cached_prompt_tokens_total") == 5 * CACHED
