"""The HTTP contract: request, response and error bodies."""

from __future__ import annotations

import math
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reflectrm.judging.judge import consistent, unswap_winner
from reflectrm.judging.types import Ablation, Judgment, Mode, Outcome, Role

# Larger than any model context in characters; bounds the work spent before the 413 check.
MAX_TEXT_CHARS = 1_000_000


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str = Field(..., min_length=1, max_length=MAX_TEXT_CHARS)


NonEmpty = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


class JudgeRequest(BaseModel):
    """A conversation and two candidate responses to it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "prompt": "What is the capital of France?",
                    "responses": ["The capital of France is Paris.", "It is Lyon."],
                },
                {
                    "messages": [
                        {"role": "user", "content": "Name a prime number."},
                        {"role": "assistant", "content": "7."},
                        {"role": "user", "content": "Another one, larger than 10?"},
                    ],
                    "responses": ["11", "12"],
                    "mode": "reflect",
                    "seed": 1234,
                    "max_tokens": 256,
                    "check_swap": True,
                    "return_trace": True,
                },
            ]
        },
    )

    prompt: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="The user query, for a single-turn conversation.",
    )
    messages: list[ChatMessage] | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="The conversation (at most 1,000 turns), ending with a user turn.",
    )
    responses: list[NonEmpty] = Field(
        ..., min_length=2, max_length=2, description="Exactly two candidate responses."
    )
    mode: Mode = Field(
        "reflect",
        description="reflect: ReflectRM two-stage judgment; single: one greedy judgment; "
        "vote: majority of the sampled judgments without reflection.",
    )
    num_candidates: int | None = Field(
        None, ge=1, le=32, description="Stage-1 samples (reflect and vote modes). Default 8."
    )
    seed: int | None = Field(
        None,
        ge=0,
        lt=2**31,
        description="Makes sampling and the reflection order reproducible; random if omitted.",
    )
    max_tokens: int | None = Field(
        None, ge=16, description="Generation limit per output. Default from the server (1024)."
    )
    check_swap: bool = Field(
        False, description="Also judge with the responses swapped and report `consistent`."
    )
    return_trace: bool = Field(False, description="Include every candidate and reflection.")
    # Evaluation only (reflectrm eval --url): refused with 422 unless REFLECTRM_ALLOW_ABLATIONS.
    ablation: Ablation = Field(
        "none",
        description="Evaluation only: one of the paper's ablations of reflect mode. The server "
        "accepts it only with REFLECTRM_ALLOW_ABLATIONS=true (422 otherwise).",
    )

    @model_validator(mode="after")
    def _one_conversation(self) -> JudgeRequest:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` (a string) or `messages` (a list)")
        if self.messages is not None and self.messages[-1].role != "user":
            raise ValueError("`messages` must end with a user turn: the query being answered")
        if self.ablation != "none" and self.mode != "reflect":
            raise ValueError("`ablation` applies to mode `reflect` only")
        return self


class Usage(BaseModel):
    prompt_tokens: int = Field(description="Prompt tokens prefilled (once per engine request).")
    generated_tokens: int
    engine_requests: int
    cached_prompt_tokens: int = Field(
        0, description="Of prompt_tokens, those served from the engine's prefix cache."
    )


class CandidateTrace(BaseModel):
    index: int
    verdict: int | None
    parsed: bool
    parse_error: str | None = Field(
        description="truncated (cut at max_tokens), no_result, invalid_result"
    )
    confidence: float | None = Field(
        description="Mean of the lowest 10% sampled-token log-probs; null for an empty output."
    )
    num_tokens: int
    analysis: str


class ReflectionTrace(BaseModel):
    candidate: int
    order: Literal["candidate_first", "anchor_first"] = Field(
        description="Which critique was shown as Critique 1."
    )
    verdict: Literal["candidate", "anchor"] | None = Field(
        description="Whose critique the reflection preferred; null when unparseable."
    )
    beats_anchor: bool
    parse_error: str | None
    num_tokens: int


class JudgmentTrace(BaseModel):
    candidates: list[CandidateTrace]
    anchor: int | None
    reflections: list[ReflectionTrace]
    winner_group: list[int]
    voters: list[int] = Field(description="Candidates whose verdicts were counted in the vote.")
    anchor_added: bool = Field(description="The winner group was empty or tied: anchor added.")


class JudgeResponse(BaseModel):
    winner: Literal[1, 2] | None = Field(description="The better response; null on no_verdict.")
    scores: tuple[float, float] = Field(
        description="Vote shares of response 1 and 2 (sum to 1): usable as pairwise rewards."
    )
    outcome: Outcome
    mode: Mode
    analysis: str | None = Field(
        description="The most confident analysis agreeing with the winner."
    )
    votes: tuple[int, int]
    early_exit: bool = Field(description="Every parsed stage-1 verdict agreed: reflection skipped.")
    consistent: bool | None = Field(
        None, description="With check_swap: the same response won in both orders."
    )
    swapped_winner: Literal[1, 2] | None = Field(
        None,
        description="With check_swap: the winner in the swapped judgment, in original numbering.",
    )
    parse_failures: int = Field(description="Stage-1 and reflection outputs without a verdict.")
    usage: Usage
    latency_ms: float
    model: str
    template_version: str
    request_id: str
    seed: int
    trace: JudgmentTrace | None = None
    swapped_trace: JudgmentTrace | None = None


class ErrorResponse(BaseModel):
    detail: str


def trace_of(j: Judgment) -> JudgmentTrace:
    t = j.trace
    return JudgmentTrace(
        candidates=[
            CandidateTrace(
                index=c.index,
                verdict=c.verdict,
                parsed=c.verdict is not None,
                parse_error=c.parse_error,
                confidence=c.confidence if math.isfinite(c.confidence) else None,
                num_tokens=c.num_tokens,
                analysis=c.analysis,
            )
            for c in t.candidates
        ],
        anchor=t.anchor,
        reflections=[
            ReflectionTrace(
                candidate=r.candidate,
                order="candidate_first" if r.candidate_position == 1 else "anchor_first",
                verdict=None
                if r.verdict is None
                else ("candidate" if r.verdict == r.candidate_position else "anchor"),
                beats_anchor=r.beats_anchor,
                parse_error=r.parse_error,
                num_tokens=r.num_tokens,
            )
            for r in t.reflections
        ],
        winner_group=list(t.winner_group),
        voters=list(t.voters),
        anchor_added=t.anchor_added,
    )


def judge_response(
    judgment: Judgment,
    swap: Judgment | None,
    *,
    request_id: str,
    latency_ms: float,
    model: str,
    template_version: str,
    with_trace: bool,
) -> JudgeResponse:
    """The response body of a judgment (and of its swapped-order twin, when one was run)."""
    usage = judgment.usage + swap.usage if swap else judgment.usage
    failures = judgment.stage1_parse_failures + judgment.reflection_parse_failures
    if swap:
        failures += swap.stage1_parse_failures + swap.reflection_parse_failures
    return JudgeResponse(
        winner=judgment.winner,
        scores=judgment.scores,
        outcome=judgment.outcome,
        mode=judgment.mode,
        analysis=judgment.analysis,
        votes=judgment.votes,
        early_exit=judgment.early_exit,
        consistent=consistent(judgment, swap) if swap else None,
        swapped_winner=unswap_winner(swap.winner) if swap else None,
        parse_failures=failures,
        usage=Usage(
            prompt_tokens=usage.prompt_tokens,
            generated_tokens=usage.generated_tokens,
            engine_requests=usage.engine_requests,
            cached_prompt_tokens=usage.cached_prompt_tokens,
        ),
        latency_ms=latency_ms,
        model=model,
        template_version=template_version,
        request_id=request_id,
        seed=judgment.seed,
        trace=trace_of(judgment) if with_trace else None,
        swapped_trace=trace_of(swap) if (swap and with_trace) else None,
    )
