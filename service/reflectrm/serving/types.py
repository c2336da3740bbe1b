"""What the service is asked (a pair, a batch item, a group, per-sample rewards) and what it
answers, as plain data. Every ask carries its judging ``Options`` as one value (``None`` in them
means "the server's default"); after the server's defaults they are a ``Judging``."""

from __future__ import annotations

from dataclasses import dataclass

from reflectrm.judging import defaults
from reflectrm.judging.answers import PairAnswer
from reflectrm.judging.debias import Debias, Debiased
from reflectrm.judging.groups import Comparison, CompletionReward, Strategy
from reflectrm.judging.modes import mode_spec
from reflectrm.judging.types import (
    Ablation,
    EngineUsage,
    Judgment,
    JudgmentSpec,
    Message,
    Mode,
    Scoring,
)
from reflectrm.serving.reuse import How


@dataclass(frozen=True)
class Options:
    """How a call asks its pairs to be judged, as one value from the request to the judge:
    ``None`` is the server's default (``Limits.judging`` fills it in and bounds it)."""

    mode: Mode = defaults.MODE
    debias: Debias = defaults.PAIR_DEBIAS
    num_candidates: int | None = None
    max_tokens: int | None = None
    seed: int | None = None
    ablation: Ablation = "none"


@dataclass(frozen=True)
class Judging:
    """The options after the server's defaults and bounds: what each judgment of the call is
    judged with. ``seed`` as asked (None: each judgment, or the group, draws one)."""

    mode: Mode
    debias: Debias
    num_candidates: int
    max_tokens: int
    seed: int | None
    ablation: Ablation = "none"

    @property
    def candidates(self) -> int:
        """Candidates (stage-1 outputs) of one judgment: one greedy output in single mode."""
        return mode_spec(self.mode).candidates(self.num_candidates)

    def spec(
        self, conversation: tuple[Message, ...], responses: tuple[str, str], seed: int
    ) -> JudgmentSpec:
        """One judgment of two responses, with ``seed`` (the asked one, or one drawn for it)."""
        return JudgmentSpec(
            conversation,
            responses,
            mode=self.mode,
            num_candidates=self.num_candidates,
            seed=seed,
            max_tokens=self.max_tokens,
            ablation=self.ablation,
        )


@dataclass(frozen=True)
class Envelope:
    """What every answer carries besides its result."""

    request_id: str
    latency_ms: float
    model: str
    template_version: str


# Groups, cohorts and OpenRLHF samples are judged in both orders unless asked otherwise.
GROUP_OPTIONS = Options(debias=defaults.GROUP_DEBIAS)


# --- a pair ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class PairAsk:
    conversation: tuple[Message, ...]
    responses: tuple[str, str]
    options: Options = Options()
    # Also judge the swapped order and report agreement; the answer stays the first order's.
    check_swap: bool = False
    # The caller wants every candidate and reflection back (the service keeps them anyway).
    with_trace: bool = False
    # Why the pair is judged in the mode and debias it left to the served judge, when those
    # are not the method's (told in the reply).
    note: str | None = None

    @property
    def two_orders(self) -> bool:
        return self.check_swap or self.options.debias == "swap"


@dataclass(frozen=True)
class PairResult:
    ask: PairAsk
    request: JudgmentSpec  # the ask with the server's defaults applied
    judgment: Judgment
    swap: Judgment | None  # the swapped order's judgment, when both orders ran
    answer: PairAnswer
    envelope: Envelope
    # "joined" (an identical call in flight) or "cached" (answered recently): the answer is
    # another call's, and this call cost no engine work.
    reused: How = "judged"

    @property
    def usage(self) -> EngineUsage:
        """This call's own engine work: none for a reused answer."""
        return self.answer.usage if self.reused == "judged" else EngineUsage()


# --- a batch of pairs ------------------------------------------------------------------------


@dataclass(frozen=True)
class FailedItem:
    """A batch item that failed on its own content (it did not validate, is over a limit, or is
    too long for the model): its mode for the metrics and the error it is answered with. The
    other items are judged."""

    mode: str
    error: Exception


@dataclass(frozen=True)
class BatchResult:
    items: tuple[PairResult | FailedItem, ...]  # one per item, in order
    envelope: Envelope

    @property
    def judgments(self) -> tuple[Judgment, ...]:
        return tuple(
            j
            for item in self.items
            if isinstance(item, PairResult)
            for j in (item.judgment, *([item.swap] if item.swap else []))
        )

    @property
    def usage(self) -> EngineUsage:
        """The batch's own engine work: reused items add none."""
        return sum(
            (item.usage for item in self.items if isinstance(item, PairResult)), EngineUsage()
        )

    @property
    def judged(self) -> int:
        return sum(isinstance(item, PairResult) for item in self.items)


# --- a group of completions ------------------------------------------------------------------


@dataclass(frozen=True)
class GroupAsk:
    conversation: tuple[Message, ...]
    completions: tuple[str, ...]
    strategy: Strategy
    reference: str | None = None
    pivot: int | None = None
    options: Options = GROUP_OPTIONS


@dataclass(frozen=True)
class GroupSpec:
    """A group's judging settings, after the server's defaults."""

    conversation: tuple[Message, ...]
    completions: tuple[str, ...]
    reference: str | None
    strategy: Strategy
    pivot: int | None
    judging: Judging
    seed: int  # the group's: its design's draws, and its comparisons' seeds
    # The caller gave no seed and the service drew it (identical calls are matched without it).
    seed_drawn: bool = False


@dataclass(frozen=True)
class Judged:
    """One comparison of a group, judged: its answer in (a, b) numbering and its runs."""

    comparison: Comparison
    answer: Debiased
    firsts: tuple[int | None, ...]  # per order, the side shown first (None: the reference)
    judgments: tuple[Judgment, ...]


@dataclass(frozen=True)
class GroupResult:
    spec: GroupSpec
    pivot: int | None
    rewards: list[CompletionReward]
    judged: list[Judged]
    envelope: Envelope
    reused: How = "judged"  # as PairResult.reused

    @property
    def usage(self) -> EngineUsage:
        """This call's own engine work: none for a reused answer."""
        if self.reused != "judged":
            return EngineUsage()
        return sum((j.usage for c in self.judged for j in c.judgments), EngineUsage())

    @property
    def judgments(self) -> int:
        return sum(len(j.judgments) for j in self.judged)

    @property
    def scoring(self) -> Scoring:
        """ "probability" when every judgment of the group had verdict probabilities (none
        judged: the server's own choice cannot be seen, so "votes" is not claimed either way)."""
        runs = [j for c in self.judged for j in c.judgments]
        return "votes" if any(j.scoring == "votes" for j in runs) else "probability"

    @property
    def rounds(self) -> int:
        """Rounds judged (1 for a one-round strategy; 0 when nothing was judged)."""
        return max((j.comparison.round for j in self.judged), default=0)


# --- one member of a cohort (a group's completions arriving as per-sample calls) ------------


@dataclass(frozen=True)
class MemberAsk:
    """One completion of a group whose other completions arrive in calls of their own."""

    conversation: tuple[Message, ...]
    completion: str
    group_size: int
    # The cohort's name within the tenant; None: the conversation's text (which the N rollouts
    # of one prompt share).
    group_id: str | None = None
    strategy: Strategy = defaults.COHORT_STRATEGY
    options: Options = GROUP_OPTIONS
    cohort_timeout_s: float | None = None


@dataclass(frozen=True)
class MemberResult:
    """A member's reward, and its cohort's figures."""

    index: int  # the member's completion in the group's order (by content)
    reward: CompletionReward
    group: GroupResult
    group_id: str
    group_size: int  # as asked
    arrived: int  # members in the cohort when it closed
    cut: bool  # closed by the timeout before group_size members arrived
    wait_s: float  # from this call's arrival to the cohort's close
    adopted: bool  # a retry that took over the member of a caller that had gone
    envelope: Envelope


# --- per-sample rewards (OpenRLHF's remote reward model) ------------------------------------


@dataclass(frozen=True)
class SampleAsk:
    """One sample of a per-sample reward call: the query is the prompt followed by the
    response, as the trainer decoded it; the label is the reference answer."""

    query: str
    prompt: str
    label: str | None


@dataclass(frozen=True)
class SampleOptions:
    options: Options = GROUP_OPTIONS
    # Cohorts: each sample is a member of its prompt's group of this size (None: each sample
    # judged against its label instead).
    group_size: int | None = None
    strategy: Strategy = defaults.COHORT_STRATEGY
    cohort_timeout_s: float | None = None
