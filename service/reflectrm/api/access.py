"""Request ids and the access log: one structured line per request.

Every HTTP request gets an id: the client's ``X-Request-ID`` when it is a plausible id (1 to 128
letters, digits and ``._:-``), a fresh one otherwise. It is echoed in the ``X-Request-ID``
response header, reported in judgment responses, and written in the request's log line, a JSON
object on the ``reflectrm.access`` logger::

    {"request_id": "...", "method": "POST", "route": "/v1/judge", "status": 200,
     "latency_ms": 812.4, "mode": "reflect", "outcome": "verdict", "prompt_tokens": 2235,
     "generated_tokens": 630}

The judging service adds its own fields (mode, outcome, tokens) to ``log_fields``. Bodies,
headers and keys are never logged.
"""

from __future__ import annotations

import json
import logging
import re
import time
import uuid
from typing import Any

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

log = logging.getLogger("reflectrm.access")

HEADER = b"x-request-id"
_VALID_ID = re.compile(r"[A-Za-z0-9._:-]{1,128}")
_ID_KEY = "reflectrm_request_id"
_FIELDS_KEY = "reflectrm_log_fields"


def new_request_id() -> str:
    return uuid.uuid4().hex


def request_id_of(request: Request) -> str:
    """The request's id, as the access middleware assigned it (a fresh one without it)."""
    state = request.scope.get("state") or {}
    rid = state.get(_ID_KEY)
    return rid if isinstance(rid, str) else new_request_id()


def log_fields(request: Request) -> dict[str, Any]:
    """The fields of the request's log line, for the route's work to add to (mode, outcome,
    tokens); a dict of its own when the access middleware is not in front."""
    state = request.scope.get("state")
    fields = state.get(_FIELDS_KEY) if isinstance(state, dict) else None
    return fields if isinstance(fields, dict) else {}


def _client_id(scope: Scope) -> str | None:
    for name, value in scope.get("headers", ()):
        if name == HEADER:
            text = value.decode("latin-1")
            return text if _VALID_ID.fullmatch(text) else None
    return None


def _route_of(scope: Scope) -> str:
    route = scope.get("route")
    path = getattr(route, "path", None)
    if isinstance(path, str):
        return path
    raw = str(scope.get("path", ""))
    return raw if len(raw) <= 100 else raw[:100] + "..."


class AccessLog:
    """ASGI middleware: assigns the request id, echoes it, and logs one line when the request
    ends (also when it ends in an exception or the client went away)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = _client_id(scope) or new_request_id()
        state = scope.setdefault("state", {})
        fields: dict[str, Any] = {}
        state[_ID_KEY] = rid
        state[_FIELDS_KEY] = fields
        started = time.monotonic()
        status: int | None = None

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
                headers = [(k, v) for k, v in message.get("headers", ()) if k.lower() != HEADER]
                message = {**message, "headers": [*headers, (HEADER, rid.encode())]}
            await send(message)

        try:
            await self.app(scope, receive, send_with_id)
        except BaseException:
            if status is None:
                status = 500
            raise
        finally:
            line = {
                "request_id": rid,
                "method": scope.get("method"),
                "route": _route_of(scope),
                "status": status if status is not None else 499,
                "latency_ms": round((time.monotonic() - started) * 1000, 1),
                **fields,
            }
            log.info(json.dumps(line, default=str))
