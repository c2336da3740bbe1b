"""What the routes reach through dependencies: the judging service, and one call's context."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Request

from reflectrm.api.access import log_fields, request_id_of
from reflectrm.serving.context import CallContext
from reflectrm.serving.service import JudgingService


def get_service(request: Request) -> JudgingService:
    service: JudgingService = request.app.state.reflectrm
    return service


ServiceDep = Annotated[JudgingService, Depends(get_service)]


def get_call(request: Request, service: ServiceDep) -> CallContext:
    """A judging call's context. Without an engine the call is refused here, before its body
    is read (503 with Retry-After)."""
    service.require_judge()
    return CallContext(
        request_id=request_id_of(request),
        is_disconnected=request.is_disconnected,
        log=log_fields(request),
    )


CallDep = Annotated[CallContext, Depends(get_call)]
