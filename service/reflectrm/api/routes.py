"""HTTP routes: thin; validation is in schemas, the method in judging."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from reflectrm.aio import gather_all
from reflectrm.api import schemas, work
from reflectrm.api.body import StrictJSONRoute
from reflectrm.api.call import CallDep
from reflectrm.api.state import StateDep
from reflectrm.engines.base import EngineError
from reflectrm.judging import types
from reflectrm.metrics import CONTENT_TYPE

# JSON bodies are read strictly (UTF-8, each key once, no NaN); see api/body.py.
router = APIRouter(route_class=StrictJSONRoute)

ERRORS: dict[int | str, dict[str, object]] = {
    413: {
        "model": schemas.ErrorResponse,
        "description": "Conversation too long for the model, or body over REFLECTRM_MAX_BODY_BYTES",
    },
    422: {"description": "Malformed JSON or fields; the body says which and why"},
    429: {
        "model": schemas.ErrorResponse,
        "description": "No judgment slot within the admission queue's bounds; see Retry-After",
    },
    503: {"model": schemas.ErrorResponse, "description": "Engine loading or stopped"},
    504: {"model": schemas.ErrorResponse, "description": "The judgment exceeded its deadline"},
}


@router.get("/health", summary="The process is alive")
async def health() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/ready", summary="The engine is loaded and answering", responses={503: ERRORS[503]})
async def ready(state: StateDep) -> JSONResponse:
    if state.judge is None:
        return JSONResponse({"detail": state.unavailable}, status_code=503)
    try:
        await state.judge.engine.check_health()
    except EngineError as exc:
        return JSONResponse({"detail": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready", "model": state.judge.engine.model_name})


@router.get(
    "/metrics",
    summary="Prometheus metrics: the judge's and the vLLM engine's",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(state: StateDep) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


@router.post(
    "/v1/judge",
    response_model=schemas.JudgeResponse,
    response_model_exclude_none=False,
    responses=ERRORS,
    summary="Judge which of two responses is better",
)
async def judge_pair(body: schemas.JudgeRequest, call: CallDep) -> schemas.JudgeResponse:
    with call.observed(body.mode) as record:
        request = work.to_request(body, call.settings)
        judgment, swap = await call.run(work.judge_orders(call, request, body.two_orders))
        response = work.pair_response(call, body, judgment, swap, call.request_id)
        record(judgment, swap, response.outcome)
    if swap is None and request.ablation == "none":  # an ablation is not served traffic
        call.state.swap_checks.offer(call.judge, request, judgment, call.request_id)
    return response


# The short path serves the same contract.
router.add_api_route(
    "/judge",
    judge_pair,
    methods=["POST"],
    response_model=schemas.JudgeResponse,
    responses=ERRORS,
    summary="Judge which of two responses is better (alias of /v1/judge)",
)


@router.post(
    "/v1/judge/batch",
    response_model=schemas.BatchResponse,
    responses=ERRORS,
    summary="Judge many pairs in one call; each item answered or given its own error",
)
async def judge_batch(body: schemas.BatchRequest, call: CallDep) -> schemas.BatchResponse:
    defaults = body.defaults
    with call.observed(defaults.mode if defaults and defaults.mode else "reflect") as record:
        work.check_count(
            "items", len(body.items), call.settings.max_batch_items, "REFLECTRM_MAX_BATCH_ITEMS"
        )
        items = [work.judge_item(call, i, raw, defaults) for i, raw in enumerate(body.items)]
        done = await call.run(gather_all(items))
        judged = [d for d in done if d.item.result is not None]
        tokens = sum(j.usage.generated_tokens for d in done for j in d.judgments)
        record.many("batch", [(d.mode, work.item_outcome(d)) for d in done], tokens)
    return schemas.BatchResponse(
        results=[d.item for d in done],
        judged=len(judged),
        failed=len(done) - len(judged),
        usage=schemas.usage_of(types.Usage(), *(j.usage for d in done for j in d.judgments)),
        latency_ms=call.latency_ms,
        model=call.judge.engine.model_name,
        template_version=call.judge.template.version,
        request_id=call.request_id,
    )


@router.post(
    "/v1/rewards",
    response_model=schemas.RewardsResponse,
    responses=ERRORS,
    summary="One reward per completion of a group (reference, pivot or round-robin judging)",
)
async def rewards(body: schemas.RewardsRequest, call: CallDep) -> schemas.RewardsResponse:
    with call.observed(body.mode) as record:
        spec = work.group_spec(body, call.settings)
        result = await call.run(work.judge_group(call, spec))
        record.many(spec.strategy, work.group_outcomes(result), work.group_tokens([result]))
    return work.rewards_response(call, result)


@router.post(
    "/get_reward",
    response_model=schemas.OpenRLHFResponse,
    responses=ERRORS,
    summary="OpenRLHF remote reward model (--reward.remote_url): each sample against its label",
)
async def get_reward(
    body: schemas.OpenRLHFRequest,
    options: Annotated[schemas.OpenRLHFOptions, Query()],
    call: CallDep,
) -> schemas.OpenRLHFResponse:
    with call.observed(options.mode) as record:
        specs = work.openrlhf_specs(body, options, call.settings)
        groups = [work.judge_group(call, spec, f"-q{k}") for k, spec in enumerate(specs)]
        results = await call.run(gather_all(groups))
        outcomes = [o for r in results for o in work.group_outcomes(r)]
        record.many("get_reward", outcomes, work.group_tokens(results))
    return work.openrlhf_response(results)
