"""Between the HTTP contract (``api.schemas``) and the judging service's own types: request
bodies into asks, results into response bodies. Field mapping only; the arithmetic is in
``judging`` and the defaults and limits in the service."""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Protocol

from pydantic import ValidationError

from reflectrm.api import schemas
from reflectrm.api.errors import status_of
from reflectrm.judging import defaults, types
from reflectrm.judging.debias import Debias
from reflectrm.judging.groups import Comparison, failed_reward
from reflectrm.serving.errors import InvalidRequestError
from reflectrm.serving.types import (
    BatchResult,
    Envelope,
    FailedItem,
    GroupAsk,
    GroupResult,
    Judged,
    MemberAsk,
    MemberResult,
    Options,
    PairAsk,
    PairResult,
    SampleAsk,
    SampleOptions,
)
from reflectrm.settings import PairDefaults

# --- requests --------------------------------------------------------------------------------


def messages_of(body: schemas.Conversation) -> tuple[types.Message, ...]:
    if body.messages is not None:
        return tuple(types.Message(m.role, m.content) for m in body.messages)
    assert body.prompt is not None  # the schema requires one of the two
    return (types.Message("user", body.prompt),)


class AsksJudging(Protocol):
    """The judging fields every judging request carries (its options, as one value inside)."""

    @property
    def mode(self) -> types.Mode: ...
    @property
    def debias(self) -> Debias: ...
    @property
    def num_candidates(self) -> int | None: ...
    @property
    def max_tokens(self) -> int | None: ...
    @property
    def seed(self) -> int | None: ...


def options_of(body: AsksJudging) -> Options:
    return Options(
        mode=body.mode,
        debias=body.debias,
        num_candidates=body.num_candidates,
        max_tokens=body.max_tokens,
        seed=body.seed,
    )


# A pair's mode and debias where its call names none: the method's, unless the served judge's
# manifest says otherwise (Settings.pair_defaults).
METHOD_DEFAULTS = PairDefaults(defaults.MODE, defaults.PAIR_DEBIAS)


def pair_ask(body: schemas.JudgeRequest, served: PairDefaults = METHOD_DEFAULTS) -> PairAsk:
    """The pair as asked, with the served judge's defaults where the call names no mode or
    debias (an ablation is of reflect mode); ``note`` says why when they are not the method's."""
    mode = body.mode or ("reflect" if body.ablation != "none" else served.mode)
    debias = body.debias or served.debias
    left = (body.mode is None and mode != defaults.MODE) or (
        body.debias is None and debias != defaults.PAIR_DEBIAS
    )
    return PairAsk(
        conversation=messages_of(body),
        responses=(body.responses[0], body.responses[1]),
        options=Options(
            mode=mode,
            debias=debias,
            num_candidates=body.num_candidates,
            max_tokens=body.max_tokens,
            seed=body.seed,
            ablation=body.ablation,
        ),
        check_swap=body.check_swap,
        with_trace=body.return_trace,
        note=served.why if left else None,
    )


def batch_mode(body: schemas.BatchRequest, served: PairDefaults = METHOD_DEFAULTS) -> str:
    """The mode a batch is counted under: its defaults' mode, else the served default."""
    return body.defaults.mode if body.defaults and body.defaults.mode else served.mode


# Stands in for the defaults' conversation while an item that has none of its own is validated,
# so that a large default prompt is validated and held once, not copied into every item.
_SHARED = "(the defaults' conversation)"


def _item_body(raw: dict[str, object], defaults: dict[str, object]) -> schemas.JudgeRequest:
    """An item completed by the defaults (an item's conversation replaces the default one)."""
    merged = dict(defaults)
    if "prompt" in raw or "messages" in raw:
        merged.pop("prompt", None)
        merged.pop("messages", None)
    merged.update(raw)
    return schemas.JudgeRequest.model_validate(merged)


def _validation_detail(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


def _one_item(
    raw: dict[str, object], defaults: dict[str, object], mode: str, served: PairDefaults
) -> PairAsk | FailedItem:
    try:
        return pair_ask(_item_body(raw, defaults), served)
    except ValidationError as exc:
        return FailedItem(
            str(raw.get("mode") or mode), InvalidRequestError(_validation_detail(exc))
        )


def batch_items(
    body: schemas.BatchRequest, served: PairDefaults = METHOD_DEFAULTS
) -> list[PairAsk | FailedItem]:
    """Each item as an ask, or, when it does not validate, as a failed item (422) whose error
    says what to fix; the other items are judged. Items without a conversation of their own
    share the defaults' one: one object for all of them."""
    mode = batch_mode(body, served)
    defaults: dict[str, object] = {}
    shared: tuple[types.Message, ...] | None = None
    if body.defaults is not None:
        defaults = body.defaults.model_dump(exclude_none=True, exclude={"prompt", "messages"})
        if body.defaults.prompt is not None or body.defaults.messages is not None:
            try:  # the defaults' conversation is checked once, as an item's own would be
                schemas.Conversation.model_validate(
                    body.defaults.model_dump(include={"prompt", "messages"}, exclude_none=True)
                )
            except ValidationError as exc:
                detail = "defaults: " + _validation_detail(exc)
                return [
                    FailedItem(str(raw.get("mode") or mode), InvalidRequestError(detail))
                    if "prompt" not in raw and "messages" not in raw
                    else _one_item(raw, defaults, mode, served)
                    for raw in body.items
                ]
            shared = messages_of(body.defaults)  # type: ignore[arg-type]
            defaults["prompt"] = _SHARED
    items: list[PairAsk | FailedItem] = []
    for raw in body.items:
        own = "prompt" in raw or "messages" in raw
        try:
            ask = pair_ask(_item_body(raw, defaults), served)
        except ValidationError as exc:
            error = InvalidRequestError(_validation_detail(exc))
            items.append(FailedItem(str(raw.get("mode") or mode), error))
            continue
        if shared is not None and not own:
            ask = dataclasses.replace(ask, conversation=shared)
        items.append(ask)
    return items


def group_ask(body: schemas.RewardsRequest) -> GroupAsk:
    return GroupAsk(
        conversation=messages_of(body),
        completions=tuple(body.completions),
        strategy=body.resolved_strategy,
        reference=body.reference,
        pivot=body.pivot,
        options=options_of(body),
    )


def member_ask(body: schemas.SampleRewardRequest) -> MemberAsk:
    return MemberAsk(
        conversation=messages_of(body),
        completion=body.completion,
        group_size=body.group_size,
        group_id=body.group_id,
        strategy=body.strategy,
        options=options_of(body),
        cohort_timeout_s=body.cohort_timeout_s,
    )


def sample_asks(body: schemas.OpenRLHFRequest) -> list[SampleAsk]:
    return [
        SampleAsk(query=q, prompt=p, label=label)
        for q, p, label in zip(body.query, body.prompts, body.labels, strict=True)
    ]


def sample_options(options: schemas.OpenRLHFOptions) -> SampleOptions:
    return SampleOptions(
        options=options_of(options),
        group_size=options.group_size,
        strategy=options.strategy,
        cohort_timeout_s=options.cohort_timeout_s,
    )


# --- responses -------------------------------------------------------------------------------


def _envelope(e: Envelope) -> dict[str, Any]:
    """The fields every judging response carries besides its result."""
    return {
        "latency_ms": e.latency_ms,
        "model": e.model,
        "template_version": e.template_version,
        "request_id": e.request_id,
    }


def usage_of(*usages: types.EngineUsage) -> schemas.Usage:
    total = sum(usages, types.EngineUsage())
    return schemas.Usage(
        prompt_tokens=total.prompt_tokens,
        generated_tokens=total.generated_tokens,
        engine_requests=total.engine_requests,
        cached_prompt_tokens=total.cached_prompt_tokens,
    )


def trace_of(j: types.Judgment) -> schemas.JudgmentTrace:
    t = j.trace
    return schemas.JudgmentTrace(
        candidates=[
            schemas.CandidateTrace(
                index=c.index,
                verdict=c.verdict,
                parsed=c.verdict is not None,
                parse_error=c.parse_error,
                confidence=c.confidence if math.isfinite(c.confidence) else None,
                probabilities=c.probabilities,
                num_tokens=c.num_tokens,
                analysis=c.analysis,
            )
            for c in t.candidates
        ],
        anchor=t.anchor,
        reflections=[
            schemas.ReflectionTrace(
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


def judge_response(result: PairResult) -> schemas.JudgeResponse:
    a, swap, with_trace = result.answer, result.swap, result.ask.with_trace
    return schemas.JudgeResponse(
        winner=a.winner,
        scores=a.scores,
        scoring=a.scoring,
        outcome=a.outcome,
        mode=a.mode,
        debias=a.debias,
        note=result.ask.note,
        analysis=a.analysis,
        votes=a.votes,
        early_exit=a.early_exit,
        consistent=a.consistent,
        swapped_winner=a.swapped_winner,
        orders=[
            schemas.JudgeOrder(first=first, winner=w, scores=sc)
            for first, (w, sc) in zip((1, 2), a.orders, strict=True)
        ]
        if swap
        else None,
        parse_failures=a.parse_failures,
        usage=usage_of(result.usage),
        seed=a.seed,
        trace=trace_of(result.judgment) if with_trace else None,
        swapped_trace=trace_of(swap) if (swap and with_trace) else None,
        **_envelope(result.envelope),
    )


def batch_response(result: BatchResult) -> schemas.BatchResponse:
    """A failed item gets the status a single call would have got (the error table's)."""
    items = []
    for index, item in enumerate(result.items):
        if isinstance(item, PairResult):
            items.append(schemas.BatchItem(index=index, status=200, result=judge_response(item)))
        else:
            status = status_of(item.error)
            items.append(schemas.BatchItem(index=index, status=status, detail=str(item.error)))
    return schemas.BatchResponse(
        results=items,
        judged=result.judged,
        failed=len(result.items) - result.judged,
        usage=usage_of(result.usage),
        **_envelope(result.envelope),
    )


def _side(side: int | None) -> schemas.Side:
    return "reference" if side is None else side


def _winner(comp: Comparison, winner: int | None) -> schemas.Side | None:
    if winner is None:
        return None
    return comp.a if winner == 1 else _side(comp.b)


def comparison_result(j: Judged, reused: bool = False) -> schemas.ComparisonResult:
    """One comparison of a group; ``reused``: the group's answer is another call's, and this
    call's engine work for it none."""
    comp, answer = j.comparison, j.answer
    orders = [
        schemas.ComparisonOrder(first=_side(first), winner=_winner(comp, w), scores=sc)
        for first, w, sc in zip(j.firsts, answer.order_winners, answer.order_scores, strict=True)
    ]
    return schemas.ComparisonResult(
        pair=(comp.a, _side(comp.b)),
        round=comp.round,
        scores=answer.scores,
        winner=_winner(comp, answer.winner),
        outcome=answer.outcome,
        consistent=answer.consistent,
        orders=orders,
        seed=comp.seed,
        usage=usage_of() if reused else usage_of(*(x.usage for x in j.judgments)),
    )


def rewards_response(result: GroupResult) -> schemas.RewardsResponse:
    spec = result.spec
    return schemas.RewardsResponse(
        rewards=[r.reward for r in result.rewards],
        strategy=spec.strategy,
        debias=spec.judging.debias,
        mode=spec.judging.mode,
        scoring=result.scoring,
        pivot=result.pivot,
        completions=[
            schemas.CompletionResult(
                index=r.index,
                reward=r.reward,
                wins=r.wins,
                losses=r.losses,
                ties=r.ties,
                no_verdict=r.no_verdict,
                empty=r.empty,
                duplicate_of=r.duplicate_of,
                rounds_survived=r.rounds_survived,
            )
            for r in result.rewards
        ],
        comparisons=[comparison_result(j, result.reused != "judged") for j in result.judged],
        judgments=result.judgments,
        rounds=result.rounds,
        usage=usage_of(result.usage),
        seed=spec.seed,
        **_envelope(result.envelope),
    )


def openrlhf_response(results: list[GroupResult]) -> schemas.OpenRLHFResponse:
    """OpenRLHF's reply. ``judge_consistent`` and ``judge_inconsistent`` (1.0 when the two
    orders agreed, resp. disagreed; both 0.0 when that was not measured: an order without a
    verdict, an empty response) are there only when both orders were judged (debias swap):
    under ``debias=none`` consistency is not measured, and a 0.0 would read as "inconsistent".
    The keys depend on the call's settings only, so every sample of a run has the same ones
    (OpenRLHF concatenates them across samples)."""
    rewards: list[float] = []
    swap = any(r.spec.judging.debias == "swap" for r in results)
    keys = ["judge_reward_first_order", "judge_reward_second_order"]
    keys += ["judge_consistent", "judge_inconsistent"] if swap else []
    keys += ["judge_no_verdict", "judge_failed", "judge_generated_tokens"]
    logs: dict[str, list[float]] = {key: [] for key in keys}
    for result in results:
        reward = result.rewards[0].reward
        number = failed_reward(()) if reward is None else reward
        rewards.append(number)
        orders = result.judged[0].answer.order_scores if result.judged else ()
        # One order (debias none) or none (an empty response): the reward stands for the rest.
        per_order = [s[0] for s in orders] + [number] * (2 - len(orders))
        logs["judge_reward_first_order"].append(per_order[0])
        logs["judge_reward_second_order"].append(per_order[1])
        if swap:
            consistent = result.judged[0].answer.consistent if result.judged else None
            logs["judge_consistent"].append(1.0 if consistent is True else 0.0)
            logs["judge_inconsistent"].append(1.0 if consistent is False else 0.0)
        logs["judge_no_verdict"].append(1.0 if reward is None else 0.0)
        logs["judge_failed"].append(1.0 if reward is None else 0.0)
        logs["judge_generated_tokens"].append(float(result.usage.generated_tokens))
    return schemas.OpenRLHFResponse(rewards=rewards, scores=rewards, extra_logs=logs)


def cohort_result(result: MemberResult) -> schemas.CohortResult:
    group, spec = result.group, result.group.spec
    return schemas.CohortResult(
        group_id=result.group_id,
        group_size=result.group_size,
        arrived=result.arrived,
        cut=result.cut,
        wait_ms=round(result.wait_s * 1000, 1),
        index=result.index,
        completions=len(spec.completions),
        rewards=[r.reward for r in group.rewards],
        judgments=group.judgments,
        rounds=group.rounds,
        strategy=spec.strategy,
        debias=spec.judging.debias,
        mode=spec.judging.mode,
        scoring=group.scoring,
        seed=spec.seed,
        usage=usage_of(group.usage),
    )


def sample_reward_response(result: MemberResult) -> schemas.SampleRewardResponse:
    r = result.reward
    return schemas.SampleRewardResponse(
        reward=r.reward,
        no_verdict=r.no_verdict,
        wins=r.wins,
        losses=r.losses,
        ties=r.ties,
        empty=r.empty,
        duplicate_of=r.duplicate_of,
        retried=result.adopted,
        cohort=cohort_result(result),
        **_envelope(result.envelope),
    )


def openrlhf_cohort_response(results: list[MemberResult]) -> schemas.OpenRLHFResponse:
    """Group rewards for OpenRLHF: a sample without a reward (no verdict in its comparisons, or
    alone in a cut cohort) gets the mean of its cohort's judged rewards (``failed_reward``: the
    group's mean stays the judged members', its advantage against it zero), flagged in
    ``judge_failed``; the cohort's figures ride in ``extra_logs`` (numbers only)."""
    rewards: list[float] = []
    logs: dict[str, list[float]] = {
        "judge_failed": [],
        "judge_no_verdict": [],
        "judge_cohort_arrived": [],
        "judge_cohort_cut": [],
        "judge_cohort_wait_s": [],
        "judge_judgments_per_reward": [],
        "judge_generated_tokens_per_reward": [],
    }
    for result in results:
        reward = result.reward.reward
        group, n = result.group, max(1, len(result.group.spec.completions))
        alone = result.cut and result.arrived < 2
        rewards.append(
            failed_reward([r.reward for r in group.rewards]) if reward is None else reward
        )
        logs["judge_failed"].append(1.0 if reward is None else 0.0)
        logs["judge_no_verdict"].append(1.0 if reward is None and not alone else 0.0)
        logs["judge_cohort_arrived"].append(float(result.arrived))
        logs["judge_cohort_cut"].append(1.0 if result.cut else 0.0)
        logs["judge_cohort_wait_s"].append(round(result.wait_s, 3))
        logs["judge_judgments_per_reward"].append(group.judgments / n)
        logs["judge_generated_tokens_per_reward"].append(group.usage.generated_tokens / n)
    return schemas.OpenRLHFResponse(rewards=rewards, scores=rewards, extra_logs=logs)
