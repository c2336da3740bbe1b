"""NeMo Gym's GenRM judge protocol: ``POST /v1/chat/completions`` and ``GET /v1/models``, so that
``GENRM_BASE_URL=http://host:8000/v1`` points NeMo-RL's ``genrm_compare`` pipeline at this
service. Thin like the other routes: the body becomes a pair ask, ``JudgingService.judge_pair``
judges it (the method, debiased in both orders by default), and the answer becomes the GenRM
verdict JSON that ``genrm_compare``'s ``parse_genrm_output`` reads (docs/nemo-gym.md).

From a pair's debiased vote shares (s1, s2), s1 + s2 = 1:
``score_i = 1 + 4 s_i`` (1..5) and ``ranking = 3.5 - 2.5 (s1 - s2)`` (1..6; 3.5 is a tie).
genrm_compare's reward for a completion is the mean of its scores over its comparisons, so it
is 1 + 4 x its mean vote share: an affine map of this service's own pairwise reward.
"""

from __future__ import annotations

import json
import time

from fastapi import APIRouter, HTTPException

from reflectrm.api import convert
from reflectrm.api.body import StrictJSONRoute
from reflectrm.api.dependencies import CallDep, ServiceDep
from reflectrm.api.nemo_gym_schemas import (
    ChatChoice,
    ChatMessageOut,
    ChatUsage,
    GenRMChatCompletion,
    GenRMChatRequest,
    GenRMOrder,
    ModelCard,
    ModelList,
    ReflectRMVerdict,
)
from reflectrm.api.routes import ERRORS
from reflectrm.judging.judge import PromptTooLongError
from reflectrm.serving.types import Options, PairAsk, PairResult

router = APIRouter(route_class=StrictJSONRoute, tags=["NeMo Gym GenRM"])

# Said instead of scores when no judge output had a verdict and the caller asked for
# ``no_verdict: unparseable``: no JSON object in it, so genrm_compare's parser fails and scores
# the pair with its configured defaults. The default (``failed``) answers nothing instead, which
# genrm_compare 0.7 takes for a failed judge call and masks (docs/nemo-gym.md).
NO_VERDICT_TEXT = (
    "No verdict: none of the judge's outputs, in any order, ended in a verdict, so there are "
    "no scores for this pair (reflectrm outcome no_verdict)."
)
NEUTRAL = {"score_1": 3.0, "score_2": 3.0, "ranking": 3.5}


def genrm_scores(shares: tuple[float, float]) -> dict[str, float]:
    """The GenRM verdict for vote shares (s1, s2): scores in 1..5, ranking in 1..6."""
    s1, s2 = shares
    return {"score_1": 1 + 4 * s1, "score_2": 1 + 4 * s2, "ranking": 3.5 - 2.5 * (s1 - s2)}


def pair_ask(body: GenRMChatRequest) -> PairAsk:
    conversation, responses = body.split()
    o = body.reflectrm
    options = Options(
        mode=o.mode,
        debias=o.debias,
        num_candidates=o.num_candidates,
        max_tokens=o.max_tokens,
        seed=body.seed,
    )
    return PairAsk(conversation=conversation, responses=responses, options=options)


def no_verdict_at_all(result: PairResult) -> bool:
    """No order ended in a verdict (a tie of two orders that disagree is a verdict: a tie)."""
    a = result.answer
    winners = [w for w, _ in a.orders] if a.orders else [a.winner]
    return all(w is None for w in winners)


def completion(body: GenRMChatRequest, result: PairResult) -> GenRMChatCompletion:
    a, e = result.answer, result.envelope
    silent = no_verdict_at_all(result)
    if not silent:
        content = json.dumps(genrm_scores(a.scores))
    elif body.reflectrm.no_verdict == "neutral":
        content = json.dumps(NEUTRAL)
    elif body.reflectrm.no_verdict == "unparseable":
        content = NO_VERDICT_TEXT
    else:
        content = ""
    usage = convert.usage_of(result.usage)
    return GenRMChatCompletion(
        id=f"chatcmpl-{e.request_id}",
        created=int(time.time()),
        model=e.model,
        choices=[ChatChoice(message=ChatMessageOut(content=content))],
        usage=ChatUsage(
            prompt_tokens=usage.prompt_tokens,
            completion_tokens=usage.generated_tokens,
            total_tokens=usage.prompt_tokens + usage.generated_tokens,
        ),
        reflectrm=ReflectRMVerdict(
            winner=a.winner,
            scores=a.scores,
            outcome=a.outcome,
            no_verdict=silent,
            mode=a.mode,
            scoring=a.scoring,
            debias=a.debias,
            consistent=a.consistent,
            orders=[
                GenRMOrder(first=first, winner=w, scores=sc)
                for first, (w, sc) in zip((1, 2), a.orders, strict=True)
            ]
            if a.orders
            else None,
            votes=a.votes,
            analysis=a.analysis,
            parse_failures=a.parse_failures,
            seed=a.seed,
            request_id=e.request_id,
            latency_ms=e.latency_ms,
            template_version=e.template_version,
            ignored=body.ignored(),
        ),
    )


@router.post(
    "/v1/chat/completions",
    response_model=GenRMChatCompletion,
    responses={
        **ERRORS,
        400: {"description": "The pair does not fit the model's context (as vLLM answers)"},
    },
    summary="NeMo Gym GenRM judge (GENRM_BASE_URL): OpenAI chat completion in the roles "
    "response_1 and response_2, answered with the GenRM scores JSON",
)
async def genrm_chat_completion(
    body: GenRMChatRequest, service: ServiceDep, call: CallDep
) -> GenRMChatCompletion:
    try:
        result = await service.judge_pair(pair_ask(body), call)
    except PromptTooLongError as exc:
        # vLLM's answer to a prompt over the context is a 400 naming it; NeMo Gym's model
        # server turns exactly that into an empty, length-cut completion (its parse fallback
        # then applies) instead of failing the rollout.
        raise HTTPException(400, detail=f"maximum context length exceeded: {exc}") from None
    return completion(body, result)


@router.get(
    "/v1/models",
    response_model=ModelList,
    responses={503: ERRORS[503]},
    summary="The judging model, as an OpenAI-compatible server lists it",
)
async def models(service: ServiceDep) -> ModelList:
    model = service.require_judge().engine.model_name
    return ModelList(data=[ModelCard(id=model, created=int(time.time()))])
