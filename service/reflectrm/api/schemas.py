"""The HTTP contract: request, response and error bodies (``api.convert`` maps them onto the
service's own types and back)."""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from reflectrm.judging import defaults
from reflectrm.judging.debias import Debias
from reflectrm.judging.groups import Strategy
from reflectrm.judging.types import Ablation, Mode, Outcome, Role, Scoring

# Larger than any model context in characters; bounds the work spent before the 413 check.
MAX_TEXT_CHARS = 1_000_000


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="forbid")
    role: Role
    content: str = Field(..., min_length=1, max_length=MAX_TEXT_CHARS)


NonEmpty = Annotated[str, Field(min_length=1, max_length=MAX_TEXT_CHARS)]


class Conversation(BaseModel):
    """The conversation being answered: ``prompt`` or ``messages``."""

    model_config = ConfigDict(extra="forbid")

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

    @model_validator(mode="after")
    def _one_conversation(self) -> Conversation:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("give exactly one of `prompt` (a string) or `messages` (a list)")
        if self.messages is not None and self.messages[-1].role != "user":
            raise ValueError("`messages` must end with a user turn: the query being answered")
        return self


MODE_DESCRIPTION = (
    "reflect: ReflectRM two-stage judgment; single: one greedy judgment; "
    "vote: majority of the sampled judgments without reflection; margin: the judge's "
    "probability of each verdict at its verdict digit, no analysis written (one token)."
)
SCORING_DESCRIPTION = (
    "How the comparisons' scores were made: 'probability' (the judge's verdict probabilities) "
    "or 'votes' (vote shares: REFLECTRM_SCORING=votes, or the engine returned no probabilities)."
)
DEBIAS_DESCRIPTION = (
    "swap: judge both orders (concurrently, twice the tokens) and average the two score "
    "vectors; the winner is the higher average, a tie is no verdict. none: one order."
)


class JudgeRequest(Conversation):
    """A conversation and two candidate responses to it."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            # Exactly one of the two conversation forms (checked by _one_conversation too).
            "oneOf": [
                {"required": ["prompt"], "properties": {"prompt": {"type": "string"}}},
                {"required": ["messages"], "properties": {"messages": {"type": "array"}}},
            ],
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
            ],
        },
    )

    responses: list[NonEmpty] = Field(
        ..., min_length=2, max_length=2, description="Exactly two candidate responses."
    )
    mode: Mode | None = Field(
        None,
        description=MODE_DESCRIPTION + " Unset: the served judge's default for pairs (the "
        "default judge: margin; a judge without one: reflect); the reply's `note` says why.",
    )
    debias: Debias | None = Field(
        None,
        description=DEBIAS_DESCRIPTION + " Unset: the served judge's default for pairs (the "
        "default judge: swap; a judge without one: none).",
    )
    num_candidates: int | None = Field(
        None,
        ge=1,
        le=32,
        description=f"Stage-1 samples (reflect and vote modes). Default {defaults.NUM_CANDIDATES}.",
    )
    seed: int | None = Field(
        None,
        ge=0,
        lt=2**31,
        description="Makes sampling and the reflection order reproducible; random if omitted.",
    )
    max_tokens: int | None = Field(
        None,
        ge=16,
        description="Generation limit per output. Default from the server "
        f"({defaults.MAX_TOKENS}). With the "
        "output format enforced (the default), less than the format takes in the model's tokens "
        "(the tags and the longest verdict sentence: 23, 24 in reflect mode, with the default "
        "model) is refused with 422 naming the least.",
    )
    check_swap: bool = Field(
        False,
        description="Also judge with the responses swapped and report `consistent`; the "
        "answer stays the first order's (debias: swap averages both instead).",
    )
    return_trace: bool = Field(False, description="Include every candidate and reflection.")
    # Evaluation only (reflectrm eval --url): refused with 422 unless REFLECTRM_ALLOW_ABLATIONS.
    ablation: Ablation = Field(
        "none",
        description="Evaluation only: one of the paper's ablations of reflect mode. The server "
        "accepts it only with REFLECTRM_ALLOW_ABLATIONS=true (422 otherwise).",
    )

    @model_validator(mode="after")
    def _ablation_in_reflect_mode(self) -> JudgeRequest:
        if self.ablation != "none" and self.mode not in (None, "reflect"):
            raise ValueError("`ablation` applies to mode `reflect` only")
        return self


class Usage(BaseModel):
    """The engine work of this call: zero for an answer reused from an identical call (joined
    while in flight, or from the cache), which cost none."""

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
        description="truncated (cut at max_tokens), no_result, invalid_result; in margin mode "
        "no_probability (the engine returned none) or even"
    )
    confidence: float | None = Field(
        description="Mean of the lowest 10% sampled-token log-probs; null for an empty output."
    )
    probabilities: tuple[float, float] | None = Field(
        None,
        description="The judge's probability of verdict 1 and 2 at the digit that decided this "
        "output; null when the engine returned none.",
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


class JudgeOrder(BaseModel):
    first: Literal[1, 2] = Field(description="The response shown first in this order.")
    winner: Literal[1, 2] | None
    scores: tuple[float, float] = Field(description="Vote shares of response 1 and 2.")


class JudgeResponse(BaseModel):
    winner: Literal[1, 2] | None = Field(
        description="The better response; null on no_verdict (with debias swap: also a tie)."
    )
    scores: tuple[float, float] = Field(
        description="Scores of response 1 and 2 (sum to 1): usable as pairwise rewards. With "
        "scoring 'probability', the judge's probability of each verdict at the token that decides "
        "it (the voters' mean); with 'votes', the vote shares. With debias swap: the mean of both "
        "orders' scores, so a constant position preference cancels."
    )
    scoring: Scoring = Field(
        "votes",
        description="How the scores were made: 'probability' (verdict probabilities) or 'votes' "
        "(vote shares: asked for with REFLECTRM_SCORING=votes, or the engine returned no "
        "verdict probabilities).",
    )
    outcome: Outcome
    mode: Mode
    debias: Debias = "none"
    note: str | None = Field(
        None,
        description="Why the pair was judged in this mode and debias when the call named "
        "neither and the served judge's defaults differ from the method's (reflect, one "
        "order); null otherwise.",
    )
    analysis: str | None = Field(
        description="The most confident analysis agreeing with the winner."
    )
    votes: tuple[int, int]
    early_exit: bool = Field(description="Every parsed stage-1 verdict agreed: reflection skipped.")
    consistent: bool | None = Field(
        None,
        description="With check_swap or debias swap: the same response won in both orders "
        "(null if an order had no verdict).",
    )
    swapped_winner: Literal[1, 2] | None = Field(
        None,
        description="With check_swap or debias swap: the winner in the swapped judgment, in "
        "original numbering.",
    )
    orders: list[JudgeOrder] | None = Field(
        None,
        description="With check_swap or debias swap: each order's winner and scores (original "
        "numbering), the order as sent first.",
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


# --- batch judging ---------------------------------------------------------------------------


class BatchDefaults(BaseModel):
    """Fields every item takes unless it gives its own (an item's `prompt` or `messages`
    replaces the default conversation as a whole)."""

    model_config = ConfigDict(extra="forbid")

    prompt: str | None = Field(None, min_length=1, max_length=MAX_TEXT_CHARS)
    messages: list[ChatMessage] | None = Field(None, min_length=1, max_length=1000)
    mode: Mode | None = None
    debias: Debias | None = None
    num_candidates: int | None = Field(None, ge=1, le=32)
    seed: int | None = Field(None, ge=0, lt=2**31)
    max_tokens: int | None = Field(None, ge=16)
    check_swap: bool | None = None
    return_trace: bool | None = None

    @model_validator(mode="after")
    def _at_most_one_conversation(self) -> BatchDefaults:
        if self.prompt is not None and self.messages is not None:
            raise ValueError("give at most one of `prompt` or `messages` in `defaults`")
        return self


class BatchRequest(BaseModel):
    """Pairs to judge in one call. Each item has the fields of a /v1/judge request; an item that
    does not validate gets its own error while the others are judged."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "defaults": {"prompt": "What is 2 + 2?", "mode": "single", "seed": 7},
                    "items": [
                        {"responses": ["4", "5"]},
                        {"responses": ["Four.", "22"], "debias": "swap"},
                        {"prompt": "Capital of Peru?", "responses": ["Lima", "Quito"]},
                    ],
                }
            ]
        },
    )

    items: list[dict[str, Any]] = Field(
        ...,
        min_length=1,
        max_length=10_000,
        description="Each item a /v1/judge request body (see JudgeRequest), completed by "
        "`defaults`. The server's limit is REFLECTRM_MAX_BATCH_ITEMS.",
    )
    defaults: BatchDefaults | None = None


class BatchItem(BaseModel):
    index: int
    status: int = Field(description="200, or the status a single call would have got (413, 422).")
    result: JudgeResponse | None = None
    detail: str | None = Field(None, description="What to fix, for an item that failed.")


class BatchResponse(BaseModel):
    results: list[BatchItem] = Field(description="One per item, in order.")
    judged: int
    failed: int
    usage: Usage
    latency_ms: float
    model: str
    template_version: str
    request_id: str


# --- group rewards ---------------------------------------------------------------------------

Side = int | Literal["reference"]


class RewardsRequest(Conversation):
    """A conversation and N completions of it, to be given one reward each."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "prompt": "What is the capital of France?",
                    "completions": ["Paris.", "Lyon.", "It is Paris, on the Seine."],
                    "reference": "The capital of France is Paris.",
                    "strategy": "reference",
                    "seed": 7,
                },
                {
                    "prompt": "Name a prime number larger than 10.",
                    "completions": ["11", "12", "13", "fifteen"],
                    "strategy": "round_robin",
                    "mode": "single",
                },
                {
                    "prompt": "Name a prime number larger than 10.",
                    "completions": ["11", "12", "13", "fifteen", "11 ", "17", "21", "1"],
                    "strategy": "swiss",
                    "seed": 7,
                },
            ]
        },
    )

    completions: list[Annotated[str, Field(max_length=MAX_TEXT_CHARS)]] = Field(
        ...,
        min_length=1,
        max_length=1000,
        description="The completions to reward, in order. An empty (whitespace-only) one is not "
        "judged and gets reward 0; completions identical after whitespace normalisation are "
        "judged once and share a reward. The server's limit is REFLECTRM_MAX_GROUP_SIZE.",
    )
    reference: str | None = Field(
        None,
        min_length=1,
        max_length=MAX_TEXT_CHARS,
        description="A reference answer (strategy reference only).",
    )
    strategy: Strategy | None = Field(
        None,
        description="reference: each completion against the reference (N judgments); pivot: "
        "each against one pivot completion (N-1); round_robin: every pair (N(N-1)/2); "
        "knockout: seeded single elimination (N-1, in ceil(log2 N) rounds); circular: each "
        "against the next, the last against the first (N); swiss: ceil(log2 N) rounds pairing "
        "equal running scores without rematches (floor(N/2) a round). knockout, circular and "
        "swiss reward from a Bradley-Terry fit. Default: reference when a reference is given, "
        "else round_robin. Debias swap doubles each count; duplicates are judged once.",
    )
    pivot: int | None = Field(
        None,
        ge=0,
        description="Strategy pivot: the index of the pivot completion. Default: the non-empty "
        "completion of median length.",
    )
    mode: Mode = Field(defaults.REWARD_MODE, description=MODE_DESCRIPTION)
    debias: Debias = Field(defaults.GROUP_DEBIAS, description=DEBIAS_DESCRIPTION)
    num_candidates: int | None = Field(None, ge=1, le=32, description="Stage-1 samples.")
    seed: int | None = Field(
        None,
        ge=0,
        lt=2**31,
        description="Reproduces the whole group (each comparison's seed is derived from it).",
    )
    max_tokens: int | None = Field(None, ge=16, description="Generation limit per output.")

    @model_validator(mode="after")
    def _fits_strategy(self) -> RewardsRequest:
        strategy = self.resolved_strategy
        if strategy == "reference" and self.reference is None:
            raise ValueError("strategy `reference` needs a `reference` answer")
        if strategy != "reference" and self.reference is not None:
            raise ValueError(
                f"`reference` is only used by strategy `reference`, not `{strategy}`: drop it "
                "or set strategy to reference"
            )
        if strategy != "reference" and len(self.completions) < 2:
            raise ValueError(f"strategy `{strategy}` compares completions: give at least two")
        if self.pivot is not None:
            if strategy != "pivot":
                raise ValueError("`pivot` is only used by strategy `pivot`")
            if self.pivot >= len(self.completions) or not self.completions[self.pivot].strip():
                raise ValueError("`pivot` must be the index of a non-empty completion")
        return self

    @property
    def resolved_strategy(self) -> Strategy:
        if self.strategy is not None:
            return self.strategy
        return "reference" if self.reference is not None else "round_robin"


class ComparisonOrder(BaseModel):
    first: Side = Field(description="The completion (or the reference) shown first.")
    winner: Side | None
    scores: tuple[float, float] = Field(description="Scores of the pair, in `pair` order.")


class ComparisonResult(BaseModel):
    pair: tuple[int, Side] = Field(description="The completion and what it was judged against.")
    round: int = Field(
        1,
        description="The design's round (knockout, swiss: paired from the earlier rounds' "
        "results); 1 for the one-round strategies.",
    )
    scores: tuple[float, float] = Field(description="Debiased scores, in `pair` order.")
    winner: Side | None = Field(description="Null: a tie or no verdict.")
    outcome: Outcome
    consistent: bool | None
    orders: list[ComparisonOrder]
    seed: int = Field(description="Send it with the pair to /v1/judge to reproduce this one.")
    usage: Usage


class CompletionResult(BaseModel):
    index: int
    reward: float | None = Field(
        description="reference, pivot, round_robin: the mean score over its comparisons with a "
        "verdict; knockout, circular, swiss: its mean win probability against the others under "
        "a Bradley-Terry fit of the comparisons. Null if none of its comparisons had a verdict."
    )
    wins: int
    losses: int
    ties: int
    no_verdict: int = Field(
        description="Comparisons without a verdict in any order (left out of the reward)."
    )
    empty: bool = Field(description="Whitespace-only: not judged, reward 0.")
    duplicate_of: int | None = Field(
        None,
        description="The completion it is identical to after whitespace normalisation: it was "
        "not judged itself; its reward and counts are that completion's.",
    )
    rounds_survived: int | None = Field(
        None, description="Strategy knockout: the rounds it went through, byes included."
    )


class RewardsResponse(BaseModel):
    rewards: list[float | None] = Field(description="One per completion, in order, in [0, 1].")
    strategy: Strategy
    debias: Debias
    mode: Mode
    scoring: Scoring = Field(description=SCORING_DESCRIPTION)
    pivot: int | None = Field(description="Strategy pivot: the pivot completion's index.")
    completions: list[CompletionResult]
    comparisons: list[ComparisonResult]
    judgments: int = Field(description="Judgments run: comparisons, times 2 with debias swap.")
    rounds: int = Field(
        description="Rounds of comparisons judged one after the other (knockout, swiss: "
        "ceil(log2 N) for N distinct completions; 1 otherwise)."
    )
    usage: Usage
    latency_ms: float
    model: str
    template_version: str
    request_id: str
    seed: int


# --- one member of a cohort (/v1/rewards/sample) -------------------------------------------------

GroupStrategy = Literal["pivot", "round_robin", "knockout", "circular", "swiss"]
GROUP_SIZE_DESCRIPTION = (
    "The group's size: its completions arrive in this many calls, and the service holds each "
    "until all have arrived (or the cohort timeout), judges the group once and answers each "
    "call with its own reward. At most REFLECTRM_MAX_GROUP_SIZE."
)
COHORT_STRATEGY_DESCRIPTION = (
    "How the group is judged once whole (see /v1/rewards): knockout (N-1 judgments), circular "
    "(N), swiss (floor(N/2) per round, ceil(log2 N) rounds), pivot (N-1), round_robin "
    "(N(N-1)/2). Debias swap doubles each count."
)
COHORT_TIMEOUT_DESCRIPTION = (
    "Seconds the cohort waits for its members after the first arrives; then it is judged with "
    "those it has and every reply says `cut`. Default REFLECTRM_COHORT_TIMEOUT_S; at most "
    "REFLECTRM_MAX_COHORT_TIMEOUT_S."
)


class SampleRewardRequest(Conversation):
    """One completion of a group whose other completions arrive in calls of their own."""

    model_config = ConfigDict(
        extra="forbid",
        json_schema_extra={
            "examples": [
                {
                    "prompt": "Name a prime number larger than 10.",
                    "completion": "13",
                    "group_size": 4,
                    "strategy": "knockout",
                },
                {
                    "prompt": "Name a prime number larger than 10.",
                    "completion": "13",
                    "group_id": "step-12/prompt-3",
                    "group_size": 8,
                    "seed": 7,
                },
            ]
        },
    )

    completion: str = Field(..., max_length=MAX_TEXT_CHARS, description="This call's completion.")
    group_size: int = Field(..., ge=2, le=1000, description=GROUP_SIZE_DESCRIPTION)
    group_id: str | None = Field(
        None,
        min_length=1,
        max_length=256,
        description="Names the group (within the caller's tenant). Default: the conversation "
        "itself, which the N rollouts of one prompt share.",
    )
    strategy: GroupStrategy = Field(
        defaults.COHORT_STRATEGY, description=COHORT_STRATEGY_DESCRIPTION
    )
    mode: Mode = Field(defaults.REWARD_MODE, description=MODE_DESCRIPTION)
    debias: Debias = Field(defaults.GROUP_DEBIAS, description=DEBIAS_DESCRIPTION)
    num_candidates: int | None = Field(None, ge=1, le=32, description="Stage-1 samples.")
    max_tokens: int | None = Field(None, ge=16, description="Generation limit per output.")
    seed: int | None = Field(
        None,
        ge=0,
        lt=2**31,
        description="Reproduces the group's judging (every member must send the same).",
    )
    cohort_timeout_s: float | None = Field(None, gt=0, description=COHORT_TIMEOUT_DESCRIPTION)


class CohortResult(BaseModel):
    group_id: str = Field(
        description="The group's name: the caller's group_id, or a digest of the conversation."
    )
    group_size: int = Field(description="The size asked for.")
    arrived: int = Field(description="Members that had arrived when the cohort closed.")
    cut: bool = Field(
        description="Closed by the cohort timeout before group_size members arrived: judged "
        "with those it had."
    )
    wait_ms: float = Field(
        description="This call's wait for the cohort to close, from its own arrival (a retry "
        "that took over a member: from the retry's arrival; 0 if the cohort had closed)."
    )
    index: int = Field(description="This completion's place in the group, ordered by content.")
    completions: int = Field(description="Completions judged as the group (= arrived).")
    rewards: list[float | None] = Field(description="Every completion's reward, in that order.")
    judgments: int = Field(description="Judgments the group took (shared by its members).")
    rounds: int
    strategy: GroupStrategy
    debias: Debias
    mode: Mode
    scoring: Scoring = Field(description=SCORING_DESCRIPTION)
    seed: int = Field(description="The group's seed (with its completions: /v1/rewards again).")
    usage: Usage = Field(description="The whole group's engine work.")


class SampleRewardResponse(BaseModel):
    reward: float | None = Field(
        description="This completion's reward in [0, 1] within its group; null if none of its "
        "comparisons had a verdict (or it was alone in a cut cohort)."
    )
    no_verdict: int = Field(description="Its comparisons that ended without a verdict.")
    wins: int
    losses: int
    ties: int
    empty: bool = Field(description="Whitespace-only: not judged, reward 0.")
    duplicate_of: int | None = Field(
        None,
        description="The group's completion it equals after whitespace normalisation (its "
        "reward is that one's).",
    )
    retried: bool = Field(
        description="This call took over the member of an earlier call with the same "
        "completion whose client had gone (a retry): no new judgment was made for it."
    )
    cohort: CohortResult
    latency_ms: float
    model: str
    template_version: str
    request_id: str


# --- OpenRLHF remote reward model (--reward.remote_url) ----------------------------------------


class OpenRLHFRequest(BaseModel):
    """The body OpenRLHF's remote reward client posts (openrlhf 0.11.2,
    openrlhf/utils/agent.py `SingleTurnAgentExecutor._fetch_rewards_via_http`)."""

    model_config = ConfigDict(extra="ignore")

    query: list[Annotated[str, Field(max_length=2 * MAX_TEXT_CHARS)]] = Field(
        ..., min_length=1, max_length=10_000, description="Prompt plus response, as decoded."
    )
    prompts: list[Annotated[str, Field(max_length=MAX_TEXT_CHARS)]] = Field(
        ..., min_length=1, max_length=10_000
    )
    labels: list[str | None] = Field(
        ..., min_length=1, max_length=10_000, description="Reference answers (--data.label_key)."
    )

    @model_validator(mode="after")
    def _aligned(self) -> OpenRLHFRequest:
        if not len(self.query) == len(self.prompts) == len(self.labels):
            raise ValueError(
                f"`query`, `prompts` and `labels` must have one entry per sample; got "
                f"{len(self.query)}, {len(self.prompts)} and {len(self.labels)}"
            )
        return self


class OpenRLHFResponse(BaseModel):
    rewards: list[float]
    scores: list[float]
    extra_logs: dict[str, list[float]] = Field(
        description="Per sample, numbers only (OpenRLHF turns each into a tensor)."
    )


class OpenRLHFOptions(BaseModel):
    """Judging settings for /get_reward, as query parameters of the URL given to OpenRLHF
    (e.g. ``--reward.remote_url http://host:8000/get_reward?mode=single``)."""

    model_config = ConfigDict(extra="forbid")

    mode: Mode = Field(defaults.REWARD_MODE, description=MODE_DESCRIPTION)
    debias: Debias = Field(defaults.GROUP_DEBIAS, description=DEBIAS_DESCRIPTION)
    num_candidates: int | None = Field(None, ge=1, le=32)
    max_tokens: int | None = Field(None, ge=16)
    seed: int | None = Field(None, ge=0, lt=2**31)
    group_size: int | None = Field(
        None,
        ge=2,
        le=1000,
        description="Group rewards: each sample is a member of its prompt's group of this size "
        "(OpenRLHF's n_samples_per_prompt), judged once the group is whole; labels are not "
        "needed. Without it each sample is judged against its label.",
    )
    strategy: GroupStrategy = Field(
        defaults.COHORT_STRATEGY, description=COHORT_STRATEGY_DESCRIPTION
    )
    cohort_timeout_s: float | None = Field(None, gt=0, description=COHORT_TIMEOUT_DESCRIPTION)
    tenant: str | None = Field(
        None,
        pattern=r"^[A-Za-z0-9._:-]{1,64}$",
        description="The tenant, i.e. the job (within the API key's share when keys are on), "
        "for clients that can set only the URL; the user name of HTTP Basic auth "
        "(http://job-a:KEY@host:8000/get_reward) or the X-Reflectrm-Tenant header come first.",
    )
