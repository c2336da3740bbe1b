"""The judging work the routes share, built on ``Call``: a pair in one or both orders, a batch of
pairs, a group of completions, OpenRLHF's per-sample reward.

Admission: every judgment takes its own slot through ``call.judgment``, so a batch or a group
that needs N judgments queues as N judgments in the same first-come-first-served queue as single
calls (a group's wait is bounded like theirs), and no judgment holds a slot while waiting for
another, so a large group cannot deadlock the service. A batch's or group's judgments are
submitted together, so the engine batches them.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass

from fastapi import HTTPException
from pydantic import ValidationError

from reflectrm.aio import gather_all
from reflectrm.api import schemas
from reflectrm.api.call import Call, Recorder
from reflectrm.judging import types
from reflectrm.judging.debias import Debias, Debiased, both_orders, flipped, single_order
from reflectrm.judging.judge import PromptTooLongError, swapped
from reflectrm.judging.groups import (
    NO_VERDICT_REWARD,
    Comparison,
    CompletionReward,
    Strategy,
    aggregate,
    plan,
)
from reflectrm.metrics import outcome_of_status
from reflectrm.settings import Settings

# --- requests --------------------------------------------------------------------------------


def max_tokens_of(requested: int | None, settings: Settings) -> int:
    max_tokens = requested or settings.max_tokens
    if max_tokens > settings.max_tokens_limit:
        raise HTTPException(
            422,
            detail=f"max_tokens is {max_tokens}; this server allows at most "
            f"{settings.max_tokens_limit} (REFLECTRM_MAX_TOKENS_LIMIT)",
        )
    return max_tokens


def conversation_of(body: schemas.Conversation) -> tuple[types.Message, ...]:
    if body.messages is not None:
        return tuple(types.Message(m.role, m.content) for m in body.messages)
    assert body.prompt is not None  # the schema requires one of the two
    return (types.Message("user", body.prompt),)


def new_seed() -> int:
    return secrets.randbelow(2**31)


def to_request(body: schemas.JudgeRequest, settings: Settings) -> types.JudgeRequest:
    """Apply the server's defaults and check limits that depend on settings."""
    ablation: types.Ablation = getattr(body, "ablation", "none")
    if ablation != "none" and not settings.allow_ablations:
        raise HTTPException(
            422,
            detail=f"ablation {ablation!r} is for evaluation and this server does not "
            "allow it; start it with REFLECTRM_ALLOW_ABLATIONS=true",
        )
    return types.JudgeRequest(
        conversation=conversation_of(body),
        responses=(body.responses[0], body.responses[1]),
        mode=body.mode,
        num_candidates=body.num_candidates or settings.num_candidates,
        seed=new_seed() if body.seed is None else body.seed,
        max_tokens=max_tokens_of(body.max_tokens, settings),
        ablation=ablation,
    )


def check_count(what: str, count: int, limit: int, setting: str) -> None:
    if count > limit:
        raise HTTPException(
            422, detail=f"{count} {what}; this server allows at most {limit} ({setting})"
        )


# --- one pair ----------------------------------------------------------------------------------


async def judge_orders(
    call: Call, request: types.JudgeRequest, two_orders: bool, suffix: str = ""
) -> tuple[types.Judgment, types.Judgment | None]:
    """The judgment, and with ``two_orders`` the swapped-order one beside it (concurrently)."""
    if not two_orders:
        return await call.judgment(request, suffix), None
    first, second = await gather_all(
        [call.judgment(request, suffix), call.judgment(swapped(request), suffix + "-swap")]
    )
    return first, second


def pair_response(
    call: Call,
    body: schemas.JudgeRequest,
    judgment: types.Judgment,
    swap: types.Judgment | None,
    request_id: str,
) -> schemas.JudgeResponse:
    return schemas.judge_response(
        judgment,
        swap,
        debias=body.debias,
        request_id=request_id,
        latency_ms=call.latency_ms,
        model=call.judge.engine.model_name,
        template_version=call.judge.template.version,
        with_trace=body.return_trace,
    )


# --- a batch of pairs ------------------------------------------------------------------------


def item_body(
    raw: dict[str, object], defaults: schemas.BatchDefaults | None
) -> schemas.JudgeRequest:
    """An item completed by the defaults (an item's conversation replaces the default one)."""
    merged: dict[str, object] = {}
    if defaults is not None:
        merged = defaults.model_dump(exclude_none=True)
        if "prompt" in raw or "messages" in raw:
            merged.pop("prompt", None)
            merged.pop("messages", None)
    merged.update(raw)
    return schemas.JudgeRequest.model_validate(merged)


def validation_detail(exc: ValidationError) -> str:
    parts = []
    for error in exc.errors(include_url=False):
        where = ".".join(str(p) for p in error["loc"])
        parts.append(f"{where}: {error['msg']}" if where else error["msg"])
    return "; ".join(parts)


@dataclass(frozen=True)
class ItemDone:
    item: schemas.BatchItem
    mode: str
    judgments: tuple[types.Judgment, ...] = ()


async def judge_item(
    call: Call, index: int, raw: dict[str, object], defaults: schemas.BatchDefaults | None
) -> ItemDone:
    """One batch item. What is wrong with the item itself (422, 413) becomes its own error;
    what is wrong with the service (429, 503, 504, a disconnect) fails the whole batch."""
    mode = str(raw.get("mode") or (defaults.mode if defaults and defaults.mode else "reflect"))
    try:
        body = item_body(raw, defaults)
        request = to_request(body, call.settings)
        judgment, swap = await judge_orders(call, request, body.two_orders, f"-i{index}")
    except ValidationError as exc:
        return ItemDone(
            schemas.BatchItem(index=index, status=422, detail=validation_detail(exc)), mode
        )
    except HTTPException as exc:
        return ItemDone(
            schemas.BatchItem(index=index, status=exc.status_code, detail=exc.detail), mode
        )
    except PromptTooLongError as exc:
        return ItemDone(schemas.BatchItem(index=index, status=413, detail=str(exc)), mode)
    item_id = f"{call.request_id}-i{index}"
    if swap is None:
        call.state.swap_checks.offer(call.judge, request, judgment, item_id)
    result = pair_response(call, body, judgment, swap, item_id)
    done = (judgment,) if swap is None else (judgment, swap)
    return ItemDone(schemas.BatchItem(index=index, status=200, result=result), body.mode, done)


def failed(index: int, status: int, detail: str) -> schemas.BatchItem:
    return schemas.BatchItem(index=index, status=status, detail=detail)


def item_outcome(done: ItemDone) -> str:
    if done.item.result is not None:
        return done.item.result.outcome
    return outcome_of_status(done.item.status)


# --- a group of completions ------------------------------------------------------------------


@dataclass(frozen=True)
class GroupSpec:
    """A group's judging settings, after the server's defaults."""

    conversation: tuple[types.Message, ...]
    completions: tuple[str, ...]
    reference: str | None
    strategy: Strategy
    pivot: int | None
    mode: types.Mode
    debias: Debias
    num_candidates: int
    max_tokens: int
    seed: int


@dataclass(frozen=True)
class Judged:
    """One comparison of a group, judged: its answer in (a, b) numbering and its runs."""

    comparison: Comparison
    answer: Debiased
    firsts: tuple[int | None, ...]  # per order, the side shown first (None: the reference)
    judgments: tuple[types.Judgment, ...]


@dataclass(frozen=True)
class GroupResult:
    spec: GroupSpec
    pivot: int | None
    rewards: list[CompletionReward]
    judged: list[Judged]

    @property
    def usage(self) -> types.Usage:
        return sum((j.usage for c in self.judged for j in c.judgments), types.Usage())


def describe(comparison: Comparison) -> str:
    against = "the reference" if comparison.b is None else f"completion {comparison.b}"
    return f"the judging prompt of completion {comparison.a} against {against}"


async def judge_comparison(call: Call, spec: GroupSpec, comp: Comparison, suffix: str) -> Judged:
    text_a = spec.completions[comp.a]
    text_b = spec.reference if comp.b is None else spec.completions[comp.b]
    assert text_b is not None  # strategy reference always has a reference

    def request(first: str, second: str) -> types.JudgeRequest:
        return types.JudgeRequest(
            conversation=spec.conversation,
            responses=(first, second),
            mode=spec.mode,
            num_candidates=spec.num_candidates,
            seed=comp.seed,
            max_tokens=spec.max_tokens,
        )

    try:
        if spec.debias == "swap":
            j, s = await judge_orders(call, request(text_a, text_b), True, suffix)
            assert s is not None
            return Judged(comp, both_orders(j, s), (comp.a, comp.b), (j, s))
        if comp.a_first:
            j, _ = await judge_orders(call, request(text_a, text_b), False, suffix)
            return Judged(comp, single_order(j), (comp.a,), (j,))
        j, _ = await judge_orders(call, request(text_b, text_a), False, suffix)
        return Judged(comp, flipped(single_order(j)), (comp.b,), (j,))
    except PromptTooLongError as exc:
        raise PromptTooLongError(exc.needed, exc.limit, describe(comp)) from None


async def judge_group(call: Call, spec: GroupSpec, suffix: str = "") -> GroupResult:
    """Every comparison of the group's strategy, concurrently, then one reward per completion."""
    comparisons, pivot = plan(spec.strategy, spec.completions, spec.seed, spec.pivot)
    judged = await gather_all(
        [judge_comparison(call, spec, c, f"{suffix}-c{k}") for k, c in enumerate(comparisons)]
    )
    rewards = aggregate(spec.completions, [(j.comparison, j.answer) for j in judged])
    for j in judged:
        count_swap_check(call, j)
    return GroupResult(spec, pivot, rewards, judged)


def count_swap_check(call: Call, judged: Judged) -> None:
    """Both orders ran: a positional-consistency sample for the metrics, like check_swap's."""
    if len(judged.judgments) == 2:
        Recorder(call, judged.judgments[0].mode).count_swap(*judged.judgments)


def group_spec(body: schemas.RewardsRequest, settings: Settings) -> GroupSpec:
    check_count(
        "completions", len(body.completions), settings.max_group_size, "REFLECTRM_MAX_GROUP_SIZE"
    )
    return GroupSpec(
        conversation=conversation_of(body),
        completions=tuple(body.completions),
        reference=body.reference,
        strategy=body.resolved_strategy,
        pivot=body.pivot,
        mode=body.mode,
        debias=body.debias,
        num_candidates=body.num_candidates or settings.num_candidates,
        max_tokens=max_tokens_of(body.max_tokens, settings),
        seed=new_seed() if body.seed is None else body.seed,
    )


def _side(side: int | None) -> schemas.Side:
    return "reference" if side is None else side


def _winner(comp: Comparison, winner: int | None) -> schemas.Side | None:
    if winner is None:
        return None
    return comp.a if winner == 1 else _side(comp.b)


def comparison_result(j: Judged) -> schemas.ComparisonResult:
    comp, answer = j.comparison, j.answer
    orders = [
        schemas.ComparisonOrder(first=_side(first), winner=_winner(comp, w), scores=sc)
        for first, w, sc in zip(j.firsts, answer.order_winners, answer.order_scores, strict=True)
    ]
    return schemas.ComparisonResult(
        pair=(comp.a, _side(comp.b)),
        scores=answer.scores,
        winner=_winner(comp, answer.winner),
        outcome=answer.outcome,
        consistent=answer.consistent,
        orders=orders,
        seed=comp.seed,
        usage=schemas.usage_of(*(x.usage for x in j.judgments)),
    )


def rewards_response(call: Call, result: GroupResult) -> schemas.RewardsResponse:
    spec = result.spec
    return schemas.RewardsResponse(
        rewards=[r.reward for r in result.rewards],
        strategy=spec.strategy,
        debias=spec.debias,
        mode=spec.mode,
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
            )
            for r in result.rewards
        ],
        comparisons=[comparison_result(j) for j in result.judged],
        judgments=sum(len(j.judgments) for j in result.judged),
        usage=schemas.usage_of(result.usage),
        latency_ms=call.latency_ms,
        model=call.judge.engine.model_name,
        template_version=call.judge.template.version,
        request_id=call.request_id,
        seed=spec.seed,
    )


def group_outcomes(result: GroupResult) -> list[tuple[str, str]]:
    return [(result.spec.mode, j.answer.outcome) for j in result.judged]


def group_tokens(results: Sequence[GroupResult]) -> int:
    return sum(r.usage.generated_tokens for r in results)


# --- OpenRLHF --------------------------------------------------------------------------------


def openrlhf_specs(
    body: schemas.OpenRLHFRequest, options: schemas.OpenRLHFOptions, settings: Settings
) -> list[GroupSpec]:
    """One reference-strategy group of one completion per sample: the response is the query
    after its prompt, judged against the label."""
    check_count("samples", len(body.query), settings.max_batch_items, "REFLECTRM_MAX_BATCH_ITEMS")
    specs = []
    for k, (query, prompt, label) in enumerate(
        zip(body.query, body.prompts, body.labels, strict=True)
    ):
        if not query.startswith(prompt):
            raise HTTPException(
                422,
                detail=f"sample {k}: `query` does not start with its `prompts` entry, so the "
                "response cannot be told apart; send query = prompt + response",
            )
        if not prompt.strip():
            raise HTTPException(422, detail=f"sample {k}: the prompt is empty")
        if label is None or not label.strip():
            raise HTTPException(
                422,
                detail=f"sample {k}: no label; each sample is judged against its label as the "
                "reference answer (OpenRLHF: --data.label_key naming a reference-answer field)",
            )
        specs.append(
            GroupSpec(
                conversation=(types.Message("user", prompt),),
                completions=(query[len(prompt) :],),
                reference=label,
                strategy="reference",
                pivot=None,
                mode=options.mode,
                debias=options.debias,
                num_candidates=options.num_candidates or settings.num_candidates,
                max_tokens=max_tokens_of(options.max_tokens, settings),
                seed=new_seed() if options.seed is None else options.seed,
            )
        )
    return specs


def openrlhf_response(results: Sequence[GroupResult]) -> schemas.OpenRLHFResponse:
    rewards: list[float] = []
    logs: dict[str, list[float]] = {
        "judge_reward_first_order": [],
        "judge_reward_second_order": [],
        "judge_consistent": [],
        "judge_no_verdict": [],
        "judge_generated_tokens": [],
    }
    for result in results:
        reward = result.rewards[0].reward
        number = NO_VERDICT_REWARD if reward is None else reward
        rewards.append(number)
        orders = result.judged[0].answer.order_scores if result.judged else ()
        # One order (debias none) or none (an empty response): the reward stands for the rest.
        per_order = [s[0] for s in orders] + [number] * (2 - len(orders))
        logs["judge_reward_first_order"].append(per_order[0])
        logs["judge_reward_second_order"].append(per_order[1])
        consistent = result.judged[0].answer.consistent if result.judged else None
        logs["judge_consistent"].append(1.0 if consistent else 0.0)
        logs["judge_no_verdict"].append(1.0 if reward is None else 0.0)
        logs["judge_generated_tokens"].append(float(result.usage.generated_tokens))
    return schemas.OpenRLHFResponse(rewards=rewards, scores=rewards, extra_logs=logs)
