"""The judging service's own failures. ``reflectrm.api.errors`` maps each to an HTTP status, once.

Each carries ``outcome``, the label under which the metrics count the call it ended.
"""

from __future__ import annotations

import asyncio

from reflectrm.engines.base import EngineError
from reflectrm.judging.judge import PromptTooLongError

# Retry-After (seconds) for a service that is loading, stopping or without an engine.
DEFAULT_RETRY_AFTER_S = 5


class ServiceError(Exception):
    """A call the service could not answer; ``str(exc)`` says what to fix or what happened."""

    outcome = "error"


class InvalidRequestError(ServiceError):
    """The call asks for something this server does not allow (a limit, a disabled field)."""

    outcome = "invalid"


class TooMuchWorkError(InvalidRequestError):
    """One call asks for more engine work than this server allows in one call
    (REFLECTRM_MAX_CALL_WORK_TOKENS)."""


class UnavailableError(ServiceError):
    """No engine to judge with: loading, failed, or stopping. Retry later or elsewhere."""

    outcome = "unavailable"
    retry_after_s = DEFAULT_RETRY_AFTER_S


class OverloadedError(ServiceError):
    """No slot within the queue's bounds; retry after ``retry_after_s`` seconds. ``bound``
    names the bound that refused it (queue, tenant_queue, queue_timeout, tenants)."""

    outcome = "rejected"

    def __init__(self, detail: str, retry_after_s: int, bound: str = "queue") -> None:
        super().__init__(detail)
        self.retry_after_s = retry_after_s
        self.bound = bound


class ClosedError(ServiceError):
    """Admission is closed (the service is stopping, or its engine failed); retry elsewhere."""

    outcome = "unavailable"
    retry_after_s = DEFAULT_RETRY_AFTER_S


class DeadlineExceededError(ServiceError):
    """The admitted work did not finish within its deadline; it was cancelled."""

    outcome = "timeout"


class ClientGoneError(ServiceError):
    """The client disconnected; its work was cancelled."""

    outcome = "disconnected"


def outcome_of(exc: BaseException) -> str:
    """How a failed call is counted in the metrics."""
    if isinstance(exc, ServiceError):
        return exc.outcome
    if isinstance(exc, PromptTooLongError):
        return "too_long"
    if isinstance(exc, EngineError):
        return "unavailable"
    if isinstance(exc, asyncio.CancelledError):
        return "disconnected"  # the server cancels a request's task when its client goes away
    return "error"
