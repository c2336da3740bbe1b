"""HTTP routes, thin: each converts its body, calls the judging service, and converts back.
Validation of the body is in schemas, defaults and limits in the service, the method in judging."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import JSONResponse, PlainTextResponse, Response

from reflectrm.api import convert, schemas
from reflectrm.api.body import StrictJSONRoute
from reflectrm.api.dependencies import CallDep, ServiceDep
from reflectrm.api.peers import PeersDep
from reflectrm.engines.base import EngineError
from reflectrm.metrics import CONTENT_TYPE
from reflectrm.serving.errors import UnavailableError
from reflectrm.serving.service import cohort_name, member_asks

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
async def ready(service: ServiceDep) -> JSONResponse:
    try:
        model = await service.check_ready()
    except (UnavailableError, EngineError) as exc:
        return JSONResponse({"detail": str(exc)}, status_code=503)
    return JSONResponse({"status": "ready", "model": model})


@router.get(
    "/metrics",
    summary="Prometheus metrics: the judge's and the vLLM engine's",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {"schema": {"type": "string"}}}}},
)
async def metrics(service: ServiceDep) -> Response:
    return Response(service.metrics.render(), media_type=CONTENT_TYPE)


@router.post(
    "/v1/judge",
    response_model=schemas.JudgeResponse,
    response_model_exclude_none=False,
    responses=ERRORS,
    summary="Judge which of two responses is better",
)
async def judge_pair(
    body: schemas.JudgeRequest, service: ServiceDep, call: CallDep
) -> schemas.JudgeResponse:
    result = await service.judge_pair(convert.pair_ask(body, service.pair_defaults), call)
    return convert.judge_response(result)


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
async def judge_batch(
    body: schemas.BatchRequest, service: ServiceDep, call: CallDep
) -> schemas.BatchResponse:
    served = service.pair_defaults
    items = convert.batch_items(body, served)
    result = await service.judge_batch(items, convert.batch_mode(body, served), call)
    return convert.batch_response(result)


@router.post(
    "/v1/rewards",
    response_model=schemas.RewardsResponse,
    responses=ERRORS,
    summary="One reward per completion of a group (reference, pivot, round_robin, knockout, "
    "circular or swiss judging)",
)
async def rewards(
    body: schemas.RewardsRequest, service: ServiceDep, call: CallDep
) -> schemas.RewardsResponse:
    result = await service.group_rewards(convert.group_ask(body), call)
    return convert.rewards_response(result)


@router.post(
    "/v1/rewards/sample",
    response_model=schemas.SampleRewardResponse,
    responses=ERRORS,
    summary="One completion of a group sent alone: answered with its group reward once the "
    "group's other completions have arrived in their own calls (a cohort)",
)
async def sample_reward(
    body: schemas.SampleRewardRequest,
    service: ServiceDep,
    call: CallDep,
    request: Request,
    peers: PeersDep,
) -> schemas.SampleRewardResponse | Response:
    ask = convert.member_ask(body)
    if peers is None:
        return convert.sample_reward_response(await service.member_reward(ask, call))
    # With peers: the cohort's owner judges it (this call forwarded there), or this replica
    # does, and the reply says whether the cohort was split between replicas.
    names = [cohort_name(call.tenant, ask)]
    timeout_s = service.cohort_timeout_s(ask)
    routed = await peers.route(request, names, timeout_s, call.seconds, call.is_disconnected)
    if isinstance(routed, Response):
        call.note(peer_forwarded=True)
        return routed
    call.note(cohort_split=routed.split)
    response = convert.sample_reward_response(await service.member_reward(ask, call))
    return JSONResponse(response.model_dump(mode="json") | {"cohort_split": routed.split})


@router.post(
    "/get_reward",
    response_model=schemas.OpenRLHFResponse,
    responses=ERRORS,
    summary="OpenRLHF remote reward model (--reward.remote_url): each sample against its label, "
    "or with ?group_size=N a group reward among its prompt's N samples",
)
async def get_reward(
    body: schemas.OpenRLHFRequest,
    options: Annotated[schemas.OpenRLHFOptions, Query()],
    service: ServiceDep,
    call: CallDep,
    request: Request,
    peers: PeersDep,
) -> schemas.OpenRLHFResponse | Response:
    samples, opts = convert.sample_asks(body), convert.sample_options(options)
    if opts.group_size is None:
        return convert.openrlhf_response(await service.sample_rewards(samples, opts, call))
    if peers is None:
        return convert.openrlhf_cohort_response(await service.member_rewards(samples, opts, call))
    # With peers: as /v1/rewards/sample; every sample's extra_logs say judge_cohort_split.
    asks = member_asks(samples, opts)
    names = [cohort_name(call.tenant, ask) for ask in asks]
    timeout_s = service.cohort_timeout_s(asks[0])
    routed = await peers.route(request, names, timeout_s, call.seconds, call.is_disconnected)
    if isinstance(routed, Response):
        call.note(peer_forwarded=True)
        return routed
    call.note(cohort_split=routed.split)
    response = convert.openrlhf_cohort_response(await service.member_rewards(samples, opts, call))
    response.extra_logs["judge_cohort_split"] = [float(routed.split)] * len(response.rewards)
    return response
