"""How failures become HTTP responses: one table from the service's exceptions to statuses, used
by the exception handlers and for a batch's failed items."""

from __future__ import annotations

import asyncio
import math
from typing import Any

from fastapi import FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse

from reflectrm.api.body import quote
from reflectrm.engines.base import EngineError
from reflectrm.judging.judge import PromptTooLongError
from reflectrm.serving.errors import (
    DEFAULT_RETRY_AFTER_S,
    ClientGoneError,
    ClosedError,
    DeadlineExceededError,
    InvalidRequestError,
    OverloadedError,
    UnavailableError,
)

# Status 499 (client closed request) is nginx's; nobody reads it, but the logs and metrics do.
CLIENT_CLOSED = 499

STATUS: dict[type[Exception], int] = {
    InvalidRequestError: 422,
    PromptTooLongError: 413,
    OverloadedError: 429,
    ClientGoneError: CLIENT_CLOSED,
    EngineError: 503,
    UnavailableError: 503,
    ClosedError: 503,
    DeadlineExceededError: 504,
}


def status_of(exc: BaseException) -> int:
    """The status a failure is answered with (500 for anything unexpected)."""
    if isinstance(exc, HTTPException):
        return exc.status_code
    if isinstance(exc, asyncio.CancelledError):
        return CLIENT_CLOSED  # the server cancels a request's task when its client goes away
    for cls, status in STATUS.items():
        if isinstance(exc, cls):
            return status
    return 500


def _headers(exc: Exception, status: int) -> dict[str, str] | None:
    if isinstance(exc, OverloadedError):
        return {"Retry-After": str(exc.retry_after_s)}
    if status == 503:
        return {"Retry-After": str(DEFAULT_RETRY_AFTER_S)}
    return None


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    detail = str(exc) or ("client disconnected" if status == CLIENT_CLOSED else type(exc).__name__)
    return JSONResponse({"detail": detail}, status_code=status, headers=_headers(exc, status))


# --- 422: what is wrong with the request, never the request itself --------------------------


def _ctx_value(value: Any) -> Any:
    if isinstance(value, bool | int) or (isinstance(value, float) and math.isfinite(value)):
        return value
    return quote(str(value), 200)


def _is_json(request: Request) -> bool:
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    return kind == "application/json" or kind.endswith("+json")


def _described(error: dict[str, Any], request: Request) -> dict[str, Any]:
    """One validation error: where (loc), what (type), and what to fix (msg, with the limit in
    ctx). The offending input is quoted only when it is a short scalar, and cut to 60
    characters: it can be megabytes, or not encodable at all (NaN, a lone surrogate)."""
    loc = [part if isinstance(part, int) else quote(str(part)) for part in error.get("loc", ())]
    kind = str(error.get("type", "invalid"))
    msg = quote(str(error.get("msg", "")), 500)
    ctx = {str(k): _ctx_value(v) for k, v in (error.get("ctx") or {}).items()}
    if kind == "json_invalid":
        at = loc[1] if len(loc) > 1 and isinstance(loc[1], int) and loc[1] > 0 else None
        reason = str(ctx.get("error", msg)).removesuffix(" at")  # Python's "... at" + position
        msg = f"the body is not valid JSON: {reason}"
        msg += f" (at character {at})" if at is not None else ""
    elif loc == ["body"] and kind == "missing":
        msg = "the request has no body; send a JSON object (the schema is at /docs)"
    elif kind == "string_unicode":
        msg += " (a lone surrogate escape such as \\ud800 is not text)"
    elif loc == ["body"] and kind == "model_attributes_type" and not _is_json(request):
        got = quote(request.headers.get("content-type", "none"))
        msg = f"send the body as a JSON object with Content-Type: application/json (got {got})"
    described: dict[str, Any] = {"type": kind, "loc": loc, "msg": msg}
    if ctx:
        described["ctx"] = ctx
    value = error.get("input")
    if isinstance(value, str) and kind != "string_unicode":
        described["input"] = quote(value)  # at most 60 characters of it
    elif value is None or (isinstance(value, bool | int) and len(str(value)) <= 60):
        described["input"] = value
    return described


async def _handle_invalid(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = [_described(e, request) for e in exc.errors()]
    return JSONResponse({"detail": errors}, status_code=422)


def install(app: FastAPI) -> None:
    for cls in STATUS:
        app.add_exception_handler(cls, _handle)
    app.add_exception_handler(RequestValidationError, _handle_invalid)
