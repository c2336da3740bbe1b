"""What the routes reach through dependencies: the judging service, and one call's context."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Request

from reflectrm.api.access import log_fields, request_id_of
from reflectrm.api.auth import TENANT_KEY
from reflectrm.serving.admission import DEFAULT_TENANT
from reflectrm.serving.context import CallContext
from reflectrm.serving.errors import InvalidRequestError
from reflectrm.serving.service import JudgingService


def get_service(request: Request) -> JudgingService:
    service: JudgingService = request.app.state.reflectrm
    return service


ServiceDep = Annotated[JudgingService, Depends(get_service)]


TENANT_HEADER = "x-reflectrm-tenant"
_TENANT = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def tenant_of(request: Request) -> str:
    """Whose call it is: the API key's tenant when keys are on; else the tenant (a job, a team)
    the X-Reflectrm-Tenant header names, 1 to 64 letters, digits and ``._:-``; else "default"."""
    state = request.scope.get("state") or {}
    keyed = state.get(TENANT_KEY)
    if isinstance(keyed, str):
        return keyed
    named = request.headers.get(TENANT_HEADER)
    if named is None:
        return DEFAULT_TENANT
    if not _TENANT.fullmatch(named):
        raise InvalidRequestError(
            "the X-Reflectrm-Tenant header must be 1 to 64 letters, digits or ._:- "
            f"(got {len(named)} characters)"
        )
    return named


def get_call(request: Request, service: ServiceDep) -> CallContext:
    """A judging call's context. Without an engine the call is refused here (503 with
    Retry-After), before the service is asked anything."""
    service.require_judge()
    return CallContext(
        request_id=request_id_of(request),
        tenant=tenant_of(request),
        is_disconnected=request.is_disconnected,
        log=log_fields(request),
    )


CallDep = Annotated[CallContext, Depends(get_call)]
