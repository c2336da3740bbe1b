"""Plain frozen data passed in and out of the judging code."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal, get_args

from reflectrm.judging import defaults

if TYPE_CHECKING:
    from reflectrm.engines.base import GenerationResult

Role = Literal["system", "user", "assistant"]
Mode = Literal["reflect", "single", "vote", "margin"]
MODES: tuple[Mode, ...] = get_args(Mode)  # the serving modes, for choices and metric labels
Outcome = Literal["verdict", "no_verdict"]
# How a judgment's scores are made: the voters' mean verdict probabilities, or the paper's vote
# shares (also the fallback, named in the reply, when an engine returns no probabilities).
Scoring = Literal["probability", "votes"]
SCORINGS: tuple[Scoring, ...] = get_args(Scoring)
# Ablations of the evaluation harness; "none" is ReflectRM as served.
Ablation = Literal["none", "random_anchor", "random_winners", "anchor_only"]


@dataclass(frozen=True)
class Message:
    role: Role
    content: str


@dataclass(frozen=True)
class JudgmentSpec:
    conversation: tuple[Message, ...]
    responses: tuple[str, str]
    mode: Mode = defaults.MODE
    num_candidates: int = defaults.NUM_CANDIDATES
    seed: int = 0
    max_tokens: int = defaults.MAX_TOKENS
    ablation: Ablation = "none"


@dataclass(frozen=True)
class EngineUsage:
    prompt_tokens: int = 0
    generated_tokens: int = 0
    engine_requests: int = 0
    # Of prompt_tokens, those whose KV cache the engine reused instead of prefilling.
    cached_prompt_tokens: int = 0

    def __add__(self, other: EngineUsage) -> EngineUsage:
        return EngineUsage(
            self.prompt_tokens + other.prompt_tokens,
            self.generated_tokens + other.generated_tokens,
            self.engine_requests + other.engine_requests,
            self.cached_prompt_tokens + other.cached_prompt_tokens,
        )

    @staticmethod
    def of(result: GenerationResult) -> EngineUsage:
        """One engine request's usage; its n outputs share one prefill of the prompt."""
        return EngineUsage(
            result.prompt_tokens, result.generated_tokens, 1, result.cached_prompt_tokens
        )


@dataclass(frozen=True)
class Candidate:
    """One stage-1 judgment."""

    index: int
    verdict: int | None  # 1 or 2; None when unparseable
    confidence: float
    analysis: str
    text: str
    num_tokens: int
    parse_error: str | None = None
    # The judge's probabilities of verdicts 1 and 2 at the digit that decided this output; None
    # when the engine gave none (or the output has no verdict).
    probabilities: tuple[float, float] | None = None
    # Margin mode with a likelihood weight: each response's mean token log-prob given the
    # conversation.
    likelihoods: tuple[float, float] | None = None


@dataclass(frozen=True)
class Reflection:
    """One stage-2 comparison of a candidate's critique with the anchor's."""

    candidate: int
    # Which critique slot (1 or 2) the candidate's analysis was shown in; the anchor had the other.
    candidate_position: int
    verdict: int | None  # the critique slot preferred (1 or 2), None when unparseable
    beats_anchor: bool
    text: str
    num_tokens: int
    parse_error: str | None = None


@dataclass(frozen=True)
class Trace:
    candidates: tuple[Candidate, ...]
    anchor: int | None = None
    reflections: tuple[Reflection, ...] = ()
    winner_group: tuple[int, ...] = ()
    # The indices whose response verdicts were counted in the final vote.
    voters: tuple[int, ...] = ()
    anchor_added: bool = False


@dataclass(frozen=True)
class Judgment:
    winner: int | None
    scores: tuple[float, float]
    outcome: Outcome
    mode: Mode
    analysis: str | None
    votes: tuple[int, int]
    early_exit: bool
    usage: EngineUsage
    trace: Trace
    seed: int
    # Wall time of each stage, for per-stage latency metrics.
    rollout_seconds: float = 0.0
    reflection_seconds: float = 0.0
    scoring: Scoring = "votes"

    @property
    def stage1_parse_failures(self) -> int:
        return sum(c.verdict is None for c in self.trace.candidates)

    @property
    def reflection_parse_failures(self) -> int:
        return sum(r.verdict is None for r in self.trace.reflections)
