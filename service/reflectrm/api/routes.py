"""HTTP routes: thin; validation is in schemas, the method in judging."""

from __future__ import annotations

import asyncio
import logging
import secrets
import time
import uuid
from collections.abc import Coroutine
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import JSONResponse, Response

from reflectrm.api import schemas
from reflectrm.api.observe import observed
from reflectrm.api.state import JudgeDep, StateDep
from reflectrm.engines.base import EngineError
from reflectrm.judging import types
from reflectrm.judging.judge import (
    Interrupted,
    Judge,
    PromptTooLongError,
    consistent,
    gather_all,
    run_until,
    swapped,
    unswap_winner,
)
from reflectrm.metrics import CONTENT_TYPE
from reflectrm.settings import Settings

log = logging.getLogger(__name__)
router = APIRouter()
T = TypeVar("T")

ERRORS: dict[int | str, dict[str, object]] = {
    413: {"model": schemas.ErrorResponse, "description": "Conversation too long for the model"},
    422: {"description": "Malformed JSON or fields; the body says which and why"},
    429: {"model": schemas.ErrorResponse, "description": "Too many judgments in flight"},
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
    )


async def _until_disconnected(request: Request, work: Coroutine[Any, Any, T]) -> T:
    """Run ``work``; if the client goes away first, cancel it (which aborts its engine requests)."""
    try:
        return await run_until(work, request.is_disconnected, poll_s=1.0)
    except Interrupted:
        log.info("client disconnected; aborting its judgment")
        raise HTTPException(499, detail="client disconnected") from None


async def _judge(judge: Judge, request: types.JudgeRequest, request_id: str, check_swap: bool):
    if not check_swap:
        return await judge.judge(request, request_id), None
    first, second = await gather_all(
        [judge.judge(request, request_id), judge.judge(swapped(request), f"{request_id}-swap")]
    )
    return first, second


@router.post(
    "/v1/judge",
    response_model=schemas.JudgeResponse,
    response_model_exclude_none=False,
    responses=ERRORS,
    summary="Judge which of two responses is better",
)
@observed
async def judge_pair(
    body: schemas.JudgeRequest, request: Request, state: StateDep, judge: JudgeDep
) -> schemas.JudgeResponse:
    settings = state.settings
    started = time.monotonic()
    request_id = request.headers.get("x-request-id") or uuid.uuid4().hex
    internal = to_request(body, settings)
    if state.in_flight >= settings.max_concurrent_judgments:
        raise HTTPException(
            429,
            detail=f"{state.in_flight} judgments in flight, the limit "
            "(REFLECTRM_MAX_CONCURRENT_JUDGMENTS); retry later",
            headers={"Retry-After": "5"},
        )
    state.in_flight += 1
    try:
        async with asyncio.timeout(settings.request_timeout_s):
            judgment, swap = await _until_disconnected(
                request, _judge(judge, internal, request_id, body.check_swap)
            )
    except PromptTooLongError as exc:
        raise HTTPException(413, detail=str(exc)) from None
    except EngineError as exc:
        raise HTTPException(503, detail=str(exc)) from None
    except TimeoutError:
        raise HTTPException(
            504,
            detail=f"the judgment did not finish within {settings.request_timeout_s:g} s "
            "(REFLECTRM_REQUEST_TIMEOUT_S); its engine requests were aborted",
        ) from None
    finally:
        state.in_flight -= 1
    latency_ms = (time.monotonic() - started) * 1000
    log.info(
        "judged %s mode=%s winner=%s outcome=%s early_exit=%s tokens=%d in %.0f ms",
        request_id,
        judgment.mode,
        judgment.winner,
        judgment.outcome,
        judgment.early_exit,
        judgment.usage.generated_tokens,
        latency_ms,
    )
    usage = judgment.usage + swap.usage if swap else judgment.usage
    failures = judgment.stage1_parse_failures + judgment.reflection_parse_failures
    if swap:
        failures += swap.stage1_parse_failures + swap.reflection_parse_failures
    winner = judgment.winner
    if not body.check_swap:
        state.swap_checks.offer(judge, internal, judgment, request_id)
    return schemas.JudgeResponse(
        winner=winner,
        scores=judgment.scores,
        outcome=judgment.outcome,
        mode=judgment.mode,
        analysis=judgment.analysis,
        votes=judgment.votes,
        early_exit=judgment.early_exit,
        consistent=consistent(judgment, swap) if swap else None,
        swapped_winner=unswap_winner(swap.winner) if swap else None,
        parse_failures=failures,
        usage=schemas.Usage(
            prompt_tokens=usage.prompt_tokens,
            generated_tokens=usage.generated_tokens,
            engine_requests=usage.engine_requests,
            cached_prompt_tokens=usage.cached_prompt_tokens,
        ),
        latency_ms=round(latency_ms, 1),
        model=judge.engine.model_name,
        template_version=judge.template.version,
        request_id=request_id,
        seed=judgment.seed,
        trace=schemas.trace_of(judgment) if body.return_trace else None,
        swapped_trace=schemas.trace_of(swap) if (swap and body.return_trace) else None,
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
