"""One retry policy for every HTTP caller: the Python client, the remote engine, evaluation.

A ``RetryPolicy`` says how many times a request is repeated, after which failures (answer
statuses, exception types), and how long to wait: an exponential backoff, optionally capped and
jittered, never shorter than the server's Retry-After (optionally capped too). ``retry_call`` and
``retry_call_async`` run the attempts; each caller keeps its own numbers as a policy instance.

A call ends with the first answer the policy does not retry (a success, or a status outside
``statuses``), with the last answer once the retries are used up, or by raising the attempt's
exception when it is not one of ``errors`` or the retries are used up. Cancellation is never
retried.
"""

from __future__ import annotations

import asyncio
import math
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

import httpx

# Failures before any byte of the request reached the server, or of a connection it dropped
# (the default ``errors``; a read timeout is not one: the server may still be working on it).
CONNECTION_ERRORS: tuple[type[Exception], ...] = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.PoolTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
)

# What one attempt ended with: an answer, or the exception the request raised.
AttemptResult = httpx.Response | Exception
# Called before each wait: (the failed attempt's number from 0, what it ended with, the wait).
OnRetry = Callable[[int, AttemptResult, float], None]


class Random(Protocol):
    def random(self) -> float: ...


_RNG = random.Random()


@dataclass(frozen=True)
class RetryPolicy:
    """When and how long to wait before repeating a request. The defaults are the Python
    client's (``reflectrm.client``)."""

    max_retries: int = 8  # attempts after the first
    backoff_s: float = 1.0  # the first wait; doubled per retry
    max_backoff_s: float = 60.0  # the backoff's cap (not Retry-After's); math.inf: none
    jitter: float = 0.5  # each wait is drawn uniformly from [wait * (1 - jitter), wait]
    statuses: frozenset[int] = frozenset({429, 503})  # answers worth repeating
    errors: tuple[type[Exception], ...] = CONNECTION_ERRORS  # exceptions worth repeating
    max_retry_after_s: float = math.inf  # the longest wait a Retry-After header may impose

    @property
    def attempts(self) -> int:
        return self.max_retries + 1

    def delay(
        self, attempt: int, retry_after: float | None = None, rng: Random | None = None
    ) -> float:
        """Seconds before retry number ``attempt`` (0-based): the exponential backoff with
        jitter, never less than the server's Retry-After (spread above it by the jitter)."""
        draw = (rng if rng is not None else _RNG).random
        wait = min(self.max_backoff_s, self.backoff_s * 2.0**attempt)
        wait *= 1 - self.jitter * draw()
        if retry_after is not None:
            wait = max(wait, retry_after * (1 + self.jitter * draw()))
        return wait

    def retry_after(self, response: httpx.Response) -> float | None:
        """The answer's Retry-After in seconds, at most ``max_retry_after_s``; None when it
        gives no number of seconds (the backoff applies)."""
        seconds = retry_after_of(response)
        return None if seconds is None else min(seconds, self.max_retry_after_s)

    def wait_after(
        self, attempt: int, result: AttemptResult, rng: Random | None = None
    ) -> float | None:
        """Seconds to wait before repeating a request whose attempt number ``attempt`` (0-based)
        ended with ``result``, or None when that result is final."""
        if attempt >= self.max_retries:
            return None
        if isinstance(result, Exception):
            return self.delay(attempt, None, rng) if isinstance(result, self.errors) else None
        if result.status_code not in self.statuses:
            return None
        return self.delay(attempt, self.retry_after(result), rng)


def retry_after_of(response: httpx.Response) -> float | None:
    """The Retry-After header in seconds (negative counts as 0), or None when it is missing, an
    HTTP date, or not a finite number."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        return None
    return max(0.0, seconds) if math.isfinite(seconds) else None


class _Decisions:
    """The retry loop's decisions, one per attempt, shared by the sync and async loops."""

    def __init__(self, policy: RetryPolicy, rng: Random | None, on_retry: OnRetry | None) -> None:
        self.policy, self.rng, self.on_retry = policy, rng, on_retry
        self.attempt = 0

    def wait_after(self, result: AttemptResult) -> float | None:
        """Seconds to wait before the next attempt (told to ``on_retry``), or None when
        ``result`` is the call's."""
        wait = self.policy.wait_after(self.attempt, result, self.rng)
        if wait is not None:
            if self.on_retry is not None:
                self.on_retry(self.attempt, result, wait)
            self.attempt += 1
        return wait


def retry_call(
    policy: RetryPolicy,
    send: Callable[[], httpx.Response],
    *,
    sleep: Callable[[float], object] = time.sleep,
    rng: Random | None = None,
    on_retry: OnRetry | None = None,
) -> httpx.Response:
    """``send()`` until ``policy`` says its result is final: that answer, or its exception."""
    decisions = _Decisions(policy, rng, on_retry)
    while True:
        try:
            response = send()
        except Exception as exc:
            if (wait := decisions.wait_after(exc)) is None:
                raise
        else:
            if (wait := decisions.wait_after(response)) is None:
                return response
        sleep(wait)


async def retry_call_async(
    policy: RetryPolicy,
    send: Callable[[], Awaitable[httpx.Response]],
    *,
    sleep: Callable[[float], Awaitable[object]] = asyncio.sleep,
    rng: Random | None = None,
    on_retry: OnRetry | None = None,
) -> httpx.Response:
    """``await send()`` until ``policy`` says its result is final: that answer, or its
    exception."""
    decisions = _Decisions(policy, rng, on_retry)
    while True:
        try:
            response = await send()
        except Exception as exc:
            if (wait := decisions.wait_after(exc)) is None:
                raise
        else:
            if (wait := decisions.wait_after(response)) is None:
                return response
        await sleep(wait)
