"""One call's context, as the service sees it: its id and clock, how to tell that its caller has
gone, and the fields of its log line. The HTTP edge fills it from the request; nothing here
knows HTTP."""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from reflectrm.serving.admission import DEFAULT_TENANT


async def _never() -> bool:
    return False


@dataclass
class CallContext:
    request_id: str
    # Whose call it is, for fair queuing and per-tenant bounds: the API key's identity (with
    # "/job" for a job the caller named: a tenant within the key's share), or the tenant the
    # caller named when keys are off.
    tenant: str = DEFAULT_TENANT
    # True once the caller has gone away; the call's work is then cancelled.
    is_disconnected: Callable[[], Awaitable[bool]] = _never
    # The fields of the call's log line (the access log owns the dict and writes it out).
    log: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)
    # The engine requests' ids: the request id made unique, since clients choose request ids
    # (X-Request-ID) and two requests in flight may carry the same one.
    engine_id: str = ""

    def __post_init__(self) -> None:
        if not self.engine_id:
            self.engine_id = f"{self.request_id}-{secrets.token_hex(4)}"

    @property
    def seconds(self) -> float:
        return time.monotonic() - self.started

    @property
    def latency_ms(self) -> float:
        return round(self.seconds * 1000, 1)

    def note(self, **fields: Any) -> None:
        """Add fields (mode, outcome) to the call's log line."""
        self.log.update(fields)

    def count(self, **amounts: int) -> None:
        """Add amounts (tokens, engine requests) to the call's log line; they add up."""
        for key, amount in amounts.items():
            self.log[key] = self.log.get(key, 0) + amount
