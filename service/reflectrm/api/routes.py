"""HTTP routes: thin; validation is in schemas, the method in judging."""

from __future__ import annotations

import secrets

from fastapi import APIRouter, HTTPException
from fastapi.responses import JSONResponse, Response

from reflectrm.aio import gather_all
from reflectrm.api import schemas
from reflectrm.api.call import Call, CallDep
from reflectrm.api.state import StateDep
from reflectrm.engines.base import EngineError
from reflectrm.judging import types
from reflectrm.judging.judge import swapped
from reflectrm.metrics import CONTENT_TYPE
from reflectrm.settings import Settings

router = APIRouter()

ERRORS: dict[int | str, dict[str, object]] = {
    413: {"model": schemas.ErrorResponse, "description": "Conversation too long for the model"},
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


@router.get("/metrics", summary="Prometheus metrics: the judge's and the vLLM engine's")
async def metrics(state: StateDep) -> Response:
    return Response(state.metrics.render(), media_type=CONTENT_TYPE)


def to_request(body: schemas.JudgeRequest, settings: Settings) -> types.JudgeRequest:
    """Apply the server's defaults and check limits that depend on settings."""
    if body.ablation != "none" and not settings.allow_ablations:
        raise HTTPException(
            422,
            detail=f"ablation {body.ablation!r} is for evaluation and this server does not "
            "allow it; start it with REFLECTRM_ALLOW_ABLATIONS=true",
        )
    max_tokens = body.max_tokens or settings.max_tokens
    if max_tokens > settings.max_tokens_limit:
        raise HTTPException(
            422,
            detail=f"max_tokens is {max_tokens}; this server allows at most "
            f"{settings.max_tokens_limit} (REFLECTRM_MAX_TOKENS_LIMIT)",
        )
    if body.messages is not None:
        conversation = tuple(types.Message(m.role, m.content) for m in body.messages)
    else:
        assert body.prompt is not None  # the schema requires one of the two
        conversation = (types.Message("user", body.prompt),)
    return types.JudgeRequest(
        conversation=conversation,
        responses=(body.responses[0], body.responses[1]),
        mode=body.mode,
        num_candidates=body.num_candidates or settings.num_candidates,
        seed=secrets.randbelow(2**31) if body.seed is None else body.seed,
        max_tokens=max_tokens,
        ablation=body.ablation,
    )


async def judge_orders(
    call: Call, request: types.JudgeRequest, check_swap: bool
) -> tuple[types.Judgment, types.Judgment | None]:
    """The judgment, and with ``check_swap`` the swapped-order one beside it (concurrently)."""
    if not check_swap:
        return await call.judgment(request), None
    first, second = await gather_all(
        [call.judgment(request), call.judgment(swapped(request), "-swap")]
    )
    return first, second


@router.post(
    "/v1/judge",
    response_model=schemas.JudgeResponse,
    response_model_exclude_none=False,
    responses=ERRORS,
    summary="Judge which of two responses is better",
)
async def judge_pair(body: schemas.JudgeRequest, call: CallDep) -> schemas.JudgeResponse:
    with call.observed(body.mode) as record:
        request = to_request(body, call.settings)
        judgment, swap = await call.run(judge_orders(call, request, body.check_swap))
        record(judgment, swap)
    if swap is None and request.ablation == "none":  # an ablation is not served traffic
        call.state.swap_checks.offer(call.judge, request, judgment, call.request_id)
    return schemas.judge_response(
        judgment,
        swap,
        request_id=call.request_id,
        latency_ms=call.latency_ms,
        model=call.judge.engine.model_name,
        template_version=call.judge.template.version,
        with_trace=body.return_trace,
    )


# The short path serves the same contract.
router.add_api_route(
    "/judge",
    judge_pair,
    methods=["POST"],
    response_model=schemas.JudgeResponse,
    responses=ERRORS,
    summary="Judge which of two responses is better (alias of /v1/judge)",
)
