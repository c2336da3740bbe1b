"""What the routes reach through dependencies: the judging service, and one call's context."""

from __future__ import annotations

import re
from typing import Annotated

from fastapi import Depends, Request

from reflectrm.api.access import log_fields, request_id_of
from reflectrm.api.auth import TENANT_KEY, basic_credentials
from reflectrm.serving.admission import DEFAULT_TENANT, JOB_SEPARATOR
from reflectrm.serving.context import CallContext
from reflectrm.serving.errors import InvalidRequestError
from reflectrm.serving.service import JudgingService


def get_service(request: Request) -> JudgingService:
    service: JudgingService = request.app.state.reflectrm
    return service


ServiceDep = Annotated[JudgingService, Depends(get_service)]


TENANT_HEADER = "x-reflectrm-tenant"
TENANT_QUERY = "tenant"
_TENANT = re.compile(r"[A-Za-z0-9._:-]{1,64}")


def tenant_of(request: Request) -> str:
    """Whose call it is. The job the caller names, 1 to 64 letters, digits and ``._:-``: the
    user name of HTTP Basic auth (a URL ``http://job-a:KEY@host/...``; for clients that send no
    headers of their own), else the X-Reflectrm-Tenant header, else the ``tenant`` query
    parameter. With API keys on, the tenant is the key's (``key-`` and 12 hex digits) and a
    named job is a tenant within the key's share, ``key-.../job-a`` (its jobs split the key's
    fair share; the key's weight and bounds count them all); with keys off, the job is the
    tenant; unnamed, "default"."""
    state = request.scope.get("state") or {}
    keyed = state.get(TENANT_KEY)
    job = _named_job(request)
    if isinstance(keyed, str):
        return keyed if job is None else f"{keyed}{JOB_SEPARATOR}{job}"
    return DEFAULT_TENANT if job is None else job


def _named_job(request: Request) -> str | None:
    basic = basic_credentials(request.scope)
    for where, named in (
        ("the user name of HTTP Basic auth", basic[0] if basic and basic[0] else None),
        ("the X-Reflectrm-Tenant header", request.headers.get(TENANT_HEADER)),
        ("the tenant query parameter", request.query_params.get(TENANT_QUERY)),
    ):
        if named is None:
            continue
        if not _TENANT.fullmatch(named):
            raise InvalidRequestError(
                f"{where} names the tenant (the job): it must be 1 to 64 letters, digits or "
                f"._:- (got {len(named)} characters)"
            )
        return named
    return None


def get_call(request: Request, service: ServiceDep) -> CallContext:
    """A judging call's context. Without an engine the call is refused here (503 with
    Retry-After), before the service is asked anything."""
    service.require_judge()
    tenant = tenant_of(request)
    log = log_fields(request)
    log["tenant"] = tenant  # a key's tenant is a digest's prefix, never the key
    return CallContext(
        request_id=request_id_of(request),
        tenant=tenant,
        is_disconnected=request.is_disconnected,
        log=log,
    )


CallDep = Annotated[CallContext, Depends(get_call)]
