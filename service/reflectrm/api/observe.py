"""Request-level metrics around the judge route: how each request ended and how long it took."""

from __future__ import annotations

import asyncio
import functools
import time
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import HTTPException

from reflectrm.api import schemas
from reflectrm.api.state import ServiceState
from reflectrm.consistency import swap_result
from reflectrm.metrics import outcome_of_status

Endpoint = Callable[..., Awaitable[schemas.JudgeResponse]]


def observed(endpoint: Endpoint) -> Endpoint:
    """Record the outcome and latency of every call of a judge endpoint, and the result of a
    requested swap check. FastAPI reads the endpoint's signature through ``__wrapped__``."""

    @functools.wraps(endpoint)
    async def wrapper(**kwargs: Any) -> schemas.JudgeResponse:
        body: schemas.JudgeRequest = kwargs["body"]
        state: ServiceState = kwargs["state"]
        metrics = state.metrics
        started = time.monotonic()
        try:
            response = await endpoint(**kwargs)
        except HTTPException as exc:
            metrics.observe_request(body.mode, outcome_of_status(exc.status_code))
            raise
        except asyncio.CancelledError:
            metrics.observe_request(body.mode, "disconnected")
            raise
        except Exception:
            metrics.observe_request(body.mode, "error")
            raise
        metrics.observe_request(body.mode, response.outcome, time.monotonic() - started)
        if body.check_swap:
            metrics.observe_swap_check("requested", swap_result(response.consistent))
        return response

    return wrapper
