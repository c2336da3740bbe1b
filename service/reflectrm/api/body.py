"""The request body before the routes see it: a size bound enforced while it streams in, and
one strict reading of JSON.

``BodyLimit`` is plain ASGI middleware. A body announced larger than the bound (Content-Length)
is refused with 413 before a byte of it is read; a body without a length (chunked) is counted as
it arrives and refused as soon as it passes the bound, so no more than the bound is ever held.

A slow client is bounded too: the whole body must arrive within ``body_timeout_s`` of its first
read, or the request gets 408 (a client dripping its body a byte a second holds a connection and
everything behind it otherwise).

``StrictJSONRoute`` parses JSON bodies as RFC 8259 describes them for interchange: UTF-8 text,
each key once per object, numbers without NaN or Infinity, integers of sane length, bounded
nesting. Anything else is a 422 naming what is wrong, never a 400 without a reason or a 500.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute
from starlette.exceptions import HTTPException
from starlette.types import ASGIApp, Message, Receive, Scope, Send

# Longest integer literal accepted (Python's own bound on int/str conversion, which exists
# because longer ones cost quadratic time).
MAX_INT_DIGITS = 4300


class BodyTooLarge(HTTPException):
    """Raised while reading a body past the bound; an HTTPException so the routes' body parsing
    passes it through to the exception handlers as a 413."""

    def __init__(self, limit: int) -> None:
        super().__init__(413, detail=too_large_detail(limit), headers={"Connection": "close"})


class BodyTooSlow(HTTPException):
    """The body did not arrive within the bound."""

    def __init__(self, timeout_s: float) -> None:
        # The rest of the body is not read: the connection cannot carry another request.
        super().__init__(408, detail=too_slow_detail(timeout_s), headers={"Connection": "close"})


def too_slow_detail(timeout_s: float) -> str:
    return (
        f"the request body did not arrive within {timeout_s:g} s (REFLECTRM_BODY_TIMEOUT_S); "
        "send it at once"
    )


def too_large_detail(limit: int) -> str:
    return (
        f"the request body is larger than {limit:,} bytes, this server's bound "
        "(REFLECTRM_MAX_BODY_BYTES); send less text (the judged texts must fit the model's "
        "context anyway)"
    )


class BodyLimit:
    """ASGI middleware: request bodies over ``max_bytes`` get 413 without being read whole."""

    def __init__(self, app: ASGIApp, max_bytes: int, timeout_s: float = 30.0) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = _content_length(scope)
        if declared == -1:
            await _reply(send, 400, "the Content-Length header is not a non-negative integer")
            return
        if declared is not None and declared > self.max_bytes:
            await _reply(send, 413, too_large_detail(self.max_bytes))
            return

        body = _BoundedBody(receive, self.max_bytes, self.timeout_s)
        started = False

        async def watched(message: Message) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, body.receive, watched)
        except BodyTooLarge:
            if started:
                raise
            await _reply(send, 413, too_large_detail(self.max_bytes))
        except BodyTooSlow:
            if started:
                raise
            await _reply(send, 408, too_slow_detail(self.timeout_s))


class _BoundedBody:
    """The request's ``receive``, counting the body's bytes and timing its arrival."""

    def __init__(self, receive: Receive, max_bytes: int, timeout_s: float) -> None:
        self._receive = receive
        self.max_bytes = max_bytes
        self.timeout_s = timeout_s
        self.received = 0
        self.complete = False
        self._deadline: float | None = None

    async def receive(self) -> Message:
        if self.complete:  # the body is in: what follows is a wait for the disconnect
            return await self._receive()
        if self._deadline is None:
            self._deadline = time.monotonic() + self.timeout_s
        try:
            async with asyncio.timeout(max(0.0, self._deadline - time.monotonic())):
                message = await self._receive()
        except TimeoutError:
            raise BodyTooSlow(self.timeout_s) from None
        if message["type"] == "http.request":
            self.received += len(message.get("body", b""))
            if self.received > self.max_bytes:
                raise BodyTooLarge(self.max_bytes)
            self.complete = not message.get("more_body", False)
        return message


def _content_length(scope: Scope) -> int | None:
    """The declared body length; None when absent, -1 when malformed."""
    for name, value in scope.get("headers", ()):
        if name == b"content-length":
            try:
                length = int(value)
            except ValueError:
                return -1
            return length if length >= 0 else -1
    return None


async def _reply(send: Send, status: int, detail: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        # The rest of the body is not read: the connection cannot carry another request.
        (b"connection", b"close"),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


# --- strict JSON -------------------------------------------------------------------------------


def quote(text: str, limit: int = 60) -> str:
    """A piece of client input fit to quote back: short, and encodable whatever it holds (a lone
    surrogate becomes its escape)."""
    safe = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(safe) > limit:
        return f"{safe[:limit]}... ({len(safe):,} characters)"
    return safe


def _invalid(message: str) -> json.JSONDecodeError:
    # The routes turn a JSONDecodeError into a 422 (type json_invalid); an empty document keeps
    # the body out of the error.
    return json.JSONDecodeError(message, "", 0)


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    obj: dict[str, Any] = {}
    for key, value in pairs:
        if key in obj:
            raise _invalid(
                f"the key {quote(key)!r} appears twice in one object (send each field once)"
            )
        obj[key] = value
    return obj


def _no_constant(name: str) -> Any:
    raise _invalid(f"{name} is not a JSON number")


def _bounded_int(text: str) -> int:
    if len(text) > MAX_INT_DIGITS:
        raise _invalid(f"an integer of {len(text):,} digits (at most {MAX_INT_DIGITS} are read)")
    return int(text)


def parse_json(body: bytes) -> Any:
    """A JSON document, strictly: UTF-8, unique keys, no NaN/Infinity, bounded integers."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise _invalid(
            f"invalid UTF-8 (byte 0x{body[exc.start]:02x} at offset {exc.start}); JSON must "
            "be sent as UTF-8"
        ) from None
    try:
        return json.loads(
            text,
            object_pairs_hook=_unique_keys,
            parse_constant=_no_constant,
            parse_int=_bounded_int,
        )
    except RecursionError:
        raise _invalid("arrays or objects nested too deeply") from None


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = parse_json(await self.body())
        return self._json


class StrictJSONRoute(APIRoute):
    """A route whose JSON body is read by ``parse_json``."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict
