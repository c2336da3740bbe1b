"""Optional API keys: ``Authorization: Bearer <key>`` on every route but the probes, or the key
as the password of HTTP Basic auth, for clients that can set only a URL.

Off unless keys are configured (``REFLECTRM_API_KEYS``, ``REFLECTRM_API_KEY_FILE``). With keys,
a request without a valid key gets 401 with ``WWW-Authenticate: Bearer``; the key may also come
as ``Authorization: Basic base64(job:key)``, which HTTP clients such as aiohttp and requests send
for a URL with user info (``http://job-a:KEY@judge:8000/get_reward``: OpenRLHF's client sends no
headers of its own), the user name naming the job (``dependencies.tenant_of``); ``/health`` and
``/ready`` stay open for orchestrators, and so does ``/metrics`` unless
``REFLECTRM_METRICS_REQUIRE_KEY`` is set. Keys are compared as SHA-256 digests with
``hmac.compare_digest``, against every configured key, so the time taken does not depend on how
much of a key matched. Keys never appear in logs or error messages.

A valid key is also its caller's tenant for fair queuing: ``key-`` and the first 12 hex digits of
the key's SHA-256 (``tenant_of_key``), a name that says which key without being it. A job the
caller names (the Basic user name) is a tenant within the key's share, ``key-.../job-a``.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import json
from collections.abc import Iterable
from pathlib import Path

from starlette.types import ASGIApp, Receive, Scope, Send

from reflectrm.settings import Settings

# Shortest key accepted: guessing a 16-character random key is hopeless; a shorter one may not be.
MIN_KEY_CHARS = 16
# Open with keys configured: liveness and readiness probes, and the API's own description.
OPEN_PATHS = frozenset(
    {"/health", "/ready", "/docs", "/docs/oauth2-redirect", "/redoc", "/openapi.json"}
)
REALM = 'Bearer realm="reflectrm"'
BASIC_REALM = 'Basic realm="reflectrm", charset="UTF-8"'


class KeyConfigError(ValueError):
    """The configured keys cannot be used; the service refuses to start rather than run open."""


def load_keys(settings: Settings) -> list[str]:
    """The configured keys: REFLECTRM_API_KEYS (comma-separated) and the lines of
    REFLECTRM_API_KEY_FILE (blank lines and # comments skipped). Empty: authentication off."""
    keys: list[str] = []
    if settings.api_keys is not None:
        keys += [k.strip() for k in settings.api_keys.get_secret_value().split(",") if k.strip()]
    if settings.api_key_file is not None:
        path = Path(settings.api_key_file)
        try:
            lines = path.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise KeyConfigError(
                f"REFLECTRM_API_KEY_FILE {path} cannot be read ({type(exc).__name__})"
            ) from None
        file_keys = [ln.strip() for ln in lines if ln.strip() and not ln.lstrip().startswith("#")]
        if not file_keys:
            raise KeyConfigError(f"REFLECTRM_API_KEY_FILE {path} holds no key")
        keys += file_keys
    short = sum(len(k) < MIN_KEY_CHARS for k in keys)
    if short:
        raise KeyConfigError(
            f"{short} configured API key(s) shorter than {MIN_KEY_CHARS} characters; use long "
            "random keys, e.g. `python -c 'import secrets; print(secrets.token_urlsafe(32))'`"
        )
    return keys


TENANT_KEY = "reflectrm_tenant"


def _digest(key: bytes) -> bytes:
    return hashlib.sha256(key).digest()


def tenant_of_key(key: str | bytes) -> str:
    """The tenant name of an API key (for REFLECTRM_TENANT_WEIGHTS and the metrics)."""
    raw = key.encode() if isinstance(key, str) else key
    return "key-" + hashlib.sha256(raw).hexdigest()[:12]


class ApiKeyAuth:
    """ASGI middleware: every request outside the open paths needs one of the keys."""

    def __init__(self, app: ASGIApp, keys: Iterable[str], metrics_open: bool = True) -> None:
        self.app = app
        self._digests = [_digest(k.encode()) for k in keys]
        self._open = OPEN_PATHS | ({"/metrics"} if metrics_open else set())

    def allowed(self, token: bytes) -> bool:
        presented = _digest(token)
        ok = False
        for digest in self._digests:  # no early exit: the time does not say which key matched
            ok |= hmac.compare_digest(presented, digest)
        return ok

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope.get("path") in self._open:
            await self.app(scope, receive, send)
            return
        token = _bearer(scope)
        basic = basic_credentials(scope) if token is None else None
        if basic is not None:
            key = basic[1]
            if not self.allowed(key):
                await _refuse(
                    send,
                    "the API key is not valid: the password of HTTP Basic auth (the KEY of a "
                    "URL http://JOB:KEY@host:port/...) must be one of this service's API keys",
                    f"{REALM}, {BASIC_REALM}",
                )
                return
        elif token is not None:
            key = token
            if not self.allowed(key):
                await _refuse(send, "the API key is not valid", f'{REALM}, error="invalid_token"')
                return
        elif authorization(scope, b"basic") is not None:
            await _refuse(
                send,
                "the Authorization header's Basic credentials are not base64 of "
                "'user:password'; the API key is the password (a URL "
                "http://JOB:KEY@host:port/... sends it so)",
                f"{REALM}, {BASIC_REALM}",
            )
            return
        else:
            await _refuse(
                send,
                "this service needs an API key: send the header Authorization: Bearer <key>, "
                "or, from a client that sends no headers, give it in the URL as the password "
                "of HTTP Basic auth: http://JOB:KEY@host:port/... (JOB names the job)",
                REALM,
            )
            return
        scope.setdefault("state", {})[TENANT_KEY] = tenant_of_key(key)
        await self.app(scope, receive, send)


def authorization(scope: Scope, scheme: bytes) -> bytes | None:
    """The credentials of the request's Authorization header if it uses ``scheme``."""
    for name, value in scope.get("headers", ()):
        if name == b"authorization":
            given, _, credentials = value.partition(b" ")
            return credentials.strip() if given.lower() == scheme else None
    return None


def basic_credentials(scope: Scope) -> tuple[str, bytes] | None:
    """HTTP Basic auth's user name and password (RFC 7617), or None without well-formed ones."""
    encoded = authorization(scope, b"basic")
    if not encoded:
        return None
    try:
        user, sep, password = base64.b64decode(encoded, validate=True).partition(b":")
    except (binascii.Error, ValueError):
        return None
    if not sep:
        return None
    return user.decode("utf-8", errors="replace"), password


def _bearer(scope: Scope) -> bytes | None:
    token = authorization(scope, b"bearer")
    return token or None


async def _refuse(send: Send, detail: str, challenge: str) -> None:
    body = json.dumps({"detail": detail}).encode()
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
        (b"www-authenticate", challenge.encode()),
    ]
    await send({"type": "http.response.start", "status": 401, "headers": headers})
    await send({"type": "http.response.body", "body": body})
