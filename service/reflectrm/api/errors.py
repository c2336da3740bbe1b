"""How failures become HTTP responses: one table, used by the exception handlers and the metrics."""

from __future__ import annotations

import asyncio

from fastapi import FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from reflectrm.api.admission import (
    DEFAULT_RETRY_AFTER_S,
    ClientGone,
    DeadlineExceeded,
    Overloaded,
)
from reflectrm.engines.base import EngineError
from reflectrm.judging.judge import PromptTooLongError

# Status 499 (client closed request) is nginx's; nobody reads it, but the logs and metrics do.
CLIENT_CLOSED = 499

STATUS: dict[type[Exception], int] = {
    PromptTooLongError: 413,
    Overloaded: 429,
    ClientGone: CLIENT_CLOSED,
    EngineError: 503,
    DeadlineExceeded: 504,
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
    if isinstance(exc, Overloaded):
        return {"Retry-After": str(exc.retry_after_s)}
    if status == 503:
        return {"Retry-After": str(DEFAULT_RETRY_AFTER_S)}
    return None


async def _handle(request: Request, exc: Exception) -> JSONResponse:
    status = status_of(exc)
    detail = str(exc) or ("client disconnected" if status == CLIENT_CLOSED else type(exc).__name__)
    return JSONResponse({"detail": detail}, status_code=status, headers=_headers(exc, status))


def install(app: FastAPI) -> None:
    for cls in STATUS:
        app.add_exception_handler(cls, _handle)
