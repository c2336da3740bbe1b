"""The ReflectRM two-stage judgment as a client writes it around a bare engine.

The benchmark's reference contenders judge with this: the engine's limit (raw ``AsyncLLM``, no
HTTP) and the peers (``vllm serve`` with a client calling ``/v1/completions``). It does the same
token work as the service for the same request body: the same prompts (the project's versioned
templates and the model's chat template), the same sampling (stage 1: ``n`` samples at
temperature 1 with the request's seed, the i-th with seed + i; stage 2: greedy), the same
structured-output regex and stop string, the same parser, anchor rule, reflection orders (drawn
from the seed) and vote, so that with the same seeds it reaches the same verdicts. It uses the
method's pure pieces (templates, parser, confidence, anchor and majority rules) and nothing of
the service (no Judge, no engine adapter, no HTTP app, no admission).

How a client spends its requests is a ``Strategy``: one request with ``n`` samples or ``n``
requests of one sample; reflections all at once or one after another; early exit or not.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from reflectrm.judging.confidence import bottom_fraction_confidence
from reflectrm.judging.judge import STOP, VERDICT_RESERVE_TOKENS, choose_anchor, majority
from reflectrm.judging.parsing import parse_output
from reflectrm.judging.prompts import (
    CRITIQUE_VERDICTS,
    RESPONSE_VERDICTS,
    get_template,
    output_regex,
)
from reflectrm.judging.types import Candidate
from reflectrm.judging.verdicts import TOP_LOGPROBS
from reflectrm_harness.datasets import row_conversation
from reflectrm_harness.prompts import preference_messages, reflection_messages

ROLLOUTS = "rollouts"
REFLECTIONS = "reflections"


@dataclass(frozen=True)
class Ask:
    """One engine request: a rendered prompt and how to sample it."""

    prompt: str
    n: int
    temperature: float
    max_tokens: int
    seed: int | None
    regex: str | None
    stop: tuple[str, ...] = STOP
    # The likeliest tokens asked for at each position (the service's probability scoring reads
    # the verdict digit's); 0: the sampled token's log-prob alone.
    top_logprobs: int = 0


@dataclass(frozen=True)
class Output:
    text: str
    token_logprobs: tuple[float, ...]
    finish_reason: str  # "stop", "length", or what the engine said


@dataclass(frozen=True)
class Reply:
    """What the engine returned for one or more requests of one stage."""

    outputs: tuple[Output, ...]
    prompt_tokens: int
    cached_prompt_tokens: int = 0
    requests: int = 1


@dataclass(frozen=True)
class StageUsage:
    prompt_tokens: int = 0
    cached_prompt_tokens: int = 0
    generated_tokens: int = 0
    requests: int = 0

    def __add__(self, other: StageUsage) -> StageUsage:
        return StageUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
            self.generated_tokens + other.generated_tokens,
            self.requests + other.requests,
        )

    @staticmethod
    def of(reply: Reply) -> StageUsage:
        generated = sum(len(o.token_logprobs) for o in reply.outputs)
        return StageUsage(
            reply.prompt_tokens, reply.cached_prompt_tokens, generated, reply.requests
        )

    def as_dict(self) -> dict[str, int]:
        return {
            "prompt_tokens": self.prompt_tokens,
            "cached_prompt_tokens": self.cached_prompt_tokens,
            "generated_tokens": self.generated_tokens,
            "requests": self.requests,
        }


@dataclass(frozen=True)
class Verdict:
    """A judgment's outcome and the token work it took, by stage where the contender knows it
    (``rollouts``, ``reflections``), else under ``all``."""

    winner: int | None
    scores: tuple[float, float]
    early_exit: bool
    stages: Mapping[str, StageUsage] = field(default_factory=dict)

    @property
    def usage(self) -> StageUsage:
        total = StageUsage()
        for usage in self.stages.values():
            total = total + usage
        return total


@dataclass(frozen=True)
class Strategy:
    early_exit: bool = True
    # n requests of one sample each (seeds seed + i, as the engine seeds an n-sample request's
    # children) instead of one request with n samples.
    split_samples: bool = False
    concurrent_reflections: bool = True


Generate = Callable[[Ask, str], Awaitable[Reply]]
Render = Callable[[list[dict[str, str]]], str]


def regex_for(verdicts: tuple[str, str], max_tokens: int) -> str:
    """The service's default format: the analysis bounded to max_tokens minus a reserve."""
    return output_regex(verdicts, max(1, max_tokens - VERDICT_RESERVE_TOKENS))


class ClientJudge:
    """Judges /v1/judge request bodies (mode reflect) with ``generate`` as its engine."""

    def __init__(
        self,
        render: Render,
        generate: Generate,
        strategy: Strategy,
        template_version: str = "v1",
        temperature: float = 1.0,
        enforce_format: bool = True,
        top_logprobs: int = TOP_LOGPROBS,
    ) -> None:
        self.render = render
        self.generate = generate
        self.strategy = strategy
        self.template = get_template(template_version)
        self.temperature = temperature
        self.enforce_format = enforce_format
        self.top_logprobs = top_logprobs

    def _regex(self, verdicts: tuple[str, str], max_tokens: int) -> str | None:
        return regex_for(verdicts, max_tokens) if self.enforce_format else None

    async def _sample(self, ask: Ask, request_id: str) -> Reply:
        if not self.strategy.split_samples or ask.n == 1:
            return await self.generate(ask, request_id)
        seeds = [None if ask.seed is None else ask.seed + i for i in range(ask.n)]
        asks = [dataclasses.replace(ask, n=1, seed=s) for s in seeds]
        ids = [f"{request_id}-{i}" for i in range(ask.n)]
        replies = await asyncio.gather(*map(self.generate, asks, ids))
        return Reply(
            outputs=tuple(o for r in replies for o in r.outputs),
            prompt_tokens=sum(r.prompt_tokens for r in replies),
            cached_prompt_tokens=sum(r.cached_prompt_tokens for r in replies),
            requests=sum(r.requests for r in replies),
        )

    async def judge(self, body: Mapping[str, Any], request_id: str) -> Verdict:
        conversation = row_conversation(body, "the /v1/judge body")
        r1, r2 = (str(r) for r in body["responses"])
        seed = int(body["seed"])
        max_tokens = int(body["max_tokens"])
        n = int(body.get("num_candidates") or 8)
        prompt = self.render(preference_messages(self.template, conversation, r1, r2))
        regex = self._regex(RESPONSE_VERDICTS, max_tokens)
        ask = Ask(prompt, n, self.temperature, max_tokens, seed, regex, STOP, self.top_logprobs)
        reply = await self._sample(ask, f"{request_id}-s1")
        stage1 = StageUsage.of(reply)
        candidates = [_candidate(i, o) for i, o in enumerate(reply.outputs)]
        parsed = [c for c in candidates if c.verdict is not None]
        if not parsed:
            return Verdict(None, (0.5, 0.5), False, {ROLLOUTS: stage1})
        if self.strategy.early_exit and len({c.verdict for c in parsed}) == 1:
            return _vote(parsed, choose_anchor(parsed), True, {ROLLOUTS: stage1})
        anchor = choose_anchor(parsed)
        others = [c for c in parsed if c.index != anchor.index]
        rng = random.Random(seed)
        positions = [1 if rng.random() < 0.5 else 2 for _ in others]
        regex = self._regex(CRITIQUE_VERDICTS, max_tokens)
        asks: list[Ask] = []
        for cand, pos in zip(others, positions, strict=True):
            first, second = (cand, anchor) if pos == 1 else (anchor, cand)
            messages = reflection_messages(
                self.template, conversation, r1, r2, first.analysis, second.analysis
            )
            asks.append(Ask(self.render(messages), 1, 0.0, max_tokens, None, regex))
        ids = [f"{request_id}-r{c.index}" for c in others]
        if self.strategy.concurrent_reflections:
            replies = list(await asyncio.gather(*map(self.generate, asks, ids)))
        else:
            replies = [await self.generate(a, i) for a, i in zip(asks, ids, strict=True)]
        stage2 = StageUsage()
        winners = []
        for cand, pos, r in zip(others, positions, replies, strict=True):
            stage2 = stage2 + StageUsage.of(r)
            out = r.outputs[0]
            p = parse_output(out.text, "Critique", truncated=out.finish_reason == "length")
            if p.verdict == pos:
                winners.append(cand)
        voters = sorted(winners, key=lambda c: c.index)
        if majority([_v(c) for c in voters]) is None:
            voters = sorted([*voters, anchor], key=lambda c: c.index)
        return _vote(voters, anchor, False, {ROLLOUTS: stage1, REFLECTIONS: stage2})


def _candidate(index: int, out: Output) -> Candidate:
    p = parse_output(out.text, "Response", truncated=out.finish_reason == "length")
    return Candidate(
        index=index,
        verdict=p.verdict,
        confidence=bottom_fraction_confidence(out.token_logprobs),
        analysis=p.analysis,
        text=out.text,
        num_tokens=len(out.token_logprobs),
        parse_error=p.error,
    )


def _v(c: Candidate) -> int:
    assert c.verdict is not None
    return c.verdict


def _vote(
    voters: Sequence[Candidate],
    tie_break: Candidate,
    early_exit: bool,
    stages: Mapping[str, StageUsage],
) -> Verdict:
    verdicts = [_v(c) for c in voters]
    votes = (verdicts.count(1), verdicts.count(2))
    winner = majority(verdicts) or _v(tie_break)
    total = len(verdicts)
    return Verdict(winner, (votes[0] / total, votes[1] / total), early_exit, dict(stages))
